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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autoswitch.base.addr import split_hostport
from autoswitch.base.errors import ConfigError

if TYPE_CHECKING:
    from autoswitch.base.dualport import DualPortFront

MAX_PEM_BYTES = 1 << 20   # a CA bundle, certificate or key larger than this is not one


@dataclass(frozen=True)
class TLSConfig:
    ca: str = ""                    # PEM bundle of the CAs whose certificates we accept
    cert: str = ""                  # our certificate chain (PEM)
    key: str = ""                   # our private key (PEM)
    require_client_cert: bool = True
    # A bearer token this process presents as a client (autoswitch.base.auth); needs TLS, since
    # a token sent in clear is a token given away. With a token, cert and key are optional.
    token: str = ""
    # The plaintext -> TLS migration (docs/security.md): servers also accept plaintext on the same
    # ports (autoswitch.base.dualport); clients still dial in plaintext (its first step).
    accept_plaintext: bool = False
    dial_plaintext: bool = False

    @classmethod
    def off(cls) -> TLSConfig:
        return cls()

    @property
    def enabled(self) -> bool:
        return bool(self.ca or self.cert or self.key)

    @property
    def dials_tls(self) -> bool:
        return self.enabled and not self.dial_plaintext

    def validate(self, server: bool = False) -> TLSConfig:
        """Files readable and PEM; a server needs all three, a client with a token only the CA."""
        if self.token and not self.enabled:
            raise ConfigError("a token needs TLS (at least tls_ca): it would travel in clear", key="token")
        if self.token and ("\n" in self.token or len(self.token) > 4096):
            raise ConfigError("the token is not a single line of at most 4096 characters", key="token")
        if (self.accept_plaintext or self.dial_plaintext) and not self.enabled:
            raise ConfigError("tls_accept_plaintext / tls_dial_plaintext are steps of a migration to TLS: "
                              "configure tls_ca, tls_cert and tls_key", key="tls_accept_plaintext")
        if self.dial_plaintext and not self.accept_plaintext and server:
            raise ConfigError("tls_dial_plaintext without tls_accept_plaintext: this process would refuse "
                              "the plaintext it still speaks to others", key="tls_dial_plaintext")
        if not self.enabled:
            return self
        need = ("ca", "cert", "key") if server or not self.token else ("ca",)
        missing = [k for k in need if not getattr(self, k)]
        if bool(self.cert) != bool(self.key):
            missing += [k for k in ("cert", "key") if not getattr(self, k) and k not in missing]
        if missing:
            raise ConfigError(f"tls needs ca, cert and key; missing {missing}", keys=missing)
        for k in ("ca", "cert", "key"):
            if getattr(self, k):
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


def _files_stamp(cfg: TLSConfig) -> tuple[int, ...]:
    """What tells a rotated CA, certificate or key file from the one we loaded."""
    out: list[int] = []
    for path in (cfg.ca, cfg.cert, cfg.key):
        try:
            st = os.stat(path)
            out += [st.st_mtime_ns, st.st_size, st.st_ino]
        except OSError:
            out += [-1, -1, -1]
    return tuple(out)


def grpc_server_credentials(cfg: TLSConfig):
    """``grpc.ServerCredentials`` for ``server.add_secure_port`` that follow the files: every new
    handshake checks whether the CA, certificate or key file changed and, if so, uses the new ones
    (certificate rotation without a restart; connections already open keep theirs). A rotation
    that leaves a file unreadable or not PEM keeps the last good set and logs why."""
    import grpc

    from autoswitch.base.log import get_logger

    log = get_logger("tls")

    def stamp() -> tuple[int, ...]:
        return _files_stamp(cfg)

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

    ca = _read(cfg.ca, "ca")
    cert = _read(cfg.cert, "cert") if cfg.cert else None
    key = _read(cfg.key, "key") if cfg.key else None
    creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    if cfg.token:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(cfg.token))
    return creds


def _server_ssl(cfg: TLSConfig) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cfg.cert, cfg.key)
    ctx.load_verify_locations(cfg.ca)
    ctx.verify_mode = ssl.CERT_REQUIRED if cfg.require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def server_ssl_context(cfg: TLSConfig) -> ssl.SSLContext:
    """For asyncio servers (the AutoSwitchHA port); follows the files like the gRPC servers: each
    handshake checks whether the CA, certificate or key changed and, if so, continues on a context
    built from the new ones (the server-name callback may swap a connection's context, and OpenSSL
    calls it on every ClientHello, with or without SNI). A broken rotation keeps the last good
    context and logs why."""
    from autoswitch.base.log import get_logger

    log = get_logger("tls")
    current = [_server_ssl(cfg)]
    seen = [_files_stamp(cfg)]

    def pick(ssl_obj, _server_name, _ctx) -> None:
        now = _files_stamp(cfg)
        if now != seen[0]:
            seen[0] = now                  # one attempt (and one log line) per change
            try:
                current[0] = _server_ssl(cfg)
                log.info("tls_reloaded", cert=cfg.cert, ca=cfg.ca, listener="asyncio")
            except (OSError, ssl.SSLError) as e:
                log.error("tls_reload_failed", error=str(e), note="keeping the previous certificates")
        ssl_obj.context = current[0]

    front = _server_ssl(cfg)
    front.sni_callback = pick
    return front


def client_ssl_context(cfg: TLSConfig) -> ssl.SSLContext:
    """For asyncio clients (an HA slave connecting to its master): the files as they are now
    (a slave builds one per connection attempt, so rotated files are picked up at reconnect)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cfg.cert:
        ctx.load_cert_chain(cfg.cert, cfg.key)
    ctx.load_verify_locations(cfg.ca)
    return ctx


def grpc_channel(addr: str, cfg: TLSConfig, options: Sequence[tuple[str, int | str]] | None = None):
    """A ``grpc.aio`` channel to ``addr``: mutual TLS when ``cfg`` is enabled, else plaintext."""
    import grpc

    if cfg.dials_tls:
        return grpc.aio.secure_channel(addr, grpc_channel_credentials(cfg), options=options)
    return grpc.aio.insecure_channel(addr, options=options)


def add_port(server, addr: str, cfg: TLSConfig) -> int:
    """Bind ``addr`` on a ``grpc.aio`` server, with TLS when ``cfg`` is enabled; the port, 0 on failure."""
    if cfg.enabled:
        return server.add_secure_port(addr, grpc_server_credentials(cfg))
    return server.add_insecure_port(addr)


@dataclass
class Listener:
    """A gRPC server's public port; ``front`` when it accepts plaintext and TLS (a migration)."""

    port: int
    front: DualPortFront | None = None

    async def close(self) -> None:
        if self.front is not None:
            await self.front.close()


async def bind(server, addr: str, cfg: TLSConfig, name: str = "") -> Listener:
    """Bind ``addr`` for a ``grpc.aio`` server before it starts: TLS when ``cfg`` is enabled, else
    plaintext; with ``cfg.accept_plaintext`` both, through a DualPortFront on ``addr`` and two
    internal loopback ports. Port 0 in the result = the bind failed."""
    if not (cfg.enabled and cfg.accept_plaintext):
        return Listener(add_port(server, addr, cfg))
    from autoswitch.base.dualport import DualPortFront

    tls_port = server.add_secure_port("127.0.0.1:0", grpc_server_credentials(cfg))
    plain_port = server.add_insecure_port("127.0.0.1:0")
    if not tls_port or not plain_port:
        return Listener(0)
    host, port = split_hostport(addr, listen=True)
    front = DualPortFront(("127.0.0.1", plain_port), ("127.0.0.1", tls_port), name=name or addr)
    try:
        await front.start(host.strip("[]"), port)
    except OSError:
        return Listener(0)
    return Listener(front.port, front)


def peer_identity(context) -> str | None:
    """The identity a gRPC peer proved: the subject CN of its verified client certificate (the
    identities `autoswitch certs init` issues: ``controller/n1``, ``broker/g1/2``, ``admin``);
    None over plaintext or without a client certificate."""
    names = context.auth_context().get("x509_common_name") or []
    return names[0].decode("utf-8", "replace") if names else None


def certificate_identity(cert_path: str) -> str | None:
    """The subject CN of our own certificate (what peers will see us as), or None."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_pem_x509_certificate(_read(cert_path, "cert"))
    except ValueError as e:
        raise ConfigError(f"tls cert file {cert_path!r} does not hold a certificate: {e}", key="cert") from None
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else None
    return value if isinstance(value, str) else None


def check_own_identity(kind: str, cert_path: str, node_id: str = "") -> None:
    """A ``kind`` server ("broker", "controller", "namesrv") starting with the certificate at
    ``cert_path``: ConfigError when it names another kind of process (auth.server_identity_problem)."""
    from autoswitch.base.auth import server_identity_problem

    if cert_path:
        why = server_identity_problem(kind, certificate_identity(cert_path), node_id)
        if why:
            raise ConfigError(why, key="tls_cert")


# A certificate is bound to one controller cluster by a URI subject alternative name
# ``urn:autoswitch:cluster:<name>`` (``autoswitch certs init --cluster``): a controller accepts Raft
# peers only with its own cluster's binding, so another cluster's ``controller/n1`` under the same
# CA is refused (docs/security.md, "Raft peers").
CLUSTER_URI_PREFIX = "urn:autoswitch:cluster:"


def _pem_clusters(pem: bytes) -> tuple[str, ...]:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(pem)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return ()
    uris = sans.get_values_for_type(x509.UniformResourceIdentifier)
    return tuple(u[len(CLUSTER_URI_PREFIX):] for u in uris if u.startswith(CLUSTER_URI_PREFIX))


_CLUSTER_CACHE: dict[bytes, tuple[str, ...]] = {}
_CLUSTER_CACHE_MAX = 1024


def pem_cluster(pem: bytes) -> str | None:
    """The cluster a PEM certificate is bound to; None when it names none or several (ambiguous
    bindings bind to nothing). Parsed once per distinct certificate (bounded cache)."""
    found = _CLUSTER_CACHE.get(pem)
    if found is None:
        found = _pem_clusters(pem)
        if len(_CLUSTER_CACHE) >= _CLUSTER_CACHE_MAX:
            _CLUSTER_CACHE.clear()
        _CLUSTER_CACHE[pem] = found
    return found[0] if len(found) == 1 else None


def certificate_cluster(cert_path: str) -> str | None:
    """The cluster our own certificate is bound to (see ``pem_cluster``)."""
    return pem_cluster(_read(cert_path, "cert"))


def peer_cluster(context) -> str | None:
    """The cluster binding of the verified client certificate of a gRPC peer, else None."""
    pems = context.auth_context().get("x509_pem_cert") or []
    return pem_cluster(pems[0]) if pems else None


def ssl_peer_identity(ssl_object) -> str | None:
    """The subject CN of the verified certificate an asyncio TLS peer presented, else None."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    for rdn in (cert or {}).get("subject", ()):
        for k, v in rdn:
            if k == "commonName":
                return str(v)
    return None


# --------------------------------------------------------------------------- command lines

PROFILE_KEYS = ("tls_ca", "tls_cert", "tls_key", "token", "token_file", "controllers", "namesrv")
# profile keys that are not file paths (the others are relative to the profile's directory)
_PROFILE_VALUES = ("token", "controllers", "namesrv")


def add_tls_args(p) -> None:
    """--tls-ca/--tls-cert/--tls-key/--token/--profile on an argparse parser. Each falls back to
    its environment variable (AUTOSWITCH_TLS_CA, _CERT, _KEY, AUTOSWITCH_TOKEN), then to the
    profile file (--profile or AUTOSWITCH_PROFILE: a TOML file with those keys, or token_file);
    none of them = plaintext."""
    for name in ("ca", "cert", "key"):
        p.add_argument(f"--tls-{name}", default=None, help=f"PEM {name} (env AUTOSWITCH_TLS_{name.upper()})")
    p.add_argument("--token", default=None, help="bearer token (env AUTOSWITCH_TOKEN); needs --tls-ca")
    p.add_argument("--profile", default=None,
                   help="TOML file with tls_ca, tls_cert, tls_key, token or token_file, and default controllers / "
                        "namesrv addresses (env AUTOSWITCH_PROFILE)")


def add_server_security_args(p, auth_help: str) -> None:
    """The server processes' flags beside add_tls_args: authorization, tokens, the insecure
    opt-in and the two steps of the plaintext -> TLS migration (docs/security.md)."""
    p.add_argument("--auth", action="store_const", const=True, default=None, help=auth_help)
    p.add_argument("--auth-tokens-file", default=None, help="bearer tokens (TOML of SHA-256 digests), re-read on change")
    p.add_argument("--allow-insecure", action="store_const", const=True, default=None,
                   help="accept plaintext or no authorization on a non-loopback address")
    p.add_argument("--tls-accept-plaintext", action="store_const", const=True, default=None,
                   help="migration to TLS: accept plaintext on the same ports too")
    p.add_argument("--tls-dial-plaintext", action="store_const", const=True, default=None,
                   help="migration to TLS, first step: still dial the others in plaintext")


def tls_from_args(args, server: bool = False) -> TLSConfig:
    """The client credentials named by add_tls_args' flags, environment or profile; validated.
    ``server``: a server's own credentials: its flags and AUTOSWITCH_TLS_* only. A client profile
    (AUTOSWITCH_PROFILE, --profile) and a bearer token are the CLI's: a server restarted from a
    shell that exported the playground's profile would otherwise run as ``admin``."""
    if server:
        if args.profile or args.token:
            raise ConfigError("--profile and --token are for client commands; a server takes its own "
                              "certificate (--tls-cert/--tls-key/--tls-ca, or its config file)", key="profile")
        # not validated here: the flags may name only some files, the config file the rest
        return TLSConfig(ca=args.tls_ca or os.environ.get("AUTOSWITCH_TLS_CA", ""),
                         cert=args.tls_cert or os.environ.get("AUTOSWITCH_TLS_CERT", ""),
                         key=args.tls_key or os.environ.get("AUTOSWITCH_TLS_KEY", ""))
    profile = _profile(args.profile or os.environ.get("AUTOSWITCH_PROFILE", ""))

    def pick(flag: str | None, env: str, key: str) -> str:
        return flag or os.environ.get(env, "") or profile.get(key, "")

    token = pick(args.token, "AUTOSWITCH_TOKEN", "token")
    if not token and profile.get("token_file"):
        token = _read_token(profile["token_file"])
    return TLSConfig(ca=pick(args.tls_ca, "AUTOSWITCH_TLS_CA", "tls_ca"),
                     cert=pick(args.tls_cert, "AUTOSWITCH_TLS_CERT", "tls_cert"),
                     key=pick(args.tls_key, "AUTOSWITCH_TLS_KEY", "tls_key"), token=token).validate()


def _profile(path: str) -> dict[str, str]:
    if not path:
        return {}
    import tomllib

    try:
        doc = tomllib.loads(Path(path).read_text("utf-8"))
    except OSError as e:
        raise ConfigError(f"profile {path!r} cannot be read: {e.strerror or e}", path=path) from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"profile {path!r} is not valid TOML: {e}", path=path) from None
    bad = sorted(k for k, v in doc.items() if k not in PROFILE_KEYS or not isinstance(v, str))
    if bad:
        raise ConfigError(f"profile {path!r}: unknown or non-string keys {bad}; known {list(PROFILE_KEYS)}",
                          path=path)
    base = Path(path).parent    # relative paths in a profile are relative to the profile
    return {k: (v if k in _PROFILE_VALUES or not v else str(base / v)) for k, v in doc.items()}


def profile_values(args) -> dict[str, str]:
    """The client profile's keys (--profile, else AUTOSWITCH_PROFILE); {} without one."""
    return _profile(getattr(args, "profile", None) or os.environ.get("AUTOSWITCH_PROFILE", ""))


def _read_token(path: str) -> str:
    try:
        return Path(path).read_text("utf-8").strip()
    except OSError as e:
        raise ConfigError(f"token file {path!r} cannot be read: {e.strerror or e}", path=path) from None


def transport_problem(details: str, client_tls: bool) -> tuple[bool, str] | None:
    """What an UNAVAILABLE at connection time means for the operator, from gRPC's details:
    (final, hint), or None when nothing is recognised. ``final``: a TLS mismatch no retry can
    fix (say so at once instead of retrying until the deadline); otherwise the hint is added to
    the error the retries end with."""
    d = details or ""
    low = d.lower()
    if "handshake failed" in low or "ssl_error" in low:
        if "WRONG_VERSION_NUMBER" in d:
            return True, ("the server does not speak TLS there (a plaintext port, or not an autoswitch server): "
                          "drop --tls-ca/--profile or give its TLS port")
        if "ALERT" in d:
            return True, ("the server refused our certificate: is --tls-cert signed by the CA the server trusts "
                          "(another cluster's CA?), and not expired?")
        return True, ("the server's certificate does not verify against --tls-ca (another CA?) or does not name "
                      "this address (certificates list their hosts: `certs init --host`)")
    if "socket closed" in low:
        if not client_tls:
            return False, ("the server closed the connection at once: does it use TLS? give --tls-ca, --tls-cert "
                           "and --tls-key or --profile")
        return False, ("the server closed the connection at once: did it refuse our certificate (signed by a CA "
                       "it does not trust, or expired)? Its log says why")
    return None
