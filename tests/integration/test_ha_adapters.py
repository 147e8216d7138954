"""HAMaster/HASlave on real sockets (127.0.0.1) in one process."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
import uuid

import pytest
from autoswitch.broker.storage.record import Message
from autoswitch.broker.storage.store import MessageStore
from autoswitch.broker.storage.store_config import StoreConfig
from autoswitch.epochfile import EpochFile
from autoswitch.ha.codec import Ack, SlaveHandshake, encode
from autoswitch.ha.config import HAConfig
from autoswitch.ha.errors import SyncStateProposalRejected
from autoswitch.ha.io.master import HAMaster
from autoswitch.ha.io.slave import HASlave
from autoswitch.ha.seams import LocalSyncStateProposer

from autoswitch.base.write_errors import FlushSlaveTimeout, InSyncReplicasNotEnough
from tests.procs import free_port
from tests.waiting import until

pytestmark = pytest.mark.integration

H = "127.0.0.1"


STORE_CFG = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=16 * 1024, flush_mode="async")


_OPEN: list[MessageStore] = []


@pytest.fixture(autouse=True)
def _close_stores():
    yield
    while _OPEN:
        st = _OPEN.pop()
        with contextlib.suppress(Exception):
            st.close()


def make_log(path) -> MessageStore:
    """A real MessageStore on real files; small segments so batches meet segment ends."""
    st = MessageStore(path, STORE_CFG)
    _OPEN.append(st)
    return st


def payloads(n: int, seed: int, size: int = 200) -> list[bytes]:
    return [bytes([(seed * 31 + i) % 251]) * (size + (i * 7 + seed) % 50) for i in range(n)]


def write(log: MessageStore, items: list[bytes]) -> int:
    """A master-side append; returns the new max offset."""
    msgs = [Message("t", body, uuid.uuid4().hex, 0) for body in items]
    return log.append_messages(msgs).end_offset


def all_bytes(log: MessageStore) -> bytes:
    out, off = [], log.min_offset
    while off < log.max_offset:
        chunk = log.read_raw(off, 1 << 20)
        assert chunk, off
        out.append(chunk)
        off += len(chunk)
    return b"".join(out)


class RejectingProposer:
    async def propose(self, master_epoch, sync_state_set_epoch, new_set, leaving=()):
        raise SyncStateProposalRejected("controller says no")


def cfg(**kw) -> HAConfig:
    base = dict(heartbeat_interval_s=0.05, housekeeping_interval_s=1.0, reconnect_backoff_min_s=0.02,
                reconnect_backoff_max_s=0.2, sync_state_check_interval_s=0.05, handshake_timeout_s=1.0,
                transfer_batch_size=64 * 1024)
    base.update(kw)
    return HAConfig(**base).validate()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_master_and_two_slaves_replicate_and_a_cut_slave_reconnects(tmp_path):
    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        write(m, payloads(300, seed=1))
        master = HAMaster(m, cfg(), 1, "g", 1, frozenset({1}), 1, LocalSyncStateProposer())
        await master.start(H, 0)
        s2, s3 = make_log(tmp_path / "s2"), make_log(tmp_path / "s3")
        a = HASlave(s2, cfg(), 2, "g", (H, master.port))
        b = HASlave(s3, cfg(), 3, "g", (H, master.port))
        await a.start()
        await b.start()
        try:
            await until(lambda: s2.max_offset == s3.max_offset == m.max_offset, "initial catch-up")
            await until(lambda: master.sync_state_set == frozenset({1, 2, 3}), "SSS expanded")
            # A plaintext connection waits below write_buffer_high (the TLS test: its own mark).
            assert master._conns[2].writer.transport.get_write_buffer_limits()[1] == cfg().write_buffer_high
            end = write(m, payloads(200, seed=2))
            master.notify_appended()
            await master.wait_for_replicas(end, 10)
            assert s2.max_offset >= end and s3.max_offset >= end
            await until(lambda: master.confirm_offset == end, "confirm offset")
            # Cut slave 2's connection; it reconnects, re-handshakes and continues.
            connects = a.connects
            a.disconnect()
            await until(lambda: a.connects > connects, "reconnect")
            end = write(m, payloads(100, seed=3))
            master.notify_appended()
            await until(lambda: s2.max_offset == s3.max_offset == end, "catch-up after reconnect")
            await until(lambda: s2.confirm_offset == end, "confirm offset reaches slave")
            for s in (s2, s3):
                assert all_bytes(s) == all_bytes(m)
                assert s.epochs == m.epochs
            infos = {i["brokerId"]: i for i in master.slave_infos()}
            assert infos[2]["ackOffset"] == end and infos[3]["inSync"]
        finally:
            await a.stop()
            await b.stop()
            await master.stop()

    run(main())


def test_role_switch_old_master_truncates_its_unreplicated_tail(tmp_path):
    async def main():
        old, new = make_log(tmp_path / "old"), make_log(tmp_path / "new")
        old.append_epoch(1, 0)
        write(old, payloads(200, seed=4))
        m1 = HAMaster(old, cfg(), 1, "g", 1, frozenset({1}), 1, LocalSyncStateProposer())
        await m1.start(H, 0)
        sl = HASlave(new, cfg(), 2, "g", (H, m1.port))
        await sl.start()
        await until(lambda: new.max_offset == old.max_offset, "replicated")
        await sl.stop()
        common = old.max_offset
        tail_end = write(old, payloads(50, seed=5))     # written by the old master, never replicated
        assert tail_end > common
        await m1.stop()
        # Broker 1 becomes a slave of broker 2 before broker 2 listens (refused connects first);
        # broker 2 becomes master in epoch 2, then writes.
        port = free_port()
        sl1 = HASlave(old, cfg(), 1, "g", (H, port))
        await sl1.start()
        await until(lambda: sl1.last_error is not None, "a refused connect")
        new.append_epoch(2, new.max_offset)
        m2 = HAMaster(new, cfg(), 2, "g", 2, frozenset({2}), 2, LocalSyncStateProposer())
        await m2.start(H, port)
        try:
            await until(lambda: old.max_offset == common and sl1.state == "TRANSFER", "old master truncated")
            end = write(new, payloads(80, seed=6))
            m2.notify_appended()
            await until(lambda: old.max_offset == end and old.epochs == new.epochs, "old master follows")
            assert all_bytes(old) == all_bytes(new)
            assert [(e.epoch, e.start_offset) for e in old.epochs.entries()] == [(1, 0), (2, common)]
        finally:
            await sl1.stop()
            await m2.stop()
        # What is on disk agrees too: reopen both stores (recovery) and compare.
        old_dir, new_dir = tmp_path / "old", tmp_path / "new"
        old.close()
        new.close()
        a, b = make_log(old_dir), make_log(new_dir)
        try:
            assert a.epochs == b.epochs and a.max_offset == b.max_offset == end
            assert all_bytes(a) == all_bytes(b)
            assert EpochFile(_epoch_file(old_dir)).load() == EpochFile(_epoch_file(new_dir)).load()
        finally:
            a.close()
            b.close()

    run(main())


def _epoch_file(d):
    found = [p for p in d.rglob("*") if p.is_file() and "epoch" in p.name.lower() and not p.name.endswith(".tmp")]
    assert len(found) == 1, found
    return found[0]


def _garbage_cases() -> list[tuple[str, bytes]]:
    return [
        ("bad_state", struct.pack(">iq", 7, 0)),
        ("bad_state", b"GET / HTTP/1.1\r\n\r\n"),
        ("bad_broker_id", struct.pack(">ihhq", 1, 0, 0, -1)),
        ("ack_before_handshake", encode(Ack(5))),
        ("ack_beyond_master_max", encode(SlaveHandshake(9)) + encode(Ack(0)) + encode(Ack(1 << 40))),
        ("unexpected_handshake", encode(SlaveHandshake(9)) + encode(Ack(0)) + encode(SlaveHandshake(9))),
        ("self_connection", encode(SlaveHandshake(1))),
    ]


def test_malformed_input_closes_only_that_connection(tmp_path):
    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        write(m, payloads(100, seed=7))
        master = HAMaster(m, cfg(), 1, "g", 1, frozenset({1}), 1, LocalSyncStateProposer())
        await master.start(H, 0)
        good = make_log(tmp_path / "good")
        sl = HASlave(good, cfg(), 2, "g", (H, master.port))
        await sl.start()
        try:
            await until(lambda: good.max_offset == m.max_offset, "good slave catches up")
            for reason, data in _garbage_cases():
                r, w = await asyncio.open_connection(H, master.port)
                w.write(data)
                await w.drain()
                # The master closes the connection (EOF) after possibly answering the handshake.
                while await asyncio.wait_for(r.read(65536), 30):
                    pass
                w.close()
                assert master.rejected.get(reason, 0) >= 1, (reason, master.rejected)
            # Random bytes and a half frame that never completes (handshake timeout).
            with socket.create_connection((H, master.port)) as raw:
                raw.sendall(bytes(range(256)) * 4)
            r, w = await asyncio.open_connection(H, master.port)
            w.write(b"\x00\x00")
            await asyncio.wait_for(r.read(), 30)
            w.close()
            assert master.rejected.get("handshake_timeout", 0) >= 1
            # A slave that handshakes and then never acks is dropped after the housekeeping interval.
            r, w = await asyncio.open_connection(H, master.port)
            w.write(encode(SlaveHandshake(8)) + encode(Ack(0)))
            while await asyncio.wait_for(r.read(1 << 20), 30):
                pass
            w.close()
            assert master.rejected.get("slave_silent", 0) >= 1
            end = write(m, payloads(50, seed=8))
            master.notify_appended()
            await until(lambda: good.max_offset == end, "good slave still served")
            assert all_bytes(good) == all_bytes(m)
        finally:
            await sl.stop()
            await master.stop()

    run(main())


def test_ack_modes_and_errors_on_real_sockets(tmp_path):
    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        write(m, payloads(10, seed=9))
        c = cfg(ack_mode="all", min_in_sync_replicas=2, ha_max_time_slave_not_catchup_s=30)
        # The controller refuses every change, so slave 2 stays in the SSS whatever happens.
        master = HAMaster(m, c, 1, "g", 1, frozenset({1, 2}), 1, RejectingProposer())
        await master.start(H, 0)
        try:
            # Slave 2 is in the SSS but not connected: fewer than minInSyncReplicas alive.
            with pytest.raises(InSyncReplicasNotEnough):
                await master.wait_for_replicas(m.max_offset, 1)
            s = make_log(tmp_path / "s")
            sl = HASlave(s, c, 2, "g", (H, master.port))
            await sl.start()
            await until(lambda: master.tracker.alive_in_sync() == 2, "slave alive")
            end = write(m, payloads(10, seed=10))
            master.notify_appended()
            await master.wait_for_replicas(end, 10)
            assert s.max_offset >= end
            await sl.stop()
            await until(lambda: master.tracker.alive_in_sync() == 1, "slave gone")
            with pytest.raises(InSyncReplicasNotEnough):
                await master.wait_for_replicas(end, 1)
            await until(lambda: master.tracker.failures >= 1, "shrink proposal refused")
            assert master.sync_state_set == frozenset({1, 2})
            # With the floor at 1 the write waits for slave 2's ack, which never comes.
            master.tracker.config.min_in_sync_replicas = 1
            end2 = write(m, payloads(1, seed=11))
            with pytest.raises(FlushSlaveTimeout):
                await master.wait_for_replicas(end2, 0.2)
            assert m.max_offset == end2, "a timed-out write stays in the log"
            assert master.confirm_offset == end
        finally:
            await master.stop()

    run(main())


def test_slave_reconnects_when_master_is_silent_or_speaks_garbage(tmp_path):
    async def main():
        behaviour = {"mode": "silent"}

        async def fake_master(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await r.readexactly(16)
            if behaviour["mode"] == "garbage":
                w.write(struct.pack(">iiqiqq", 2, -7, 0, 1, 0, 0))    # negative body size
            with contextlib.suppress(Exception):
                await r.read()                                     # until the slave hangs up
            w.close()

        server = await asyncio.start_server(fake_master, H, 0)
        port = server.sockets[0].getsockname()[1]
        s = make_log(tmp_path / "s")
        s.append_epoch(1, 0)
        write(s, payloads(20, seed=12))
        before = all_bytes(s), s.epochs.entries()
        sl = HASlave(s, cfg(housekeeping_interval_s=0.3, heartbeat_interval_s=0.1), 2, "g", (H, port))
        await sl.start()
        try:
            await until(lambda: sl.connects >= 2, "reconnect after silence")
            assert sl.last_error["reason"] == "master_silent"
            behaviour["mode"] = "garbage"
            await until(lambda: sl.last_error["reason"] == "negative_body_size", "garbage rejected")
            assert (all_bytes(s), s.epochs.entries()) == before, "the slave's log is unharmed"
        finally:
            await sl.stop()
            server.close()

    run(main())


def test_sync_from_last_file_and_async_learner_on_real_stores(tmp_path):
    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        end = write(m, payloads(3000, seed=13))            # several 256 KiB segments
        base = m.segment_base(end)
        assert 0 < base <= end
        master = HAMaster(m, cfg(), 1, "g", 1, frozenset({1}), 1, LocalSyncStateProposer())
        await master.start(H, 0)
        s = make_log(tmp_path / "s")
        sl = HASlave(s, cfg(), 3, "g", (H, master.port), async_learner=True, sync_from_last_file=True)
        await sl.start()
        try:
            await until(lambda: s.max_offset == end, "learner caught up")
            assert s.min_offset == base
            await asyncio.sleep(0.2)                        # several shrink/expand checks
            assert master.sync_state_set == frozenset({1}), "a learner never joins the SSS"
            end2 = write(m, payloads(5, seed=14))
            master.notify_appended()
            await master.wait_for_replicas(end2, 5)         # "all" over {1}: the learner is not awaited
            await until(lambda: s.max_offset == end2, "learner follows")
            # A re-handshake must find the consistent point although the learner's log (and
            # EpochFile) start at the master's last segment, not at 0.
            connects = sl.connects
            sl.disconnect()
            await until(lambda: sl.connects > connects and sl.state == "TRANSFER", "learner reconnects")
            end3 = write(m, payloads(5, seed=16))
            master.notify_appended()
            await until(lambda: s.max_offset == end3, "learner follows after reconnect")
            assert s.min_offset == base and sl.last_error is None or sl.last_error["reason"] == "connection_lost"
        finally:
            await sl.stop()
            await master.stop()

    run(main())


def test_a_live_connection_is_not_displaced_and_its_successor_survives_its_close(tmp_path):
    """A second connection claiming a connected brokerId is refused (without credentials it cannot
    prove it is the same broker, and its acks would count for that member); once the first is
    gone, a new one gets in, and the old handler's cleanup never removes its successor
    (RocketMQ PR #9897)."""
    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        write(m, payloads(5, seed=15))
        master = HAMaster(m, cfg(), 1, "g", 1, frozenset({1}), 1, LocalSyncStateProposer())
        await master.start(H, 0)
        try:
            r1, w1 = await asyncio.open_connection(H, master.port)
            w1.write(encode(SlaveHandshake(5)) + encode(Ack(0)))
            await until(lambda: any(i["brokerId"] == 5 and i["connected"] for i in master.slave_infos()), "r1")
            first = master._conns[5]
            r2, w2 = await asyncio.open_connection(H, master.port)
            w2.write(encode(SlaveHandshake(5)) + encode(Ack(0)))
            assert await asyncio.wait_for(r2.read(1 << 20), 30) == b"", "the newcomer gets nothing, not even a handshake"
            w2.close()
            assert master.rejected.get("replica_already_connected") == 1
            assert master._conns[5] is first and not first.closed
            w1.close()
            await until(lambda: 5 not in master._conns, "r1 gone")
            r3, w3 = await asyncio.open_connection(H, master.port)
            w3.write(encode(SlaveHandshake(5)) + encode(Ack(0)))
            await until(lambda: 5 in master._conns and master._conns[5] is not first, "r3 in")
            await asyncio.sleep(0)          # let r1's handler finish its cleanup
            assert master._conns[5] is not first and not master._conns[5].closed
            w3.close()
            await until(lambda: not any(i["connected"] for i in master.slave_infos()), "r3 gone")
        finally:
            await master.stop()

    run(main())


def test_a_fenced_master_does_not_move_its_slaves_confirm_offset(tmp_path):
    """While the broker holds its commit point (lease ran out), the confirmOffset in transfer and
    heartbeat frames stays at the frozen value, though the slave keeps replicating and acking;
    once the fence lifts, the slave's confirmOffset catches up."""

    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        fence = {"up": False, "polls": 0}

        def fenced() -> bool:
            if fence["up"]:
                fence["polls"] += 1
            return fence["up"]

        master = HAMaster(m, cfg(), 1, "g", 1, frozenset({1}), 1, LocalSyncStateProposer(), fenced=fenced)
        await master.start(H, 0)
        s2 = make_log(tmp_path / "s2")
        a = HASlave(s2, cfg(), 2, "g", (H, master.port))
        await a.start()
        try:
            await until(lambda: master.sync_state_set == frozenset({1, 2}), "slave in sync")
            end1 = write(m, payloads(100, seed=1))
            master.notify_appended()
            await until(lambda: s2.confirm_offset == end1, "confirm offset reaches slave")
            fence["up"] = True                        # the broker fenced itself here
            master.commit.freeze(m.max_offset)
            end2 = write(m, payloads(100, seed=2))
            master.notify_appended()
            await until(lambda: s2.max_offset == end2 and master.replicated_offset == end2, "replicated while fenced")
            polls = fence["polls"]
            await until(lambda: fence["polls"] >= polls + 5, "several frames sent while held")
            await asyncio.sleep(0.2)                  # let the last of them arrive
            assert s2.confirm_offset == end1 and master.confirm_offset == end1
            fence["up"] = False                       # lease renewed
            await until(lambda: s2.confirm_offset == end2, "confirm offset moves on after the fence")
        finally:
            await a.stop()
            await master.stop()

    run(main())


def test_a_slave_with_durable_acks_fsyncs_before_it_acknowledges(tmp_path):
    """Issue 30, found by `make powerloss`: with the broker's flush = "sync" the master fsynced before
    it acknowledged, but its slaves acked from the page cache, so a power cut of every replica
    could take acknowledged messages. Such a slave's ack now means "on disk": when the master has
    its ack, the slave's log is fsynced past the acked offset (its synced offset: the commit log's
    fdatasync, a group commit's, covered it)."""

    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        master = HAMaster(m, cfg(), 1, "g", 1, frozenset({1, 2, 3}), 1, LocalSyncStateProposer())
        await master.start(H, 0)
        durable, lazy = make_log(tmp_path / "s2"), make_log(tmp_path / "s3")
        a = HASlave(durable, cfg(), 2, "g", (H, master.port), sync_before_ack=True)
        b = HASlave(lazy, cfg(), 3, "g", (H, master.port))
        await a.start()
        await b.start()
        try:
            for seed in (1, 2, 3):
                end = write(m, payloads(150, seed=seed))
                master.notify_appended()
                await master.wait_for_replicas(end, 10)
                assert durable.synced_offset >= end
            assert lazy.synced_offset < end       # the default acks from memory
        finally:
            await a.stop()
            await b.stop()
            await master.stop()

    run(main())


class _ControllerView:
    """What the master's registry asks the controllers (ReplicasAdapter.registered_members): here a
    dict the test edits, standing for registrations the controllers accepted."""

    def __init__(self, members: dict[int, str]) -> None:
        import time as _time

        from autoswitch.base.log import get_logger
        self.members = dict(members)
        self.zones: dict[int, str] = {}
        self.asked = 0
        self.clock = _time.monotonic
        self._log = get_logger("test")

    async def registered_members(self):
        from autoswitch.controller.api import RegisteredReplica

        self.asked += 1
        return {b: RegisteredReplica(inc, self.zones.get(b, "")) for b, inc in self.members.items()}


def test_only_the_registered_process_of_a_broker_id_replicates_or_enters_the_sync_state_set(tmp_path):
    """Issue 30 item 2: a second process of brokerId 2 (a cloned data directory) states another
    incarnation in its handshake (protocol version 3) and is refused; the registered one
    replicates. When the controllers register a new process for 2 while the old connection lives
    (the old process was cut from the controllers only), the master does not let that connection
    take 2 back into the SyncStateSet: it closes it, and the old process cannot come back."""
    from autoswitch.broker.replicas.replica_registry import ControllerReplicaRegistry

    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        write(m, payloads(50, seed=21))
        view = _ControllerView({1: "inc-m", 2: "inc-a"})
        registry = ControllerReplicaRegistry(view.registered_members, view.clock, view._log, min_refresh_s=0.0)
        proposed: list[frozenset[int]] = []

        class Recording(LocalSyncStateProposer):
            async def propose(self, master_epoch, sync_state_set_epoch, new_set, leaving=()):
                proposed.append(frozenset(new_set))
                return await super().propose(master_epoch, sync_state_set_epoch, new_set)

        master = HAMaster(m, cfg(), 1, "g", 1, frozenset({1}), 1, Recording(), registry=registry)
        await master.start(H, 0)
        clone = HASlave(make_log(tmp_path / "clone"), cfg(), 2, "g", (H, master.port), incarnation="inc-b")
        await clone.start()
        try:
            await until(lambda: master.rejected.get("stale_incarnation", 0) >= 1, "the clone refused")
            assert master.sync_state_set == frozenset({1}) and 2 not in master._conns
            await clone.stop()
            s2 = make_log(tmp_path / "s2")
            real = HASlave(s2, cfg(), 2, "g", (H, master.port), incarnation="inc-a")
            await real.start()
            await until(lambda: master.sync_state_set == frozenset({1, 2}), "the registered process in sync")
            assert s2.max_offset == m.max_offset
            await real.stop()
            await until(lambda: 2 not in master._conns, "gone")
            await until(lambda: master.sync_state_set == frozenset({1}), "2 shrunk out once it left")
            # The controllers register a new process for 2; the master's registry still holds the
            # old answer, so the old process's handshake is admitted from the cache ...
            view.members[2] = "inc-new"
            n = len(proposed)
            old = HASlave(s2, cfg(), 2, "g", (H, master.port), incarnation="inc-a")
            await old.start()
            # ... but its expansion asks the controllers, is refused, and its connection closed.
            await until(lambda: master.rejected.get("stale_incarnation", 0) >= 2, "the old process refused again")
            assert master.sync_state_set == frozenset({1}), "a stale process never re-enters the set"
            assert all(2 not in p for p in proposed[n:])
            await old.stop()
        finally:
            await clone.stop()
            await master.stop()

    run(main())


def test_replication_over_mutual_tls_keeps_little_ciphertext_waiting(tmp_path):
    """Over TLS the master's connection keeps its own write high-water mark whatever
    ``write_buffer_high`` (plaintext) says (the ciphertext waiting in OpenSSL's memory BIO is what
    it bounds: bench/results/security.md), and the log still arrives whole, in frames larger than
    that mark."""
    from autoswitch.ha.config import TLS_WRITE_BUFFER_HIGH

    from autoswitch.app.certs import init_dev_ca
    from autoswitch.base.tls import TLSConfig, client_ssl_context, server_ssl_context

    ids = init_dev_ca(tmp_path / "tls", ["broker/g/1", "broker/g/2"])

    def tls(name: str) -> TLSConfig:
        return TLSConfig(ca=ids[name]["ca"], cert=ids[name]["cert"], key=ids[name]["key"]).validate()

    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        for seed in range(8):
            write(m, payloads(2000, seed=seed, size=1000))
        big = cfg(transfer_batch_size=4 * 1024 * 1024)
        assert big.write_buffer_high < TLS_WRITE_BUFFER_HIGH     # the plaintext default
        master = HAMaster(m, big, 1, "g", 1, frozenset({1}), 1, LocalSyncStateProposer(), bind_identities=True)
        await master.start(H, 0, ssl=server_ssl_context(tls("broker/g/1")))
        s = make_log(tmp_path / "s")
        sl = HASlave(s, big, 2, "g", (H, master.port), ssl=lambda: client_ssl_context(tls("broker/g/2")),
                     bind_identities=True)
        await sl.start()
        try:
            await until(lambda: 2 in master._conns, "slave connected over TLS")
            transport = master._conns[2].writer.transport
            assert transport.get_extra_info("ssl_object") is not None
            assert transport.get_write_buffer_limits()[1] == TLS_WRITE_BUFFER_HIGH
            await until(lambda: s.max_offset == m.max_offset, "catch-up over TLS")
            assert all_bytes(s) == all_bytes(m)
        finally:
            await sl.stop()
            await master.stop()

    run(main())


def test_a_catch_up_gives_the_event_loop_back_between_large_frames(tmp_path):
    """A socket that keeps up never makes ``drain()`` wait, so a catch-up of many large frames
    used to run in one task step and hold every other task of the broker (produce requests, lease
    heartbeats) for as long as the whole catch-up: 140-170 ms per GiB here. The writer below is
    such a socket; another task must run between the frames."""
    from autoswitch.ha.io.master_conn import SlaveConn, transfer_loop
    from autoswitch.ha.master_session import MasterSession
    from autoswitch.ha.slave_session import SlaveSession

    from autoswitch.base.log import get_logger
    from tests.unit.test_ha_memlog import MemLog

    class KeepsUp:
        """A StreamWriter whose socket takes everything at once: drain() returns without yielding."""

        def __init__(self) -> None:
            self.sent = 0

        def write(self, data: bytes) -> None:
            self.sent += len(data)

        async def drain(self) -> None:
            return None

        def get_extra_info(self, name: str, default=None):
            return default          # a plaintext connection

    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        for seed in range(20):
            write(m, payloads(200, seed=seed, size=1000))
        c = cfg(transfer_batch_size=128 * 1024)
        master = HAMaster(m, c, 1, "g", 1, frozenset({1}), 1, LocalSyncStateProposer())
        session = MasterSession(m, c, master_broker_id=1, now=0.0)
        slave = SlaveSession(MemLog(), broker_id=2)
        ack = slave.on_frame(session.on_handshake(slave.start(), 0.0))
        session.on_ack(ack, 0.0)
        writer = KeepsUp()
        conn = SlaveConn(session, writer, "test", get_logger("test"))    # type: ignore[arg-type]
        task = asyncio.create_task(transfer_loop(conn, c, master.digests, time.monotonic,
                                                 lambda: master.confirm_offset, lambda: None))
        seen = []
        while session.next_offset < m.max_offset:
            seen.append(writer.sent)
            await asyncio.sleep(0)
        conn.closed = True
        task.cancel()
        frames = m.max_offset // (128 * 1024)
        assert frames >= 20
        # the other task ran between the frames, not only before the first and after the last
        assert len({s for s in seen if 0 < s}) >= frames // 2, (len(seen), frames)

    run(main())


def test_a_loop_that_ends_before_stop_ends_the_process_and_stop_does_not(tmp_path, monkeypatch):
    """The HA master's housekeeping (SyncStateSet shrink, commit point, zones), the slave's
    connection loop and the broker's flusher run until stop(): one that ends before is a bug
    that would leave the replica serving without it (autoswitch/base/supervise.py)."""
    from autoswitch.broker.write_path import GroupFlusher

    from autoswitch.base import supervise

    exits: list[int] = []
    monkeypatch.setattr(supervise, "process_exit", exits.append)

    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        master = HAMaster(m, cfg(), 1, "g", 1, frozenset({1}), 1, LocalSyncStateProposer())
        await master.start(H, 0)
        slave = HASlave(make_log(tmp_path / "s"), cfg(), 2, "g", (H, master.port))
        await slave.start()
        flusher = GroupFlusher(m, "async", 0.05)
        flusher.start()
        tasks = {t.get_name(): t for t in asyncio.all_tasks()}
        for n, name in enumerate(("ha-housekeeping", "ha-slave", "flusher"), start=1):
            tasks[name].cancel()
            await until(lambda n=n: len(exits) == n, f"{name} ended the process")
        await slave.stop()
        await master.stop()
        await flusher.stop()
        await asyncio.sleep(0)

    run(main())
    assert exits == [70, 70, 70]
