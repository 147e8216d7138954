"""The slave's view of the store (broker/self_watch.WatchedLog): its writes and fsyncs are marked
for the watchdog and the health monitor like the master's; everything else is the store's."""

from __future__ import annotations

from autoswitch.broker.self_watch import WatchedLog
from autoswitch.broker.stall_watch import IoWatch


class _Store:
    def __init__(self) -> None:
        self.confirm_offset = 0
        self.max_offset = 0
        self.flushed = 0

    def append_raw(self, offset, data, epoch, epoch_start) -> int:
        self.max_offset = offset + len(data)
        return self.max_offset

    def flush(self) -> None:
        self.flushed += 1


def test_writes_and_fsyncs_are_marked_and_the_rest_is_the_stores():
    seen: list[str] = []
    io = IoWatch(sink=lambda op, ms, now: seen.append(op))
    store = _Store()
    log = WatchedLog(store, io)
    assert log.append_raw(0, b"abcd", 1, 0) == 4 and log.max_offset == 4
    log.flush()
    assert seen == ["append", "fsync"] and store.flushed == 1 and io.since == 0.0
    log.confirm_offset = 4                 # the slave session sets it: it must reach the store
    assert store.confirm_offset == 4 and log.confirm_offset == 4
