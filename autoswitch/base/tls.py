"""TLS for every listener and client: one config shape, one place that turns it into gRPC
credentials or an asyncio SSLContext.

A process's ``[tls]`` table (or CLI flags) gives a CA bundle, its own certificate and key, and
whether clients must present a certificate (mutual TLS). No table (``TLSConfig.off()``) means
plaintext, which start-up logs as such. Files are read when credentials are built; a server
rebuilds them on reload (certificate rotation without a restart comes through ``reload``).
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from autoswitch.base.errors import ConfigError

MAX_PEM_BYTES = 1 << 20   # a CA bundle, certificate or key larger than this is not one


@dataclass(frozen=True)
class TLSConfig:
    ca: str = ""                    # PEM bundle of the CAs whose certificates we accept
    cert: str = ""                  # our certificate chain (PEM)
    key: str = ""                   # our private key (PEM)
    require_client_cert: bool = True

    @classmethod
    def off(cls) -> TLSConfig:
        return cls()

    @property
    def enabled(self) -> bool:
        return bool(self.ca or self.cert or self.key)

    def validate(self) -> TLSConfig:
        if not self.enabled:
            return self
        missing = [k for k in ("ca", "cert", "key") if not getattr(self, k)]
        if missing:
            raise ConfigError(f"tls needs ca, cert and key; missing {missing}", keys=missing)
        for k in ("ca", "cert", "key"):
            _read(getattr(self, k), k)
        return self

    def pem(self) -> tuple[bytes, bytes, bytes]:
        """(ca, cert, key) bytes, read now."""
        return _read(self.ca, "ca"), _read(self.cert, "cert"), _read(self.key, "key")


def _read(path: str, what: str) -> bytes:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"tls {what} file {path!r} cannot be read: {e.strerror or e}", key=what, path=path) from None
    if not data or len(data) > MAX_PEM_BYTES or b"-----BEGIN " not in data:
        raise ConfigError(f"tls {what} file {path!r} is not a PEM file", key=what, path=path)
    return data


def grpc_server_credentials(cfg: TLSConfig):
    """``grpc.ServerCredentials`` for ``server.add_secure_port`` that follow the files: every new
    handshake checks whether the CA, certificate or key file changed and, if so, uses the new ones
    (certificate rotation without a restart; connections already open keep theirs). A rotation
    that leaves a file unreadable or not PEM keeps the last good set and logs why."""
    import grpc

    from autoswitch.base.log import get_logger

    log = get_logger("tls")

    def stamp() -> tuple[int, ...]:
        out = []
        for path in (cfg.ca, cfg.cert, cfg.key):
            try:
                st = os.stat(path)
                out += [st.st_mtime_ns, st.st_size, st.st_ino]
            except OSError:
                out += [-1, -1, -1]
        return tuple(out)

    def config():
        ca, cert, key = cfg.pem()
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    seen = [stamp()]

    def fetch():
        now = stamp()
        if now == seen[0]:
            return None           # unchanged: grpc keeps the current configuration
        seen[0] = now             # one attempt (and one log line) per change
        try:
            fresh = config()
        except ConfigError as e:
            log.error("tls_reload_failed", error=e.message, note="keeping the previous certificates")
            return None
        log.info("tls_reloaded", cert=cfg.cert, ca=cfg.ca)
        return fresh

    return grpc.dynamic_ssl_server_credentials(config(), fetch,
                                               require_client_authentication=cfg.require_client_cert)


def grpc_channel_credentials(cfg: TLSConfig):
    """``grpc.ChannelCredentials`` for ``grpc.aio.secure_channel``: we present our certificate
    (mutual TLS) and accept servers signed by the CA."""
    import grpc

    ca, cert, key = cfg.pem()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def server_ssl_context(cfg: TLSConfig) -> ssl.SSLContext:
    """For asyncio servers (the AutoSwitchHA port)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cfg.cert, cfg.key)
    ctx.load_verify_locations(cfg.ca)
    ctx.verify_mode = ssl.CERT_REQUIRED if cfg.require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def client_ssl_context(cfg: TLSConfig) -> ssl.SSLContext:
    """For asyncio clients (an HA slave connecting to its master)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cfg.cert, cfg.key)
    ctx.load_verify_locations(cfg.ca)
    return ctx


def grpc_channel(addr: str, cfg: TLSConfig, options: list[tuple[str, int]] | None = None):
    """A ``grpc.aio`` channel to ``addr``: mutual TLS when ``cfg`` is enabled, else plaintext."""
    import grpc

    if cfg.enabled:
        return grpc.aio.secure_channel(addr, grpc_channel_credentials(cfg), options=options)
    return grpc.aio.insecure_channel(addr, options=options)


def add_port(server, addr: str, cfg: TLSConfig) -> int:
    """Bind ``addr`` on a ``grpc.aio`` server, with TLS when ``cfg`` is enabled; the port, 0 on failure."""
    if cfg.enabled:
        return server.add_secure_port(addr, grpc_server_credentials(cfg))
    return server.add_insecure_port(addr)


def peer_identity(context) -> str | None:
    """The identity a gRPC peer proved: the subject CN of its verified client certificate (the
    identities `autoswitch certs init` issues: ``controller/n1``, ``broker/g1/2``, ``admin``);
    None over plaintext or without a client certificate."""
    names = context.auth_context().get("x509_common_name") or []
    return names[0].decode("utf-8", "replace") if names else None
