"""Real-process acceptance tests of the broker in static-role mode (issue 2).

Every broker is `python -m autoswitch broker ...` started through the `procs` fixture and
ended by PID. Replicas are compared through the running processes: LogDigest (sha256 of the
raw commit-log bytes) and GetBrokerEpoch (EpochFile entries), which read the same files the
store writes; consumed messages are compared too.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from autoswitch.broker.client.client import (
    AdminClient,
    ConsumerClient,
    ProducerClient,
    consumed_messages,
    sync_admin,
)
from autoswitch.broker.storage.record import StoredMessage

from autoswitch.proto import broker_pb2 as pb
from tests.procs import HOST, Proc, ProcGroup, free_port, wait_port
from tests.tcpproxy import TcpProxy
from tests.waiting import MIN_WAIT_S

pytestmark = pytest.mark.integration

TOPIC = "orders"


@dataclass
class Node:
    name: str
    broker_id: int
    port: int
    ha_port: int
    data_dir: Path
    proc: Proc | None = None

    @property
    def addr(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def ha_addr(self) -> str:
        return f"{HOST}:{self.ha_port}"


def make_nodes(tmp_path: Path, n: int) -> list[Node]:
    return [
        Node(f"b{i}", i, free_port(), free_port(), tmp_path / f"data-b{i}") for i in range(1, n + 1)
    ]


def start(procs: ProcGroup, node: Node, role: str, *extra: str, master: Node | None = None,
          config: Path | None = None) -> Node:
    args = [
        "broker", "--role", role, "--group", "g1", "--broker-id", str(node.broker_id),
        "--listen", node.addr, "--ha-listen", node.ha_addr, "--data-dir", str(node.data_dir),
    ]
    if master is not None:
        args += ["--master-ha", master.ha_addr, "--master-addr", master.addr]
    if config is not None:
        args += ["--config", str(config)]
    args += list(extra)
    node.proc = procs.start(node.name, args)
    wait_port(node.port, timeout=20, proc=node.proc.popen)
    return node


def admin(node: Node):
    return sync_admin(node.addr, timeout_s=10)


def epoch_info(node: Node) -> pb.GetBrokerEpochReply:
    with admin(node) as a:
        return a.get_broker_epoch()


def digest(node: Node, to: int = -1) -> str:
    with admin(node) as a:
        r = a.log_digest(0, to)
    assert r.status == pb.OK, r.error_message
    return r.sha256


def epochs_of(r: pb.GetBrokerEpochReply) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in r.epochs]


def wait_until(pred, timeout: float, what: str, interval: float = 0.05):
    # A readiness wait, not a timing check: the bound only ends a test that is really stuck,
    # so it never drops below MIN_WAIT_S however short the caller's guess (load 4-6 on 2 cores
    # stretched 10 s waits past their end).
    timeout = max(timeout, MIN_WAIT_S)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last={last!r}")


def wait_caught_up(master: Node, slaves: list[Node], timeout: float = 60.0) -> int:
    target = epoch_info(master).max_offset

    def ok():
        return all(epoch_info(s).max_offset == target for s in slaves)

    wait_until(ok, timeout, f"slaves at {target}", interval=0.1)
    return target


async def produce_many(addr: str, total: int, batch: int, producers: int, size: int = 100,
                       ack_log: Path | None = None) -> list[pb.ProduceResult]:
    """`producers` concurrent clients, each sending its share in batches; all must be acked."""
    share = total // producers
    assert share * producers == total

    async def one(k: int) -> list[pb.ProduceResult]:
        c = ProducerClient(addr, ack_log=ack_log, timeout_s=30)
        out: list[pb.ProduceResult] = []
        try:
            for i in range(0, share, batch):
                n = min(batch, share - i)
                bodies = [f"p{k}-m{i + j}-".encode().ljust(size, b".") for j in range(n)]
                r = await c.produce(TOPIC, bodies)
                assert r.ok, (pb.Status.Name(r.status), r.error_message)
                out.extend(r.results)
        finally:
            await c.close()
        return out

    parts = await asyncio.gather(*(one(k) for k in range(producers)))
    return [r for p in parts for r in p]


async def consume_all(addr: str, limit: int, record_runs: bool = False) -> list[StoredMessage]:
    c = ConsumerClient(addr, timeout_s=30)
    out: list[StoredMessage] = []
    q = 0
    try:
        while len(out) < limit:
            r = await c.consume(TOPIC, q, 1000, record_runs=record_runs)
            assert r.status == pb.OK, r.error_message
            got = list(consumed_messages(r))
            if not got:
                break
            for m in got:
                # (a reply message does not carry its record size: 1 byte stands for it)
                assert m.phy_offset + max(m.size, 1) <= r.confirm_offset, "a consumer saw past confirmOffset"
            out.extend(got)
            q = r.next_queue_offset
    finally:
        await c.close()
    return out


# --------------------------------------------------------------------------- tests


def test_three_replicas_100k_byte_identical_and_slave_kill9_catches_up(procs, tmp_path):
    m, s2, s3 = make_nodes(tmp_path, 3)
    # Small transfer frames on the master so the late slave's catch-up takes many frames
    # and the kill really lands mid-transfer.
    mcfg = tmp_path / "master.toml"
    mcfg.write_text("[ha]\ntransfer_batch_size = 262144\n")
    # A generous ack timeout: this test is about replication, and the shared CI machine may be slow.
    start(procs, m, "master", "--epoch", "1", "--ack-mode", "all", "--flush", "async", "--ack-timeout", "30",
          config=mcfg)
    start(procs, s2, "slave", master=m)
    wait_until(lambda: epoch_info(m).sync_state_set == [1, 2], 20, "slave 2 in the SyncStateSet")

    acked = asyncio.run(produce_many(m.addr, 100_000, batch=1000, producers=4, ack_log=tmp_path / "acks.jsonl"))
    assert len(acked) == 100_000 and all(r.status == pb.OK for r in acked)
    assert len({r.msg_id for r in acked}) == 100_000
    assert sorted(r.queue_offset for r in acked) == list(range(100_000))
    lines = (tmp_path / "acks.jsonl").read_text().splitlines()
    assert len(lines) == 100_000
    first = json.loads(lines[0])
    assert set(first) == {"msg_id", "group", "broker_id", "topic", "queue_offset", "phy_offset", "epoch",
                          "ack_ts_ms"}
    assert first["group"] == "g1" and first["broker_id"] == 1 and first["epoch"] == 1

    # all-ack: slave 2 held every acked byte when the producer was told "stored".
    target = epoch_info(m).max_offset
    assert epoch_info(s2).max_offset == target

    # A late slave: kill -9 it while it is catching up, restart, it must converge. Its first
    # catch-up goes through a proxy that holds each 64 KiB chunk 10 ms (~6 MiB/s: seconds for
    # these ~18 MB), so the kill lands mid-transfer however fast the machine replicates.
    with TcpProxy((HOST, int(m.ha_addr.rsplit(":", 1)[1]))) as slow:
        slow.set_delay(0.01)
        start(procs, s3, "slave", "--master-ha", f"{HOST}:{slow.port}", "--master-addr", m.addr)
        seen = wait_until(lambda: (o := epoch_info(s3).max_offset) > 0 and o, 30, "slave 3 started transfer", 0.01)
        s3.proc.kill9()
    assert seen < target, "the kill must land mid-transfer"
    start(procs, s3, "slave", master=m)
    wait_caught_up(m, [s2, s3])

    want = digest(m)
    assert digest(s2) == want and digest(s3) == want
    infos = [epoch_info(n) for n in (m, s2, s3)]
    assert epochs_of(infos[0]) == epochs_of(infos[1]) == epochs_of(infos[2]) == [(1, 0)]

    # Consumers on a slave read the same messages as on the master (never past confirmOffset).
    # The slave is read as stored-record runs, the master as reply messages: the same answer.
    from_m = asyncio.run(consume_all(m.addr, 100_000))
    from_s = asyncio.run(consume_all(s3.addr, 20_000, record_runs=True))
    assert len(from_m) == 100_000
    assert len(from_s) == 20_000
    assert [(x.msg_id, x.body, x.phy_offset, x.queue_offset, x.born_ts_ms) for x in from_s] == \
        [(x.msg_id, x.body, x.phy_offset, x.queue_offset, x.born_ts_ms) for x in from_m[:20_000]]
    by_id = {r.msg_id: r for r in acked}
    assert all(by_id[x.msg_id].phy_offset == x.phy_offset for x in from_m)


def test_role_switch_truncates_unreplicated_tail(procs, tmp_path):
    a, b = make_nodes(tmp_path, 2)
    start(procs, a, "master", "--epoch", "1", "--ack-mode", "master")
    start(procs, b, "slave", master=a)
    asyncio.run(produce_many(a.addr, 2000, batch=200, producers=1))
    common = wait_caught_up(a, [b])

    # b dies; a (ack-mode master) keeps acking writes nobody else has: the unreplicated tail.
    b.proc.kill9()
    asyncio.run(produce_many(a.addr, 500, batch=100, producers=1))
    tail_end = epoch_info(a).max_offset
    assert tail_end > common

    # New epoch 2: a becomes a slave of b, b (restarted fenced) becomes master.
    with admin(a) as c:
        r = c.switch_role("slave", 2, b.ha_addr, b.addr)
    assert r.status == pb.OK, r.error_message
    start(procs, b, "fenced")
    assert epoch_info(b).role == "fenced"
    with admin(b) as c:
        stale = c.switch_role("master", 1)
        assert stale.status == pb.STALE_EPOCH
        r = c.switch_role("master", 2)
    assert r.status == pb.OK, r.error_message

    # a truncates its tail to b's end of epoch 1 and follows b.
    wait_until(lambda: epoch_info(a).max_offset == common, 30, "old master truncated its tail")
    asyncio.run(produce_many(b.addr, 300, batch=100, producers=1))
    end = wait_caught_up(b, [a])
    ia, ib = epoch_info(a), epoch_info(b)
    assert epochs_of(ia) == epochs_of(ib) == [(1, 0), (2, common)]
    assert digest(a) == digest(b)
    assert end > common
    assert epoch_info(b).sync_state_set == [1, 2], "the old master rejoined the SyncStateSet"

    # The old master refuses writes now, naming the new master.
    async def try_produce():
        c = ProducerClient(a.addr)
        try:
            return await c.produce(TOPIC, [b"x"])
        finally:
            await c.close()

    r = asyncio.run(try_produce())
    assert r.status == pb.NOT_MASTER and r.master_addr == b.addr

    # The EpochFiles on disk are equal too (after a clean stop both are final).
    a.proc.stop()
    b.proc.stop()
    assert a.proc.popen.returncode == 0 and b.proc.popen.returncode == 0
    assert (a.data_dir / "epochfile").read_bytes() == (b.data_dir / "epochfile").read_bytes()


def _hs_frame(state: int = 1) -> bytes:
    return struct.pack(">ihhq", state, 0, 0, 99)


def _read_until_closed(s: socket.socket, timeout: float = 10.0) -> bool:
    s.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not s.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


def _ha_reason_logged(node: Node, since_line: int) -> list[dict]:
    events = []
    for x in node.proc.log_text().splitlines()[since_line:]:
        if x.startswith("{"):
            e = json.loads(x)
            if e.get("level") in ("warning", "error") and str(e.get("component", "")).startswith("ha") and (
                "reason" in e or "error" in e
            ):
                events.append(e)
    return events


# (bytes sent to the master's HA port, label, the FrameError reason the HA layer must log)
MASTER_PORT_GARBAGE = [
    (struct.pack(">i", 77) + b"\0" * 12, "wrong_state_code", "bad_state"),
    (_hs_frame() + struct.pack(">iq", 2, -5), "negative_ack_offset", "negative_offset"),
    (b"\xff" * 64, "random_bytes", "bad_state"),
]

# What a (fake) master sends to a slave. An empty, valid handshake reply first where the bad part
# is a transfer header.
_EMPTY_HS = struct.pack(">iiqi", 1, 0, 0, 0)
SLAVE_SIDE_GARBAGE = [
    (struct.pack(">iiqi", 1, -1, 0, 0), "negative_body_size", "negative_body_size"),
    (struct.pack(">iiqi", 1, 12 * (1 << 27), 0, 0), "oversized_handshake_body", "too_many_epoch_entries"),
    (_EMPTY_HS + struct.pack(">iiqiqq", 2, 1 << 30, 0, 1, 0, 0), "oversized_transfer_body", "body_too_large"),
    (_EMPTY_HS + struct.pack(">iiqiqq", 2, -7, 0, 1, 0, 0), "negative_transfer_body", "negative_body_size"),
    (struct.pack(">iiqi", 9, 0, 0, 0), "wrong_state_code", "bad_state"),
]


def test_malformed_input_on_ha_ports_closes_connection_broker_keeps_serving(procs, tmp_path):
    m, s = make_nodes(tmp_path, 2)
    start(procs, m, "master", "--epoch", "1", "--ack-mode", "master")
    asyncio.run(produce_many(m.addr, 200, batch=100, producers=1))
    before = digest(m)
    max_before = epoch_info(m).max_offset

    # Master side: garbage from a would-be slave.
    logged: set[str] = set()
    for payload, label, reason in MASTER_PORT_GARBAGE:
        mark = len(m.proc.log_text().splitlines())
        with socket.create_connection((HOST, m.ha_port), timeout=10) as c:
            c.sendall(payload)
            assert _read_until_closed(c), f"{label}: the master must close the connection"
        if reason not in logged:   # one line per peer and reason per 10 s: a repeat is only counted
            events = wait_until(lambda mark=mark: _ha_reason_logged(m, mark), 10, f"{label}: logged reason")
            assert any(e.get("reason") == reason for e in events), (label, events)
            logged.add(reason)
        assert m.proc.alive()
        assert digest(m) == before and epoch_info(m).max_offset == max_before, f"{label}: log harmed"

    # Slave side: a fake master answering the handshake with malformed headers.
    fake = socket.socket()
    fake.bind((HOST, 0))
    fake.listen(4)
    fake.settimeout(20)
    fake_port = fake.getsockname()[1]
    try:
        s.proc = procs.start(s.name, [
            "broker", "--role", "slave", "--group", "g1", "--broker-id", "2", "--listen", s.addr,
            "--ha-listen", s.ha_addr, "--data-dir", str(s.data_dir), "--master-ha", f"{HOST}:{fake_port}",
        ])
        wait_port(s.port, 20, s.proc.popen)
        for payload, label, reason in SLAVE_SIDE_GARBAGE:
            mark = len(s.proc.log_text().splitlines())
            conn, _ = fake.accept()
            with conn:
                conn.settimeout(10)
                hs = b""
                while len(hs) < 16:
                    chunk = conn.recv(16 - len(hs))
                    assert chunk, "slave closed before its handshake"
                    hs += chunk
                assert struct.unpack(">ihhq", hs)[0] == 1 and struct.unpack(">ihhq", hs)[3] == 2
                conn.sendall(payload)
                assert _read_until_closed(conn), f"{label}: the slave must close the connection"
            events = wait_until(lambda mark=mark: _ha_reason_logged(s, mark), 10, f"{label}: slave logged reason")
            assert any(e.get("reason") == reason for e in events), (label, events)
            assert s.proc.alive() and epoch_info(s).role == "slave" and epoch_info(s).max_offset == 0
    finally:
        fake.close()

    asyncio.run(produce_many(m.addr, 100, batch=100, producers=1))  # the master still serves writes
    assert m.proc.alive() and epoch_info(m).max_offset > max_before


def test_all_ack_with_slave_down_and_stalled(procs, tmp_path):
    m, s = make_nodes(tmp_path, 2)
    start(procs, m, "master", "--epoch", "1", "--ack-mode", "all", "--min-in-sync-replicas", "2",
          "--ack-timeout", "0.5")
    start(procs, s, "slave", master=m)
    wait_until(lambda: epoch_info(m).sync_state_set == [1, 2], 20, "slave in the SyncStateSet")
    asyncio.run(produce_many(m.addr, 100, batch=50, producers=1))
    confirmed = wait_caught_up(m, [s])
    wait_until(lambda: epoch_info(m).confirm_offset == confirmed, 10, "master confirmOffset at the end")
    # broker-status tells when the slave last caught up as a time a person can read (Unix
    # seconds), not the HA tracker's monotonic clock (issue 33 item 2)
    with admin(m) as a:
        st = a.get_status()
    caught_up = [x.last_caught_up_time for x in st.slaves if x.broker_id == 2]
    assert caught_up and abs(caught_up[0] - time.time()) < 600, caught_up

    async def produce_once(body: bytes) -> pb.ProduceResult:
        c = ProducerClient(m.addr, timeout_s=10)
        try:
            out = await c.produce(TOPIC, [body])
        finally:
            await c.close()
        return out

    # Slave stalled (SIGSTOP: connection open, no acks): the write stays in the master's log but is
    # not acknowledged, and no consumer can see it (it is past confirmOffset).
    os.kill(s.proc.pid, signal.SIGSTOP)
    try:
        out = produce_once(b"stalled")
        out = asyncio.run(out)
        assert out.status == pb.FLUSH_SLAVE_TIMEOUT, pb.Status.Name(out.status)
        info = epoch_info(m)
        assert info.max_offset > confirmed and info.confirm_offset == confirmed
        seen = asyncio.run(consume_all(m.addr, 1000))
        assert len(seen) == 100 and all(x.body != b"stalled" for x in seen)
    finally:
        os.kill(s.proc.pid, signal.SIGCONT)
    # Once the slave acks again the message becomes visible.
    wait_until(lambda: len(asyncio.run(consume_all(m.addr, 1000))) == 101, 20, "stalled message confirmed")

    # Slave dead: the SyncStateSet shrinks to {master} < minInSyncReplicas=2 -> refused, not written.
    s.proc.kill9()
    wait_until(lambda: epoch_info(m).sync_state_set == [1], 40, "SyncStateSet shrink")
    before = epoch_info(m).max_offset
    out = asyncio.run(produce_once(b"refused"))
    assert out.status == pb.IN_SYNC_REPLICAS_NOT_ENOUGH, pb.Status.Name(out.status)
    assert epoch_info(m).max_offset == before


def test_cli_produce_consume_admin_json(procs, tmp_path):
    import subprocess
    import sys

    (m,) = make_nodes(tmp_path, 1)
    start(procs, m, "master", "--epoch", "3", "--ack-mode", "all")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autoswitch", *args], capture_output=True, text=True,
                              timeout=60)

    r = cli("produce", "--broker", m.addr, "--topic", "t1", "--count", "25", "--batch", "10", "--size", "32",
            "--json", "--ack-log", str(tmp_path / "ack.jsonl"))
    assert r.returncode == 0, r.stderr
    *lines, env = [json.loads(x) for x in r.stdout.splitlines()]
    assert env["ok"] and env["command"] == "produce" and env["result"]["acked"] == 25
    assert len(lines) == 25 and [x["queue_offset"] for x in lines] == list(range(25))
    assert all(x["epoch"] == 3 for x in lines)
    assert len((tmp_path / "ack.jsonl").read_text().splitlines()) == 25

    r = cli("consume", "--broker", m.addr, "--topic", "t1", "--from", "5", "--count", "100", "--json")
    assert r.returncode == 0, r.stderr
    *got, env = [json.loads(x) for x in r.stdout.splitlines()]
    assert env["result"]["consumed"] == 20 and env["result"]["next_queue_offset"] == 25
    assert [x["queue_offset"] for x in got] == list(range(5, 25))
    assert [x["msg_id"] for x in got] == [x["msg_id"] for x in lines[5:]]
    assert all(x["size"] == 32 for x in got)

    r = cli("admin", "get-broker-epoch", "--broker", m.addr, "--json")
    assert r.returncode == 0, r.stderr
    e = json.loads(r.stdout)["result"]
    assert e["role"] == "master" and e["epochs"][0]["epoch"] == 3 and e["max_offset"] == e["confirm_offset"] > 0

    r = cli("admin", "switch-role", "--broker", m.addr, "--role", "master", "--epoch", "2", "--json")
    bad = json.loads(r.stdout)
    assert r.returncode == 1 and not bad["ok"] and bad["error"]["code"] == "STALE_EPOCH"
    assert bad["error"]["master_epoch"] == 3 and "not higher" in bad["error"]["message"]

    r = cli("produce", "--broker", m.addr, "--topic", "t1", "--body", "x" * 5000, "--json")
    assert r.returncode == 0
    r = cli("admin", "broker-status", "--broker", m.addr, "--json")
    st = json.loads(r.stdout)["result"]
    assert st["role"] == "master" and st["produced_msgs"] == 26

    # SIGTERM: clean stop, exit code 0; a restart recovers everything that was acked.
    m.proc.stop()
    assert m.proc.popen.returncode == 0
    start(procs, m, "master", "--epoch", "4")
    r = cli("consume", "--broker", m.addr, "--topic", "t1", "--count", "1000", "--json")
    assert len(r.stdout.splitlines()) == 26 + 1         # the records, then the envelope
    assert [x["epoch"] for x in json.loads(cli("admin", "get-broker-epoch", "--broker", m.addr,
                                                 "--json").stdout)["result"]["epochs"]] == [3, 4]


def test_grpc_limits_and_bad_requests(procs, tmp_path):
    (m,) = make_nodes(tmp_path, 1)
    start(procs, m, "master", "--epoch", "1", "--ack-mode", "master", "--max-message-bytes", "1000",
          "--max-request-bytes", "65536")

    async def run():
        # Default retries: on a loaded machine a (re)connect can miss gRPC's SETTINGS deadline
        # once; only UNAVAILABLE is retried, so the refusals below are still seen as sent.
        c = ProducerClient(m.addr)
        try:
            r = await c.produce(TOPIC, [b"a" * 10, b"b" * 1001, b"c" * 10])
            assert r.status == pb.MESSAGE_TOO_LARGE
            assert [x.status for x in r.results] == [pb.OK, pb.MESSAGE_TOO_LARGE, pb.OK]
            r = await c.produce("", [b"x"])
            assert r.status == pb.BAD_REQUEST
            # Over the gRPC frame limit: refused by the transport, broker unharmed.
            from autoswitch.broker.client.client import BrokerUnavailable

            with pytest.raises(BrokerUnavailable) as ei:
                await c.produce(TOPIC, [b"z" * 900] * 100)
            assert ei.value.details["grpc_code"] == "RESOURCE_EXHAUSTED"
            ok = await c.produce(TOPIC, [b"fine"])
            assert ok.ok and ok.results[0].queue_offset == 2
        finally:
            await c.close()
        a = AdminClient(m.addr)
        try:
            r = await a.switch_role("slave", 5)
            assert r.status == pb.BAD_REQUEST and r.role == "master"
        finally:
            await a.close()

    asyncio.run(run())


def test_quorum_ack_mode_tolerates_one_stalled_slave(procs, tmp_path):
    m, s2, s3 = make_nodes(tmp_path, 3)
    start(procs, m, "master", "--epoch", "1", "--ack-mode", "quorum", "--in-sync-replicas", "2",
          "--ack-timeout", "0.5")
    start(procs, s2, "slave", master=m)
    start(procs, s3, "slave", master=m)
    wait_until(lambda: epoch_info(m).sync_state_set == [1, 2, 3], 20, "both slaves in the SyncStateSet")

    def produce_once() -> int:
        async def run():
            c = ProducerClient(m.addr)
            try:
                return (await c.produce(TOPIC, [b"q"])).status
            finally:
                await c.close()

        return asyncio.run(run())

    os.kill(s3.proc.pid, signal.SIGSTOP)
    try:
        # master + s2 = 2 replicas: enough for in_sync_replicas=2.
        assert produce_once() == pb.OK
        os.kill(s2.proc.pid, signal.SIGSTOP)
        try:
            assert produce_once() == pb.FLUSH_SLAVE_TIMEOUT
        finally:
            os.kill(s2.proc.pid, signal.SIGCONT)
    finally:
        os.kill(s3.proc.pid, signal.SIGCONT)
    wait_caught_up(m, [s2, s3])
    assert digest(m) == digest(s2) == digest(s3)


def test_corrupt_epochfile_refuses_start_with_typed_error(procs, tmp_path):
    (m,) = make_nodes(tmp_path, 1)
    start(procs, m, "master", "--epoch", "1", "--ack-mode", "master")
    asyncio.run(produce_many(m.addr, 100, batch=100, producers=1))
    m.proc.stop()
    ef = m.data_dir / "epochfile"
    raw = bytearray(ef.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    ef.write_bytes(bytes(raw))
    m.proc = procs.start(m.name, ["broker", "--role", "master", "--group", "g1", "--broker-id", "1",
                                  "--listen", m.addr, "--ha-listen", m.ha_addr, "--data-dir", str(m.data_dir)])
    rc = m.proc.popen.wait(30)
    assert rc == 1
    events = [json.loads(x) for x in m.proc.log_text().splitlines() if x.startswith("{")]
    failed = [e for e in events if e.get("event") == "broker_failed"]
    assert failed, "a corrupt EpochFile must be reported, not silently reset"
    assert "CORRUPT" in failed[-1]["code"] and "epochfile" in json.dumps(failed[-1]), failed[-1]
    assert "Traceback" not in m.proc.log_text()


def test_concurrent_rpcs_beyond_the_limit_are_refused_at_once(procs, tmp_path):
    """max_concurrent_rpcs: calls past the limit get RESOURCE_EXHAUSTED instead of queueing; the
    broker keeps serving. 40 produces wait for a stopped slave's ack (up to ack_timeout)."""
    m, s = make_nodes(tmp_path, 2)
    cfg = tmp_path / "m.toml"
    cfg.write_text("max_concurrent_rpcs = 16\nmax_inflight_produce = 1000\n")
    start(procs, m, "master", "--epoch", "1", "--ack-mode", "all", "--ack-timeout", "20", config=cfg)
    start(procs, s, "slave", master=m)
    wait_until(lambda: epoch_info(m).sync_state_set == [1, 2], 60, "slave in the SyncStateSet")
    os.kill(s.proc.pid, signal.SIGSTOP)
    try:
        async def run():
            import grpc

            from autoswitch.proto import broker_pb2_grpc as pbg
            async with grpc.aio.insecure_channel(m.addr) as ch:
                stub = pbg.BrokerServiceStub(ch)

                async def one(i: int):
                    try:
                        await stub.Produce(pb.ProduceRequest(topic=TOPIC, messages=[
                            pb.ProduceMessage(body=b"w", msg_id=f"c{i}")]), timeout=60)
                        return "answered"
                    except grpc.aio.AioRpcError as e:
                        return e.code().name
                return await asyncio.gather(*(one(i) for i in range(40)))
        codes = asyncio.run(run())
    finally:
        os.kill(s.proc.pid, signal.SIGCONT)
    assert codes.count("RESOURCE_EXHAUSTED") >= 40 - 16, codes
    assert m.proc.alive() and epoch_info(m).role == "master"


def test_consume_long_poll_answers_when_messages_arrive(procs, tmp_path):
    (m,) = make_nodes(tmp_path, 1)
    start(procs, m, "master", "--epoch", "1", "--ack-mode", "all")

    async def run():
        c = ConsumerClient(m.addr, timeout_s=30)
        p = ProducerClient(m.addr, timeout_s=30)
        try:
            # Nothing there and a short wait: answered empty once the wait runs out.
            r = await c.consume(TOPIC, 0, 100, record_runs=True, min_count=5, max_wait_ms=50)
            assert r.status == pb.OK and not r.runs and r.next_queue_offset == 0
            # A long wait is answered as soon as min_count confirmed messages are there (the test
            # would time out, not pass, if the broker held the call for its whole 60 s wait).
            waiting = asyncio.ensure_future(c.consume(TOPIC, 0, 100, record_runs=True, min_count=5,
                                                      max_wait_ms=60_000))
            for i in range(5):
                assert (await p.produce(TOPIC, [f"m{i}".encode()])).ok
            r = await asyncio.wait_for(waiting, 30)
            assert r.status == pb.OK
            assert [x.body for x in consumed_messages(r)] == [f"m{i}".encode() for i in range(5)]
            # Bad arguments get a typed refusal.
            r = await c.consume(TOPIC, 0, 100, min_count=-1, max_wait_ms=10)
            assert r.status == pb.BAD_REQUEST
        finally:
            await c.close()
            await p.close()

    asyncio.run(run())
