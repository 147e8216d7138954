"""What one client with a valid certificate can still do to a server (issue 29, round two), tried
against real processes with mutual TLS and authorization on: a broker subprocess (its own CA,
broker/producer/reader certificates)."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from autoswitch.broker.client.client import ProducerClient
from autoswitch.broker.client.fetch_client import FetchClient, FetchRefused
from grpc_health.v1 import health_pb2, health_pb2_grpc

from autoswitch.app.certs import init_dev_ca, issue_token, revoke_token
from autoswitch.base.tls import TLSConfig, grpc_channel_credentials
from tests.integration.failover_harness import wait_until
from tests.procs import HOST, free_port, wait_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _tls(ident: dict) -> TLSConfig:
    return TLSConfig(ca=ident["ca"], cert=ident["cert"], key=ident["key"]).validate()


@pytest.fixture
def secure_broker(procs, tmp_path):
    ids = init_dev_ca(tmp_path / "tls", ["broker/g1/1", "producer/app", "reader/app"])
    tokens = tmp_path / "tokens.toml"
    reader_token = issue_token(tokens, "ops-reader", ["reader"])
    me = ids["broker/g1/1"]
    port, ha, fetch = free_port(), free_port(), free_port()
    cfg = tmp_path / "broker.toml"
    cfg.write_text("max_concurrent_rpcs = 64\n")
    procs.start("b1", ["broker", "--config", str(cfg), "--role", "master", "--epoch", "1", "--group", "g1",
                       "--listen", f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}", "--fetch-listen", f"{HOST}:{fetch}",
                       "--ack-mode", "master", "--data-dir", str(tmp_path / "b1"),
                       "--tls-ca", me["ca"], "--tls-cert", me["cert"], "--tls-key", me["key"], "--auth",
                       "--auth-tokens-file", str(tokens)])
    wait_port(port, timeout=60)
    # the fetch port opens after the gRPC server started serving (the gRPC port is bound before,
    # while the broker still recovers its store): a client before that met a closing TLS handshake
    wait_port(fetch, timeout=60)
    return {"addr": f"{HOST}:{port}", "fetch": f"{HOST}:{fetch}", "ids": ids, "tmp": tmp_path,
            "tokens": tokens, "reader_token": reader_token}


def test_a_producer_cannot_fill_the_servers_calls_with_health_watch_streams(secure_broker):
    """Item 3: a producer certificate opened Health/Watch streams until gRPC's concurrent-call limit
    was full, and every Produce failed with RESOURCE_EXHAUSTED. Streams are budgeted now: the
    producer gets some, is refused the rest, and produce keeps working while they stay open."""
    addr, ids = secure_broker["addr"], secure_broker["ids"]
    producer = _tls(ids["producer/app"])

    async def scenario() -> None:
        ch = grpc.aio.secure_channel(addr, grpc_channel_credentials(producer))
        stub = health_pb2_grpc.HealthStub(ch)
        opened, refused, calls = 0, 0, []
        try:
            for _ in range(80):                     # more than the broker's 64 concurrent calls
                call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
                calls.append(call)
                try:
                    await asyncio.wait_for(call.read(), 10)
                    opened += 1
                except grpc.aio.AioRpcError as e:
                    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
                    refused += 1
            assert refused > 0 and 0 < opened <= 32, (opened, refused)
            p = ProducerClient(addr, max_retries=0, timeout_s=10, tls=producer)
            try:
                for i in range(5):
                    out = await p.produce("t", [f"m{i}".encode()])
                    assert out.ok, out
            finally:
                await p.close()
        finally:
            for c in calls:
                c.cancel()
            await ch.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_a_token_revoked_while_its_fetch_connection_is_open_reads_no_more(secure_broker):
    """Item 4: the fetch port checked a token at HELLO only; a connection opened before the
    revocation kept reading. Every FETCH looks the token up again now."""
    addr, fetch, ids = secure_broker["addr"], secure_broker["fetch"], secure_broker["ids"]

    async def scenario() -> None:
        p = ProducerClient(addr, max_retries=0, timeout_s=10, tls=_tls(ids["producer/app"]))
        await p.produce("t", [b"secret"] * 3)
        await p.close()
        async with FetchClient(fetch, tls=_tls(ids["producer/app"]), token=secure_broker["reader_token"]) as f:
            assert len((await f.fetch("t", 0, 10)).runs) == 1
            assert revoke_token(secure_broker["tokens"], "ops-reader")
            with pytest.raises(FetchRefused, match="revoked"):
                await f.fetch("t", 0, 10)

    asyncio.run(asyncio.wait_for(scenario(), 120))


TCP_ESTABLISHED = 1


def _tcp_state(s) -> int:
    import socket
    import struct

    return struct.unpack("B", s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1))[0]


def _rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _tight_fetch_broker(procs, tmp_path):
    """A master with a fetch port whose in-flight budget is 16 MiB and whose slow-peer timeout is
    2 s: (process, gRPC port, fetch port)."""
    port, ha, fetch = free_port(), free_port(), free_port()
    cfg = tmp_path / "broker.toml"
    cfg.write_text("fetch_max_inflight_bytes = 16777216\nfetch_slow_reader_timeout_s = 2.0\n"
                   "max_fetch_connections = 1000\n")
    b = procs.start("b1", ["broker", "--config", str(cfg), "--role", "master", "--epoch", "1", "--group", "g1",
                           "--listen", f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}", "--fetch-listen",
                           f"{HOST}:{fetch}", "--ack-mode", "master", "--data-dir", str(tmp_path / "b1")])
    wait_port(port, timeout=60)
    wait_port(fetch, timeout=60)
    return b, port, fetch


def test_readers_that_never_read_cannot_grow_the_broker_and_are_closed(procs, tmp_path):
    """Item 8: 120 fetch connections that never read grew a broker from 84 MB to 2.5 GB (a reply of
    up to max_consume_bytes each, held for ever; 745 MiB for these 60 before the fix). Replies in
    flight are budgeted now and a reader that leaves one unread is closed; a reader that reads is
    still served."""
    import socket

    from autoswitch.broker import fetch_codec as fc

    b, port, fetch = _tight_fetch_broker(procs, tmp_path)

    async def load() -> None:
        p = ProducerClient(f"{HOST}:{port}", max_retries=0, timeout_s=60)
        try:
            for _ in range(12):
                assert (await p.produce("t", [b"x" * 60_000] * 40)).ok      # ~29 MB in all
        finally:
            await p.close()
    asyncio.run(load())
    pid = b.popen.pid
    before = _rss_kib(pid)
    hello = fc.encode_hello()
    ask = fc.encode_fetch(fc.FetchRequest(topic="t", queue_offset=0, max_count=10_000, min_count=0, max_wait_ms=0))
    socks = []
    try:
        for _ in range(60):
            s = socket.create_connection((HOST, fetch), timeout=30)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(hello + ask * 4)         # pipelined FETCHes, and never a byte read back
            socks.append(s)
        # until the broker has closed every connection (our side leaves ESTABLISHED on its FIN or
        # reset; we read nothing), sampling the broker's memory meanwhile
        peak = before
        open_socks = set(socks)
        deadline = time.monotonic() + 120
        while open_socks and time.monotonic() < deadline:
            peak = max(peak, _rss_kib(pid))
            open_socks = {s for s in open_socks if _tcp_state(s) == TCP_ESTABLISHED}
            time.sleep(0.1)
        assert peak - before < 120 * 1024, f"RSS grew by {(peak - before) // 1024} MiB"
        assert not open_socks, f"{len(open_socks)} connections that never read were not closed"
        assert '"fetch_slow_reader_closed"' in b.log_path.read_text()
    finally:
        for s in socks:
            s.close()

    async def reader() -> None:
        async with FetchClient(f"{HOST}:{fetch}") as f:
            assert (await f.fetch("t", 0, 10)).runs
    asyncio.run(asyncio.wait_for(reader(), 60))


def test_producers_that_never_finish_a_frame_cannot_grow_the_broker(procs, tmp_path):
    """Issue 36's PRODUCE frames may be max_request_bytes long: 40 connections that each send a
    header for 32 MiB and 6 MiB of it would park 240 MiB in the broker. Partial frames share the
    fetch port's in-flight budget: past it the senders wait and are told busy; a producer that
    sends whole frames is still served."""
    import socket

    from autoswitch.broker import fetch_codec as fc

    b, port, fetch = _tight_fetch_broker(procs, tmp_path)
    pid = b.popen.pid
    before = _rss_kib(pid)
    head = fc.encode_hello() + fc.FRAME.pack(fc.MAGIC, fc.VERSION, fc.PRODUCE, 32 << 20)
    chunk = b"\0" * (1 << 20)
    socks = []
    try:
        for _ in range(40):
            s = socket.create_connection((HOST, fetch), timeout=30)
            s.setblocking(False)
            s.send(head)
            socks.append(s)
        peak = before
        sent = dict.fromkeys(socks, 0)
        deadline = time.monotonic() + 60
        progress_at = time.monotonic()
        # until every sender sent its 6 MiB, or none got a byte further for 2.5 s (the broker
        # stopped reading them, or closed them)
        while time.monotonic() < deadline and time.monotonic() - progress_at < 2.5 \
                and any(v < 6 << 20 for v in sent.values()):
            for s in socks:
                if sent[s] < 6 << 20:
                    try:
                        n = s.send(chunk)
                    except (BlockingIOError, OSError):
                        continue
                    sent[s] += n
                    progress_at = time.monotonic()
            peak = max(peak, _rss_kib(pid))
            time.sleep(0.01)
        assert peak - before < 120 * 1024, f"RSS grew by {(peak - before) // 1024} MiB"
        assert sum(sent.values()) < 40 * (6 << 20), "every half frame was taken in"

        def told_busy() -> bool:
            return "bytes of requests being received" in b.log_path.read_text()
        wait_until(told_busy, 30, "the waiting senders told busy")
    finally:
        for s in socks:
            s.close()

    async def producer() -> None:
        async with FetchClient(f"{HOST}:{fetch}") as f:
            assert (await f.produce("t", [b"whole"])).ok
    asyncio.run(asyncio.wait_for(producer(), 60))


def _http(port: int, path: str, token: str = "") -> tuple[int, str]:
    import http.client

    c = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        c.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def test_the_status_page_shows_admin_identities_only_with_the_http_token(procs, tmp_path):
    """Issue 29: /status.json showed admin actors and their requests to anyone who reached the
    metrics port. With metrics_token_file every path but the probes needs the token, and only a
    caller with it sees identities."""
    import json
    import subprocess
    import sys

    from tests.integration.failover_harness import wait_until

    ids = init_dev_ca(tmp_path / "tls", ["controller/n1", "admin"])
    me, admin = ids["controller/n1"], ids["admin"]
    token = "t" * 32
    (tmp_path / "http.token").write_text(token + "\n")
    port, mport = free_port(), free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[controller]\nmetrics_token_file = "{tmp_path / "http.token"}"\n')
    procs.start("n1", ["controller", "--config", str(cfg), "--node-id", "n1", "--peers", f"n1={HOST}:{port}",
                       "--data-dir", str(tmp_path / "n1"), "--metrics-listen", f"{HOST}:{mport}",
                       "--tls-ca", me["ca"], "--tls-cert", me["cert"], "--tls-key", me["key"], "--auth"])
    wait_port(mport, timeout=60)
    out = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "update-controller-config", "--controller",
                          f"{HOST}:{port}", "--key", "rebalance_delay_ms=31000", "--tls-ca", admin["ca"],
                          "--tls-cert", admin["cert"], "--tls-key", admin["key"], "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert _http(mport, "/healthz")[0] == 200 and _http(mport, "/readyz")[0] in (200, 503)
    for path in ("/status.json", "/metrics", "/status"):
        assert _http(mport, path)[0] == 401, path
        assert _http(mport, path, "wrong-token-xxxxxxxx")[0] == 401, path

    def audited() -> bool:
        code, body = _http(mport, "/status.json", token)
        return code == 200 and any(e.get("actor") == "admin" for e in json.loads(body)["events"])
    wait_until(audited, 60, "the admin's action on the status page, for the token holder")


def test_without_the_token_the_status_page_hides_who_did_what():
    from autoswitch.controller.server.status_page import _redacted

    e = {"event": "AdminAudit", "actor": "admin/alice", "reason": "UpdateControllerConfig code=0 config {...}"}
    assert _redacted(e) == {"event": "AdminAudit", "actor": "(hidden)",
                            "reason": "UpdateControllerConfig (details need the HTTP token)"}
    plain = {"event": "ElectMaster", "actor": None, "reason": "master_dead"}
    assert _redacted(plain) == plain


def test_readers_that_never_read_cannot_grow_a_tls_broker(procs, tmp_path):
    """Issue 59, item 3 (the default deployment: TLS): 120 reader connections that pipelined
    fetches and never read took a broker from 95 MB to 2.45 GB in 28 s. The in-flight budget
    counted the transport's write buffer, which under TLS missed what the connection really holds.
    Now the same 16 MiB budget holds under TLS: the broker's memory stays bounded and the readers
    that never read are closed."""
    import socket
    import ssl

    from autoswitch.broker import fetch_codec as fc

    ids = init_dev_ca(tmp_path / "tls", ["broker/g1/1", "producer/app", "reader/app"])
    me, reader, prod = ids["broker/g1/1"], ids["reader/app"], ids["producer/app"]
    port, ha, fetch = free_port(), free_port(), free_port()
    cfg = tmp_path / "broker.toml"
    cfg.write_text("fetch_max_inflight_bytes = 16777216\nfetch_slow_reader_timeout_s = 2.0\n"
                   "max_fetch_connections = 1000\n")
    b = procs.start("b1", ["broker", "--config", str(cfg), "--role", "master", "--epoch", "1", "--group", "g1",
                           "--listen", f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}", "--fetch-listen",
                           f"{HOST}:{fetch}", "--ack-mode", "master", "--data-dir", str(tmp_path / "b1"),
                           "--tls-ca", me["ca"], "--tls-cert", me["cert"], "--tls-key", me["key"], "--auth"])
    wait_port(port, timeout=60)
    wait_port(fetch, timeout=60)

    async def load() -> None:
        p = ProducerClient(f"{HOST}:{port}", max_retries=0, timeout_s=60, tls=_tls(prod))
        try:
            for _ in range(12):
                assert (await p.produce("t", [b"x" * 60_000] * 40)).ok      # ~29 MB in all
        finally:
            await p.close()
    asyncio.run(load())
    pid = b.popen.pid
    before = _rss_kib(pid)
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=reader["ca"])
    ctx.load_cert_chain(reader["cert"], reader["key"])
    ctx.check_hostname = False
    ask = fc.encode_fetch(fc.FetchRequest(topic="t", queue_offset=0, max_count=10_000, min_count=0, max_wait_ms=0))
    socks = []
    try:
        for _ in range(120):
            raw = socket.create_connection((HOST, fetch), timeout=30)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s = ctx.wrap_socket(raw, server_hostname=HOST)
            s.sendall(fc.encode_hello() + ask * 8)      # pipelined FETCHes, and never a byte read back
            socks.append(s)
        peak = before
        open_socks = set(socks)
        deadline = time.monotonic() + 120
        while open_socks and time.monotonic() < deadline:
            peak = max(peak, _rss_kib(pid))
            open_socks = {s for s in open_socks if _tcp_state(s) == TCP_ESTABLISHED}
            time.sleep(0.1)
        assert peak - before < 160 * 1024, f"RSS grew by {(peak - before) // 1024} MiB"
        assert not open_socks, f"{len(open_socks)} connections that never read were not closed"
    finally:
        for s in socks:
            s.close()


def test_fetch_slots_are_shared_by_identity_and_counted_from_the_handshake(procs, tmp_path):
    """Issue 59: one reader could take all the fetch port's slots, and connections still in their
    TLS handshake were counted against no limit. Now one identity holds at most its share (here 2
    of 8), and an accepted connection counts from accept: raw connections that never finish their
    handshake keep a reader out until the HELLO timeout closes them."""
    import socket

    ids = init_dev_ca(tmp_path / "tls", ["broker/g1/1", "reader/app", "reader/other"])
    me = ids["broker/g1/1"]
    port, ha, fetch = free_port(), free_port(), free_port()
    cfg = tmp_path / "broker.toml"
    cfg.write_text("max_fetch_connections = 8\nmax_fetch_connections_per_identity = 2\n")
    procs.start("b1", ["broker", "--config", str(cfg), "--role", "master", "--epoch", "1", "--group", "g1",
                       "--listen", f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}", "--fetch-listen",
                       f"{HOST}:{fetch}", "--ack-mode", "master", "--data-dir", str(tmp_path / "b1"),
                       "--tls-ca", me["ca"], "--tls-cert", me["cert"], "--tls-key", me["key"], "--auth"])
    wait_port(port, timeout=60)
    wait_port(fetch, timeout=60)

    async def quota() -> None:
        mine = [FetchClient(f"{HOST}:{fetch}", tls=_tls(ids["reader/app"])) for _ in range(3)]
        try:
            for c in mine[:2]:
                await c.fetch("t", 0, 1)
            with pytest.raises(FetchRefused) as e:
                await mine[2].fetch("t", 0, 1)
            assert "per identity" in str(e.value), e.value
            async with FetchClient(f"{HOST}:{fetch}", tls=_tls(ids["reader/other"])) as other:
                await other.fetch("t", 0, 1)           # another identity still gets in
        finally:
            for c in mine:
                await c.close()
    asyncio.run(asyncio.wait_for(quota(), 60))

    raws = [socket.create_connection((HOST, fetch), timeout=30) for _ in range(8)]   # never a handshake
    try:
        async def kept_out() -> None:
            with pytest.raises((FetchRefused, ConnectionError, OSError)) as e:
                async with FetchClient(f"{HOST}:{fetch}", tls=_tls(ids["reader/other"])) as c:
                    await c.fetch("t", 0, 1)
            assert "fetch connections" in str(e.value), e.value
        asyncio.run(asyncio.wait_for(kept_out(), 60))
    finally:
        for s in raws:
            s.close()

    async def back() -> bool:
        try:
            async with FetchClient(f"{HOST}:{fetch}", tls=_tls(ids["reader/other"])) as c:
                await c.fetch("t", 0, 1)
            return True
        except (FetchRefused, ConnectionError, OSError):
            return False
    wait_until(lambda: asyncio.run(back()), 60, "a reader served once the stalled handshakes are gone")


def test_a_bound_consumer_group_cannot_be_claimed_by_another_reader(procs, tmp_path):
    """Issue 59: any reader could claim a consumer-group name by committing first, and the real
    application was then refused its own group. With consumer_group_owners, a group (or a prefix)
    is bound to the identities named: another reader's first commit is refused, the owner's goes
    through, and an unbound group keeps the first-commit rule."""
    from autoswitch.broker.client.client import ConsumerClient

    from autoswitch.base.errors import PermissionDenied

    ids = init_dev_ca(tmp_path / "tls", ["broker/g1/1", "producer/app", "reader/orders-app", "reader/squatter"])
    me = ids["broker/g1/1"]
    port, ha = free_port(), free_port()
    cfg = tmp_path / "broker.toml"
    cfg.write_text('[consumer_group_owners]\n"orders-*" = ["reader/orders-app"]\n')
    procs.start("b1", ["broker", "--config", str(cfg), "--role", "master", "--epoch", "1", "--group", "g1",
                       "--listen", f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}", "--ack-mode", "master",
                       "--data-dir", str(tmp_path / "b1"),
                       "--tls-ca", me["ca"], "--tls-cert", me["cert"], "--tls-key", me["key"], "--auth"])
    wait_port(port, timeout=60)
    addr = f"{HOST}:{port}"

    async def scenario() -> None:
        p = ProducerClient(addr, max_retries=2, timeout_s=30, tls=_tls(ids["producer/app"]))
        squat = ConsumerClient(addr, max_retries=0, timeout_s=30, tls=_tls(ids["reader/squatter"]))
        owner = ConsumerClient(addr, max_retries=2, timeout_s=30, tls=_tls(ids["reader/orders-app"]))
        try:
            assert (await p.produce("t", [b"m"] * 3)).ok
            with pytest.raises(PermissionDenied, match="bound to"):
                await squat.commit_offset("orders-eu", "t", 1)          # the squatter comes first
            assert (await owner.commit_offset("orders-eu", "t", 2)).status == 0
            assert (await squat.commit_offset("audit", "t", 1)).status == 0     # unbound: first commit owns it
            with pytest.raises(PermissionDenied, match="belongs to"):
                await owner.commit_offset("audit", "t", 2)
        finally:
            for c in (p, squat, owner):
                await c.close()
    asyncio.run(asyncio.wait_for(scenario(), 120))
