"""Issue 58, item 2: an acknowledgement that promises durability never counts a byte its sender
has not fsynced, and a failed fsync is fatal.

Real stores on real files; the disk faults are real too: tests/grayfail/slowfs.c (a FUSE
pass-through) makes every fsync fail with EIO on command, so the kernel returns the error the
product must survive. HAMaster and HASlave talk over sockets on 127.0.0.1; the last test runs a
real cluster of processes.

Before the fix (6b60806): a store whose fsync failed went on appending and acknowledging once
the disk answered again (the page cache may have dropped the pages: the PostgreSQL rule); a
slave's handshake acknowledged its whole log without an fsync, so bytes a failed read had
appended were counted as a durable copy; and a durable master counted its own log end, not its
fsynced end, for confirmOffset, so consumers read bytes a power cut of the master takes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path

import pytest
from autoswitch.broker.config import load_config
from autoswitch.broker.server import Broker
from autoswitch.broker.storage.record import Message
from autoswitch.broker.storage.store import MessageStore
from autoswitch.broker.storage.store_config import StoreConfig
from autoswitch.ha.config import HAConfig
from autoswitch.ha.io.master import HAMaster
from autoswitch.ha.io.slave import HASlave
from autoswitch.ha.seams import LocalSyncStateProposer

from autoswitch.base.fsutil import FsyncFailed
from tests.grayfail.slowfs import SlowFs, Unavailable
from tests.procs import free_port
from tests.waiting import until

pytestmark = pytest.mark.integration

H = "127.0.0.1"
STORE = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=16 * 1024, flush_mode="async")


def _slowfs(stack: contextlib.ExitStack, tmp: Path, name: str) -> SlowFs:
    try:
        return stack.enter_context(SlowFs(tmp / f"disk-{name}", tmp / name))
    except Unavailable as e:
        pytest.skip(f"slowfs cannot run here: {e}")


def _msgs(n: int, size: int = 120) -> list[Message]:
    return [Message("t", bytes([i % 251]) * size, uuid.uuid4().hex, 1) for i in range(n)]


def _ha(**kw) -> HAConfig:
    base = dict(heartbeat_interval_s=0.05, housekeeping_interval_s=1.0, reconnect_backoff_min_s=0.02,
                reconnect_backoff_max_s=0.1, sync_state_check_interval_s=0.05, handshake_timeout_s=1.0)
    base.update(kw)
    return HAConfig(**base).validate()


def test_a_failed_fsync_poisons_the_store_for_good(tmp_path):
    """EIO from fsync, then the disk answers again: the store must not go on (a later fsync would
    "succeed" without the pages the kernel dropped). Every later call raises the same error, and
    the owner is told once."""
    with contextlib.ExitStack() as stack:
        fs = _slowfs(stack, tmp_path, "s")
        told: list[FsyncFailed] = []
        st = MessageStore(tmp_path / "s", STORE, on_fsync_failed=told.append)
        stack.callback(st.abandon)
        st.append_epoch(1, 0)
        st.append_messages(_msgs(10))
        st.flush()
        end = st.max_offset
        st.append_messages(_msgs(5))
        fs.set("fsync-eio")
        with pytest.raises(FsyncFailed):
            st.flush()
        fs.set("ok")                    # a transient error: the disk answers again
        for call in (st.flush, lambda: st.append_messages(_msgs(1)), lambda: st.read_raw(0, 4096),
                     lambda: st.append_raw(st.max_offset, b"", 1, 0)):
            with pytest.raises(FsyncFailed):
                call()
        assert len(told) == 1 and told[0].code == "FSYNC_FAILED"
        assert st.synced_offset == end          # what the last good fsync covered


def test_a_slave_never_acks_what_it_has_not_fsynced(tmp_path):
    """A durable slave whose disk starts failing fsyncs: the master never counts an ack above what
    the slave had on disk before the fault, however often the slave reconnects (each handshake
    acks its log: before the fix, without an fsync)."""

    async def main() -> None:
        with contextlib.ExitStack() as stack:
            fs = _slowfs(stack, tmp_path, "s2")
            m = MessageStore(tmp_path / "m", STORE)
            stack.callback(m.abandon)
            m.append_epoch(1, 0)
            m.append_messages(_msgs(50))
            master = HAMaster(m, _ha(), 1, "g", 1, frozenset({1}), 1, LocalSyncStateProposer())
            await master.start(H, 0)
            s = MessageStore(tmp_path / "s2", STORE)
            stack.callback(s.abandon)
            slave = HASlave(s, _ha(), 2, "g", (H, master.port), sync_before_ack=True)
            await slave.start()
            try:
                await until(lambda: master.replica_acked(2) == m.max_offset, "caught up")
                durable = s.synced_offset
                assert durable == m.max_offset
                fs.set("fsync-eio")
                m.append_messages(_msgs(40))
                master.notify_appended()
                connects = slave.connects
                # the slave appends the new bytes, fails to fsync them, and reconnects (handshakes)
                # again and again: until then, or until the master counted an ack past the disk
                await until(lambda: slave.connects > connects + 2 or master.tracker.replicas[2].ack_offset > durable,
                            "the slave handshook again after the failure")
                assert master.tracker.replicas[2].ack_offset <= durable, \
                    (master.tracker.replicas[2].ack_offset, durable)
            finally:
                fs.set("ok")
                await slave.stop()
                await master.stop()

    asyncio.run(asyncio.wait_for(main(), 120))


def test_a_durable_master_never_lets_consumers_past_its_own_fsync(tmp_path):
    """flush = "sync": the master's own copy counts for confirmOffset up to its fsynced end, so no
    consumer reads a message a power cut of the master could take back."""
    cfg = load_config(None, {"data_dir": str(tmp_path / "d"), "listen": f"{H}:{free_port()}",
                             "ha_listen": f"{H}:{free_port()}", "ack_mode": "master", "flush": "sync"})

    async def main() -> None:
        b = Broker(cfg)
        await b.start()
        try:
            await b.become_master(1)
            await b.writer().put(_msgs(3))
            assert b.confirm_offset == b.store.max_offset == b.store.synced_offset
            synced = b.store.synced_offset
            # an append the flusher has not fsynced yet (a write between two group commits)
            b.store.append_messages(_msgs(2))
            assert b.ha_master is not None
            b.ha_master.notify_appended()
            assert b.store.synced_offset == synced < b.store.max_offset
            assert b.confirm_offset == synced, (b.confirm_offset, synced, b.store.max_offset)
            assert b.store.confirm_offset <= synced
            b.flusher.flush_now()
            assert b.confirm_offset == b.store.max_offset
        finally:
            await b.stop()

    asyncio.run(main())
