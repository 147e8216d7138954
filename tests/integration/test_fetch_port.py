"""The fetch port (broker/fetch_server.py) on a real broker process: it serves exactly what the
gRPC Consume serves, long-polls, says "past the log end", survives garbage, bounds its
connections, takes PRODUCE frames the way the gRPC Produce takes requests, and on TLS with auth
lets only readers read and only producers produce."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys

import pytest
from autoswitch.broker import fetch_codec as fc
from autoswitch.broker.client.client import ConsumerClient, ProducerClient, consumed_messages
from autoswitch.broker.client.fetch_client import FetchClient, FetchRefused, fetched_messages

from autoswitch.app.certs import init_dev_ca, issue_token
from autoswitch.base.tls import TLSConfig
from autoswitch.proto import broker_pb2 as pb
from tests.integration.failover_harness import wait_until
from tests.integration.test_observability import scrape
from tests.procs import HOST, free_port, wait_port
from tests.waiting import until

pytestmark = pytest.mark.integration


def _start(procs, tmp_path, name: str, extra: list[str] = ()) -> tuple[str, str]:
    port, ha, fetch = free_port(), free_port(), free_port()
    procs.start(name, ["broker", "--role", "master", "--epoch", "1", "--group", "g1", "--listen", f"{HOST}:{port}",
                       "--ha-listen", f"{HOST}:{ha}", "--fetch-listen", f"{HOST}:{fetch}", "--ack-mode", "master",
                       "--data-dir", str(tmp_path / name), *extra])
    wait_port(port, timeout=60)
    wait_port(fetch, timeout=60)
    return f"{HOST}:{port}", f"{HOST}:{fetch}"


def _read_until_closed(addr: str, data: bytes) -> bytes:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_fetch_port_serves_what_consume_serves(procs, tmp_path):
    cfg = tmp_path / "broker.toml"
    cfg.write_text("max_fetch_connections = 2\n")
    metrics_port = free_port()
    addr, fetch_addr = _start(procs, tmp_path, "b1", ["--config", str(cfg),
                                                      "--metrics-listen", f"{HOST}:{metrics_port}"])

    async def scenario() -> None:
        p = ProducerClient(addr, timeout_s=10)
        for i in range(20):
            await p.produce("t", [f"m-{i}-{k}".encode() * (k % 7 + 1) for k in range(100)])
        c = ConsumerClient(addr, timeout_s=10)
        want, q = [], 0
        while q < 2000:
            r = await c.consume("t", q, 300, record_runs=True)
            want += list(consumed_messages(r))
            q = r.next_queue_offset
        async with FetchClient(fetch_addr) as f:
            got, q = [], 0
            while q < 2000:
                r = await f.fetch("t", q, 300)
                assert r.status == pb.OK, r.error_message
                got += list(fetched_messages(r))
                q = r.next_queue_offset
            assert got == want and [m.queue_offset for m in got] == list(range(2000))

            # long poll: a fetch waiting for 5 new messages is answered once they are there
            waiting = asyncio.ensure_future(f.fetch("t", 2000, 100, min_count=5, max_wait_ms=60_000))
            await asyncio.sleep(0)
            assert not waiting.done()
            await p.produce("t", [b"late"] * 5)
            r = await waiting
            assert [m.body for m in fetched_messages(r)] == [b"late"] * 5 and r.next_queue_offset == 2005

            # past the master's log end: said, with the log end, never served as "nothing new"
            r = await f.fetch("t", 2100, 10)
            assert r.status == pb.OFFSET_OUT_OF_RANGE and r.next_queue_offset == 2005 and not r.runs

            # garbage gets one ERROR frame and a closed connection; the port keeps serving
            reply = await asyncio.to_thread(_read_until_closed, fetch_addr, b"GET / HTTP/1.1\r\n\r\n")
            (frame,) = fc.FrameDecoder(4096).feed(reply)
            assert frame.type == fc.ERROR and fc.parse_error(frame.payload)[0] == fc.ERR_PROTOCOL
            reply = await asyncio.to_thread(_read_until_closed, fetch_addr, fc.encode_fetch(fc.FetchRequest("t", 0, 1, 0, 0)))
            assert fc.parse_error(fc.FrameDecoder(4096).feed(reply)[0].payload) == (
                fc.ERR_PROTOCOL, "the first frame must be HELLO")

            # at most max_fetch_connections (2) at once: the third is told so
            async with FetchClient(fetch_addr) as second:
                with pytest.raises(FetchRefused, match="more than 2 fetch connections"):
                    await FetchClient(fetch_addr).connect()
                assert (await second.fetch("t", 0, 1)).status == pb.OK
            async def third_gets_in() -> bool:
                try:
                    async with FetchClient(fetch_addr) as third:
                        return (await third.fetch("t", 0, 1)).status == pb.OK
                except FetchRefused:
                    return False
            await until(third_gets_in, "a slot frees once a consumer leaves")
            assert (await f.fetch("t", 2004, 1)).next_queue_offset == 2005

            # /metrics: fetches by status, bytes served, refusals by reason, open connections (the
            # broker sees the other consumers' closes in its own time: wait for the gauge)
            async def only_f_open() -> dict:
                m = await asyncio.to_thread(scrape, metrics_port)
                return m if m[("autoswitch_broker_fetch_connections", ())] == 1 else {}
            m = await until(only_f_open, "the closed fetch connections gone from the gauge")
            assert m[("autoswitch_broker_requests_total", (("rpc", "Fetch"), ("status", "OK")))] >= 9
            assert m[("autoswitch_broker_requests_total", (("rpc", "Fetch"), ("status", "OFFSET_OUT_OF_RANGE")))] == 1
            assert m[("autoswitch_broker_fetched_bytes_total", ())] > 2005 * 30
            assert m[("autoswitch_broker_fetch_refused_total", (("reason", "protocol"),))] == 2
            assert m[("autoswitch_broker_fetch_refused_total", (("reason", "busy"),))] >= 1
            assert m[("autoswitch_broker_request_seconds_count", (("rpc", "Fetch"),))] >= 10
        await p.close()
        await c.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_fetch_port_on_tls_with_auth_lets_only_readers_in(procs, tmp_path):
    d = tmp_path / "tls"
    ids = init_dev_ca(d, ["broker/g1/1", "reader/app", "producer/app"])
    tokens = tmp_path / "tokens.toml"
    reader_token = issue_token(tokens, "ops-reader", ["reader"])
    ident = ids["broker/g1/1"]
    addr, fetch_addr = _start(procs, tmp_path, "b1", [
        "--tls-ca", ident["ca"], "--tls-cert", ident["cert"], "--tls-key", ident["key"], "--auth",
        "--auth-tokens-file", str(tokens)])
    reader = TLSConfig(ca=ids["reader/app"]["ca"], cert=ids["reader/app"]["cert"], key=ids["reader/app"]["key"]).validate()
    producer = TLSConfig(ca=ids["producer/app"]["ca"], cert=ids["producer/app"]["cert"],
                         key=ids["producer/app"]["key"]).validate()

    async def scenario() -> None:
        p = ProducerClient(addr, timeout_s=10, tls=producer)
        await p.produce("t", [b"secret"] * 3)
        await p.close()
        async with FetchClient(fetch_addr, tls=reader) as f:
            assert [m.body for m in fetched_messages(await f.fetch("t", 0, 10))] == [b"secret"] * 3
        # a producer may produce over the port, and may not read there
        async with FetchClient(fetch_addr, tls=producer) as f:
            assert (await f.produce("t", [b"over-the-port"])).ok
            with pytest.raises(FetchRefused, match="permission denied"):
                await f.fetch("t", 0, 10)
        async with FetchClient(fetch_addr, tls=reader) as f:
            with pytest.raises(FetchRefused, match="permission denied"):
                await f.produce("t", [b"a reader's"])
        with pytest.raises(FetchRefused, match="unknown or revoked token"):
            await FetchClient(fetch_addr, tls=producer, token="not-a-token").connect()
        async with FetchClient(fetch_addr, tls=producer, token=reader_token) as f:
            assert len((await f.fetch("t", 0, 10)).runs) == 1
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError, OSError)):
            await FetchClient(fetch_addr, timeout_s=5).connect()      # plaintext to a TLS port

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_cli_consume_over_the_fetch_port_prints_what_grpc_prints(procs, tmp_path):
    addr, fetch_addr = _start(procs, tmp_path, "b1")

    async def load() -> None:
        p = ProducerClient(addr, timeout_s=10)
        await p.produce("t", [f"body-{i}".encode() for i in range(50)])
        await p.close()
    asyncio.run(load())

    def consume(*extra: str) -> list[dict]:
        out = subprocess.run([sys.executable, "-m", "autoswitch", "consume", "--broker", addr, "--topic", "t",
                              "--count", "50", "--batch", "7", "--json", *extra],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return [json.loads(line) for line in out.splitlines()]
    over_grpc, over_fetch = consume(), consume("--fetch", fetch_addr)
    assert len(over_grpc) == 51 and over_fetch == over_grpc      # 50 messages and the summary line
    bad = subprocess.run([sys.executable, "-m", "autoswitch", "consume", "--broker", addr, "--topic", "t",
                          "--fetch", "no-port"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "BAD_USAGE" in bad.stdout + bad.stderr


def test_a_peer_that_never_says_hello_is_told_and_closed():
    """The HELLO deadline, on the server in-process with a short deadline (the broker's is 10 s);
    nothing is ever served to such a peer, so no store stands behind it."""
    from autoswitch.broker.fetch_server import FetchServer

    from autoswitch.base.log import get_logger

    async def scenario() -> None:
        server = FetchServer(None, None, 4, get_logger("test.fetch"), hello_timeout_s=0.2)  # type: ignore[arg-type]
        port = await server.start(HOST, 0, None)
        try:
            r, w = await asyncio.open_connection(HOST, port)
            reply = await asyncio.wait_for(r.read(), 30)     # EOF once the server gave up on us
            w.close()
            (frame,) = fc.FrameDecoder(4096).feed(reply)
            assert fc.parse_error(frame.payload) == (fc.ERR_PROTOCOL, "no HELLO within 0.2 s")
        finally:
            await server.close()

    asyncio.run(scenario())


def test_consume_fetch_auto_reads_over_the_port_in_the_masters_route(procs, tmp_path):
    """`consume --namesrv NS --fetch auto`: the master registered its fetch port in its route;
    a group whose master serves none gets NO_FETCH_PORT, said, not a hang or a traceback."""
    ns_port = free_port()
    ns = f"{HOST}:{ns_port}"
    procs.start("namesrv", ["namesrv", "--listen", ns, "--route-ttl-s", "60"])
    wait_port(ns_port, timeout=60)
    addr, fetch_addr = _start(procs, tmp_path, "b1", ["--namesrv", ns])
    bare_port, bare_ha = free_port(), free_port()
    procs.start("b2", ["broker", "--role", "master", "--epoch", "1", "--group", "g2", "--listen",
                       f"{HOST}:{bare_port}", "--ha-listen", f"{HOST}:{bare_ha}", "--ack-mode", "master",
                       "--data-dir", str(tmp_path / "b2"), "--namesrv", ns])
    wait_port(bare_port, timeout=60)

    async def produce() -> None:
        p = ProducerClient(addr, timeout_s=10)
        await p.produce("t", [f"m{i}".encode() for i in range(30)])
        await p.close()
        q = ProducerClient(f"{HOST}:{bare_port}", timeout_s=10)
        await q.produce("t", [b"x"])
        await q.close()

    asyncio.run(produce())

    def consume(group: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autoswitch", "consume", "--namesrv", ns, "--group", group,
                               "--topic", "t", "--count", "30", "--fetch", "auto", "--json"],
                              capture_output=True, text=True, timeout=120)

    # the routes are there once the registrars have run (every route_interval_ms)
    out = wait_until(lambda: (r := consume("g1")).returncode == 0 and r, 60, "consume --fetch auto on g1")
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert [m["body"] for m in lines[:-1]] == [f"m{i}" for i in range(30)]
    assert lines[-1]["result"]["consumed"] == 30
    bare = wait_until(lambda: (r := consume("g2")).returncode == 1 and "NO_FETCH_PORT" in r.stdout and r, 60,
                      "NO_FETCH_PORT for g2")
    assert json.loads(bare.stdout)["error"]["code"] == "NO_FETCH_PORT" and "Traceback" not in bare.stderr
    usage = subprocess.run([sys.executable, "-m", "autoswitch", "consume", "--broker", addr, "--topic", "t",
                            "--fetch", "auto"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "needs --namesrv" in usage.stdout + usage.stderr


def test_produce_over_the_port_is_the_grpc_produce(procs, tmp_path):
    """PRODUCE frames carry a ProduceRequest and get the gRPC Produce's answer (its checks, its
    statuses, one queue numbering with gRPC producers); a frame that is not a ProduceRequest, or
    longer than max_request_bytes, gets ERROR protocol and a closed connection, before the
    bytes are buffered."""
    cfg = tmp_path / "broker.toml"
    cfg.write_text("max_request_bytes = 65536\nmax_message_bytes = 32768\n")
    metrics_port = free_port()
    addr, fetch_addr = _start(procs, tmp_path, "b1", ["--config", str(cfg), "--metrics-listen", f"{HOST}:{metrics_port}"])

    async def scenario() -> None:
        g = ProducerClient(addr, timeout_s=10)
        assert (await g.produce("t", [b"grpc-0", b"grpc-1"])).ok
        async with FetchClient(fetch_addr) as f:
            out = await f.produce("t", [b"port-2", b"port-3", b"port-4"], msg_ids=["a", "b", "c"])
            assert out.ok and [(r.msg_id, r.queue_offset) for r in out.results] == [("a", 2), ("b", 3), ("c", 4)]
            assert out.group == "g1" and out.broker_id > 0
            assert (await g.produce("t", [b"grpc-5"])).results[0].queue_offset == 5
            for bad_topic in ("", "__offsets"):      # the gRPC Produce's own checks and statuses
                over_port = await f.produce(bad_topic, [b"x"])
                over_grpc = await g.produce(bad_topic, [b"x"])
                assert over_port.status == over_grpc.status == pb.BAD_REQUEST, (over_port, over_grpc)
                assert over_port.error_message == over_grpc.error_message
            # one connection serves fetches and produces alike, in order
            assert [m.body for m in fetched_messages(await f.fetch("t", 0, 10))] == [
                b"grpc-0", b"grpc-1", b"port-2", b"port-3", b"port-4", b"grpc-5"]
        await g.close()

        hello = fc.encode_hello()
        reply = await asyncio.to_thread(_read_until_closed, fetch_addr, hello + fc.encode_message(fc.PRODUCE, b"\xff" * 9))
        frames = fc.FrameDecoder(4096).feed(reply)
        assert [x.type for x in frames] == [fc.READY, fc.ERROR]      # the HELLO was whole: answered first
        assert fc.parse_error(frames[1].payload) == (fc.ERR_PROTOCOL, "PRODUCE payload is not a ProduceRequest")
        huge = fc.FRAME.pack(fc.MAGIC, fc.VERSION, fc.PRODUCE, 65537)      # the header alone: refused unread
        reply = await asyncio.to_thread(_read_until_closed, fetch_addr, hello + huge)
        frames = fc.FrameDecoder(4096).feed(reply)       # (READY first unless both came in one read)
        assert fc.parse_error(frames[-1].payload) == (fc.ERR_PROTOCOL, "frame of 65537 bytes, more than 65536")

        m = await asyncio.to_thread(scrape, metrics_port)      # counted as Produce, whichever port
        assert m[("autoswitch_broker_requests_total", (("rpc", "Produce"), ("status", "OK")))] == 3
        assert m[("autoswitch_broker_produced_messages_total", ())] == 6

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_routed_produce_over_the_port_follows_a_failover_and_loses_nothing(procs, tmp_path):
    """`autoswitch produce --namesrv NS --group G --via port`: RoutedProducer's retries and epoch
    checks over the master's fetch port, found in its route. The master is killed under load;
    the producer asks the name server again, sends to the new master's port, and every message it
    logged as acknowledged is there to consume."""
    from tests.integration.failover_harness import FailoverCluster, consume_routed, read_ack_log

    c = FailoverCluster(procs, tmp_path, fetch=True)
    c.start_all()
    m1, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    ack_log = tmp_path / "acks.jsonl"
    prod = procs.start("producer", ["produce", "--namesrv", c.namesrv, "--group", "g1", "--topic", "t",
                                    "--via", "port", "--count", "1000000", "--size", "64", "--duration-s", "12",
                                    "--interval-ms", "5", "--ack-log", str(ack_log), "--retry-deadline-s", "60",
                                    "--timeout", "2", "--json"])
    wait_until(lambda: len(read_ack_log(ack_log)) >= 50, 30, "50 acks over the port")
    c.broker_proc[c.master_name()].kill9()
    c.wait_master(timeout=60, not_id=m1, min_epoch=e1 + 1)
    prod.popen.wait(120)
    out = prod.log_text()
    assert prod.popen.returncode == 0, out[-3000:]
    summary = next(d["result"] for line in reversed(out.splitlines()) if line.startswith('{"command"')
                   and (d := json.loads(line))["command"] == "produce")
    assert summary["route_refreshes"] >= 2 and summary["acked"] > 50, summary
    acks = read_ack_log(ack_log)
    assert {a["epoch"] for a in acks} >= {e1} and max(a["epoch"] for a in acks) > e1, "no ack after the failover"
    consumed = {m["msg_id"] for m in consume_routed(c.namesrv, topic="t")}
    lost = [a["msg_id"] for a in acks if a["msg_id"] not in consumed]
    assert not lost, f"{len(lost)} acked messages lost, e.g. {lost[:5]}"

    bad = subprocess.run([sys.executable, "-m", "autoswitch", "produce", "--broker", c.broker_addr("b1"), "--topic",
                          "t", "--via", "port"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "BAD_USAGE" in bad.stdout + bad.stderr
