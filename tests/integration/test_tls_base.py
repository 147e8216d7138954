"""TLS building blocks with real handshakes on 127.0.0.1: `autoswitch certs init` makes a CA and
per-identity certificates; gRPC servers and asyncio servers built from a TLSConfig accept a client
with a certificate from that CA and refuse one without a certificate or with another CA's."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import grpc
import pytest

from autoswitch.app.certs import init_dev_ca
from autoswitch.base.errors import ConfigError
from autoswitch.base.tls import (
    TLSConfig,
    client_ssl_context,
    grpc_channel_credentials,
    grpc_server_credentials,
    server_ssl_context,
)
from tests.procs import HOST

pytestmark = pytest.mark.integration


def _cfg(paths: dict[str, str], **kw) -> TLSConfig:
    return TLSConfig(ca=paths["ca"], cert=paths["cert"], key=paths["key"], **kw).validate()


def _echo_handler():
    def echo(request: bytes, context) -> bytes:
        return request

    return grpc.method_handlers_generic_handler(
        "test.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})


async def _call(port: int, creds) -> bytes:
    async with grpc.aio.secure_channel(f"{HOST}:{port}", creds) as ch:
        return await ch.unary_unary("/test.Echo/Echo")(b"ping", timeout=10)


def test_grpc_mutual_tls_accepts_the_ca_and_refuses_the_rest(tmp_path):
    ours = init_dev_ca(tmp_path / "ours", ["controller/n1", "admin"])
    theirs = init_dev_ca(tmp_path / "theirs", ["admin"])

    async def go():
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((_echo_handler(),))
        port = server.add_secure_port(f"{HOST}:0", grpc_server_credentials(_cfg(ours["controller/n1"])))
        await server.start()
        try:
            assert await _call(port, grpc_channel_credentials(_cfg(ours["admin"]))) == b"ping"
            no_cert = grpc.ssl_channel_credentials(root_certificates=open(ours["admin"]["ca"], "rb").read())
            with pytest.raises(grpc.aio.AioRpcError):
                await _call(port, no_cert)
            with pytest.raises(grpc.aio.AioRpcError):        # a certificate from another CA
                await _call(port, grpc.ssl_channel_credentials(
                    root_certificates=open(ours["admin"]["ca"], "rb").read(),
                    private_key=open(theirs["admin"]["key"], "rb").read(),
                    certificate_chain=open(theirs["admin"]["cert"], "rb").read()))
            with pytest.raises(grpc.aio.AioRpcError):        # plaintext against a TLS port
                async with grpc.aio.insecure_channel(f"{HOST}:{port}") as ch:
                    await ch.unary_unary("/test.Echo/Echo")(b"ping", timeout=10)
        finally:
            await server.stop(None)

    asyncio.run(go())


def test_asyncio_mutual_tls_for_the_ha_port(tmp_path):
    ours = init_dev_ca(tmp_path / "ours", ["broker/g1/1", "broker/g1/2"])
    theirs = init_dev_ca(tmp_path / "theirs", ["broker/g1/2"])

    async def go():
        async def echo(reader, writer):
            try:
                writer.write(await reader.readexactly(4))
                await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(echo, HOST, 0, ssl=server_ssl_context(_cfg(ours["broker/g1/1"])))
        port = server.sockets[0].getsockname()[1]
        try:
            r, w = await asyncio.open_connection(HOST, port, ssl=client_ssl_context(_cfg(ours["broker/g1/2"])))
            w.write(b"ping")
            assert await r.readexactly(4) == b"ping"
            w.close()
            bad = client_ssl_context(TLSConfig(ca=ours["broker/g1/2"]["ca"], cert=theirs["broker/g1/2"]["cert"],
                                               key=theirs["broker/g1/2"]["key"]))
            with pytest.raises((ConnectionError, OSError, asyncio.IncompleteReadError)):
                r, w = await asyncio.open_connection(HOST, port, ssl=bad)
                w.write(b"ping")
                await r.readexactly(4)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(go())


def test_a_tls_config_names_what_is_missing_or_not_pem(tmp_path):
    with pytest.raises(ConfigError, match="missing"):
        TLSConfig(ca=str(tmp_path / "ca.pem")).validate()
    (tmp_path / "x").write_text("not a pem")
    with pytest.raises(ConfigError, match="not a PEM"):
        TLSConfig(ca=str(tmp_path / "x"), cert=str(tmp_path / "x"), key=str(tmp_path / "x")).validate()
    assert not TLSConfig.off().enabled and TLSConfig.off().validate() == TLSConfig.off()


def test_certs_init_for_people_is_one_line_per_identity_within_80_columns(tmp_path):
    """Issue 64 item 4: the human output was a column per identity, every path wrapped."""
    d = tmp_path / "a-rather-long-folder-name-for-the-cluster-certificates"
    ids = ["controller/n1", "controller/n2", "controller/n3", "broker/g0-r0", "broker/g0-r1", "admin"]
    out = subprocess.run([sys.executable, "-m", "autoswitch", "certs", "init", str(d), *ids], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("6 certificates in ") and "CA ca.pem" in out.stdout, out.stdout
    for name in ids:
        row = [ln for ln in lines if ln.startswith(name + " ")]
        assert len(row) == 1 and name.replace("/", "_") + ".pem" in row[0], out.stdout
    assert all(len(ln) <= 80 for ln in lines[2:]), out.stdout


def test_certs_init_cli(tmp_path):
    out = subprocess.run([sys.executable, "-m", "autoswitch", "certs", "init", str(tmp_path / "d"), "admin",
                          "broker/g1/2", "--json"], capture_output=True, text=True, timeout=120, check=True)
    env = json.loads(out.stdout.strip().splitlines()[-1])
    assert env["ok"] and env["command"] == "certs init"
    ids = env["result"]["identities"]
    assert set(ids) == {"admin", "broker/g1/2"}
    assert (tmp_path / "d" / "broker_g1_2.key").stat().st_mode & 0o777 == 0o600
    bad = subprocess.run([sys.executable, "-m", "autoswitch", "certs", "init", str(tmp_path / "e"), "bad name!",
                          "--json"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "identities must match" in json.loads(bad.stdout)["error"]["message"]


def test_server_certificates_rotate_without_a_restart(tmp_path):
    """Replace the server's files (here: a whole new CA) while it runs: the next handshake uses the
    new ones; a file that is not PEM keeps the last good set."""
    import shutil

    a = init_dev_ca(tmp_path / "a", ["server", "client"])
    b = init_dev_ca(tmp_path / "b", ["server", "client"])
    live = tmp_path / "live"
    live.mkdir()

    def install(ids) -> None:
        for k in ("ca", "cert", "key"):
            tmp = live / f"{k}.tmp"
            shutil.copyfile(ids["server"][k], tmp)
            tmp.replace(live / f"{k}.pem")

    install(a)
    server_cfg = TLSConfig(ca=str(live / "ca.pem"), cert=str(live / "cert.pem"), key=str(live / "key.pem"))

    async def go():
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((_echo_handler(),))
        port = server.add_secure_port(f"{HOST}:0", grpc_server_credentials(server_cfg.validate()))
        await server.start()
        try:
            assert await _call(port, grpc_channel_credentials(_cfg(a["client"]))) == b"ping"
            install(b)
            assert await _call(port, grpc_channel_credentials(_cfg(b["client"]))) == b"ping"
            with pytest.raises(grpc.aio.AioRpcError):
                await _call(port, grpc_channel_credentials(_cfg(a["client"])))
            (live / "cert.pem").write_text("not a certificate")      # a broken rotation
            assert await _call(port, grpc_channel_credentials(_cfg(b["client"]))) == b"ping"
        finally:
            await server.stop(None)

    asyncio.run(go())


def test_one_port_accepts_plaintext_and_tls_during_a_migration(tmp_path):
    """bind() with accept_plaintext: plaintext and mutual-TLS clients both reach the gRPC server
    on one public port, the TLS client's certificate still reaches the handler (end to end), and a
    plaintext client has none."""
    from autoswitch.base.tls import bind, peer_identity

    ids = init_dev_ca(tmp_path / "ca", ["controller/n1", "admin"])
    seen: list[str | None] = []

    def who(request: bytes, context) -> bytes:
        seen.append(peer_identity(context))
        return request

    async def go():
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "test.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(who)}),))
        listener = await bind(server, f"{HOST}:0", _cfg(ids["controller/n1"], accept_plaintext=True), "test")
        assert listener.port and listener.front is not None
        await server.start()
        try:
            assert await _call(listener.port, grpc_channel_credentials(_cfg(ids["admin"]))) == b"ping"
            async with grpc.aio.insecure_channel(f"{HOST}:{listener.port}") as ch:
                assert await ch.unary_unary("/test.Echo/Echo")(b"ping", timeout=10) == b"ping"
            assert seen == ["admin", None]
            assert listener.front.counts["tls"] >= 1 and listener.front.counts["plaintext"] >= 1
        finally:
            await listener.close()
            await server.stop(None)

    asyncio.run(go())


def test_the_ha_port_certificates_rotate_without_a_restart(tmp_path):
    """The asyncio (HA port) server context follows its files like the gRPC servers: after a swap
    to a new CA, the next handshake uses the new certificate and CA; a broken rotation keeps the
    last good set."""
    import shutil

    a = init_dev_ca(tmp_path / "a", ["broker/g1/1", "broker/g1/2"])
    b = init_dev_ca(tmp_path / "b", ["broker/g1/1", "broker/g1/2"])
    live = tmp_path / "live"
    live.mkdir()

    def install(ids) -> None:
        for k in ("ca", "cert", "key"):
            tmp = live / f"{k}.tmp"
            shutil.copyfile(ids["broker/g1/1"][k], tmp)
            tmp.replace(live / f"{k}.pem")

    install(a)
    cfg = TLSConfig(ca=str(live / "ca.pem"), cert=str(live / "cert.pem"), key=str(live / "key.pem")).validate()

    async def go():
        async def echo(reader, writer):
            try:
                writer.write(await reader.readexactly(4))
                await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(echo, HOST, 0, ssl=server_ssl_context(cfg))
        port = server.sockets[0].getsockname()[1]

        async def ping(client) -> bytes:
            r, w = await asyncio.open_connection(HOST, port, ssl=client_ssl_context(_cfg(client["broker/g1/2"])),
                                                 server_hostname=HOST)
            try:
                w.write(b"ping")
                return await r.readexactly(4)
            finally:
                w.close()

        try:
            assert await ping(a) == b"ping"
            install(b)
            assert await ping(b) == b"ping"
            with pytest.raises((ConnectionError, OSError, asyncio.IncompleteReadError)):
                await ping(a)
            (live / "cert.pem").write_text("not a certificate")      # a broken rotation
            assert await ping(b) == b"ping"
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(go())
