"""Range digests (ha/digest.py) and their part in the sessions and the SyncStateTracker, sans-IO:
the master cuts its log into ranges, a slave verifies them against its own log, a mismatch
quarantines it, and the repair cuts exactly the reported range."""

from __future__ import annotations

import pytest
from autoswitch.ha.codec_v4 import DigestReport, Digests, Repair
from autoswitch.ha.config import HAConfig
from autoswitch.ha.digest import MISMATCH, VERIFIED, RangeBook, RangeChecker, RangeDigest
from autoswitch.ha.errors import HAProtocolError
from autoswitch.ha.slave_session import SlaveSession
from autoswitch.ha.sync_state import SyncStateTracker

from tests.unit.test_ha_memlog import MemLog
from tests.unit.test_ha_sessions import Pair, _log_with


def _book(log: MemLog, size: int = 300, history: int = 64, now: float = 0.0) -> RangeBook:
    return RangeBook(log, size, history, flush_after_s=2.5, now=now)


def _ranges(book: RangeBook) -> list[RangeDigest]:
    return [r for _, r in book.history]


def test_ranges_cover_the_log_in_order_and_never_cross_an_epoch():
    log = _log_with([(1, 0), (2, 1000), (4, 1500)], 3000, rec=100)
    book = _book(log)
    book.tick(0.0, 1 << 20, 256)
    rs = _ranges(book)
    # contiguous from 0; the open tail is not a range yet
    assert rs[0].start == 0 and all(a.end == b.start for a, b in zip(rs, rs[1:], strict=False))
    for r in rs:
        e = log.epochs.find_by_offset(r.start, log.max_offset)
        assert e.epoch == r.epoch and log.epochs.end_offset(e.epoch, log.max_offset) >= r.end
        assert r.end - r.start <= 300 + 100          # size plus at most one record
    assert any(r.end == 1000 for r in rs) and any(r.end == 1500 for r in rs)
    assert rs[-1].end < 3000
    # the idle tail closes after flush_after_s, not before
    book.tick(1.0, 1 << 20, 256)
    assert _ranges(book)[-1].end < 3000
    book.tick(3.0, 1 << 20, 256)
    assert _ranges(book)[-1].end == 3000


def test_feeding_transfers_gives_the_same_ranges_as_reading_the_log():
    log = _log_with([(1, 0), (3, 700)], 2400, rec=60)
    read = _book(log)
    read.tick(0.0, 1 << 20, 256)
    fed = _book(log)
    at = fed.cursor
    while at < log.max_offset:
        e = log.epochs.find_by_offset(at, log.max_offset)
        data = log.read_raw(at, 200, log.epochs.end_offset(e.epoch, log.max_offset))
        fed.feed(at, data, e.epoch, 0.0)
        fed.feed(at, data, e.epoch, 0.0)             # a second connection's read of the same bytes: ignored
        at += len(data)
    assert _ranges(fed) == _ranges(read)


def test_history_is_bounded_and_a_new_book_starts_near_the_end():
    log = _log_with([(1, 0)], 20_000, rec=100)
    log.segment_size = 1000
    book = _book(log, size=300, history=4)
    assert 20_000 - 4 * 300 - 1000 <= book.cursor <= 20_000 - 4 * 300     # a segment start below it
    book.tick(0.0, 1 << 20, 512)
    assert len(book.history) <= 4 and book.since(0, 10) == list(book.history)
    assert book.since(book.seq, 10) == []


def _verified(slog: MemLog, ranges: list[RangeDigest]) -> list[tuple[RangeDigest, tuple[str, str] | None]]:
    return [(r, RangeChecker.verify(slog, r)) for r in ranges]


def test_an_equal_log_verifies_and_any_changed_record_is_named():
    mlog = _log_with([(1, 0), (2, 900)], 2000, rec=100)
    book = _book(mlog)
    book.tick(0.0, 1 << 20, 256)
    book.tick(9.0, 1 << 20, 256)
    ranges = _ranges(book)
    same = _log_with([(1, 0), (2, 900)], 2000, rec=100)
    assert all(why is None for _, why in _verified(same, ranges))
    # the same length, other content (a record with a valid frame of other bytes)
    other = _log_with([(1, 0), (2, 900)], 2000, rec=100)
    other._data[1205] ^= 0x01
    bad = [(r, why) for r, why in _verified(other, ranges) if why is not None]
    assert [r.start <= 1205 < r.end for r, _ in bad] == [True] and bad[0][1][0] == "digest_differs"
    # another epoch under the same offsets
    shifted = _log_with([(1, 0), (3, 900)], 2000, rec=100)
    assert {why[0] for _, why in _verified(shifted, ranges) if why} == {"epoch_differs"}


def test_checker_keeps_the_newest_and_plans_within_its_budget():
    slog = _log_with([(1, 0)], 3000, rec=100)
    c = RangeChecker(keep=3)
    c.expect([RangeDigest(1, i * 300, (i + 1) * 300, 7) for i in range(8)])
    assert sorted(c.expected) == [1500, 1800, 2100]
    assert [r.start for r in c.due(slog, 600)] == [1800, 2100]
    c.expect([RangeDigest(1, 2700, 3300, 7)])                # beyond the local log: not held yet
    assert 2700 not in [r.start for r in c.due(slog, 10_000)]


def _digest_pair() -> tuple[Pair, RangeBook]:
    mlog = _log_with([(1, 0)], 3000, rec=100)
    p = Pair(mlog, MemLog(), HAConfig(transfer_batch_size=256, heartbeat_interval_s=1.0))
    p.handshake()
    p.pump()
    book = _book(mlog)
    book.tick(9.0, 1 << 20, 256)
    book.tick(20.0, 1 << 20, 256)
    assert p.m.speaks_digests and p.s.digests is not None
    p.to_slave(Digests(tuple(_ranges(book))))
    return p, book


def test_session_round_reports_verified_then_a_mismatch_and_takes_only_the_asked_repair():
    p, book = _digest_pair()
    due = p.s.digests_due(1 << 20)
    assert due == _ranges(book)
    assert all(p.s.verify_range(r) is None for r in due)
    rep = p.s.round_report(due, None)
    assert rep == DigestReport(VERIFIED, 1, 0, 3000)
    assert p.m.on_report(rep) == rep
    # the slave's disk changes under a range
    p.slog._data[1650] ^= 0xFF
    bad = [r for r in p.s.digests_due(1 << 20) if p.s.verify_range(r) is not None]
    assert len(bad) == 1 and bad[0].start <= 1650 < bad[0].end
    rep = p.s.round_report([], bad[0])
    assert rep.verdict == MISMATCH and (rep.start, rep.end) == (bad[0].start, bad[0].end)
    assert p.s.digests_due(1 << 20) == []                    # waits for the repair
    with pytest.raises(HAProtocolError) as ei:
        p.to_slave(Repair(1, 0))                             # a cut it did not ask for
    assert ei.value.reason == "unrequested_repair" and p.slog.max_offset == 3000


def test_the_repair_cuts_at_the_range_and_ends_the_session():
    p, _ = _digest_pair()
    p.slog._data[1650] ^= 0xFF
    bad = next(r for r in p.s.digests_due(1 << 20) if p.s.verify_range(r) is not None)
    p.s.round_report([], bad)
    p.to_slave(Repair(1, bad.start))
    assert p.s.repaired_to == bad.start == p.slog.max_offset and p.s.phase == "SHUTDOWN"


def test_a_version_3_session_takes_no_digest_frames():
    mlog = _log_with([(1, 0)], 500)
    p = Pair(mlog, MemLog(), version=3)
    p.handshake()
    assert not p.m.speaks_digests and p.s.digests is None
    with pytest.raises(HAProtocolError):
        p.to_slave(Digests((RangeDigest(1, 0, 100, 1),)))
    with pytest.raises(HAProtocolError):
        p.m.on_report(DigestReport(VERIFIED, 1, 0, 100))


def test_a_report_beyond_the_master_log_is_refused():
    p, _ = _digest_pair()
    with pytest.raises(HAProtocolError):
        p.m.on_report(DigestReport(MISMATCH, 1, 2900, 3100))


def test_slave_session_without_digests_has_no_checker():
    assert SlaveSession(MemLog(), 2, version=4).digests is not None
    assert SlaveSession(MemLog(), 2, version=3).digests is None


# ------------------------------------------------------------------ the tracker's quarantine

def _tracker(ack_mode: str = "all") -> SyncStateTracker:
    cfg = HAConfig(ack_mode=ack_mode).validate()
    t = SyncStateTracker(1, 5, frozenset({1, 2, 3}), 10, cfg, now=0.0)
    for b in (2, 3):
        t.on_connect(b, False, 0.0)
        t.on_ack(b, 1000, 0.0, 1000)
    return t


def test_quarantine_shrinks_the_set_and_repairs_only_once_no_set_names_the_replica():
    t = _tracker()
    assert t.quarantine(2, 5, 100, 200, "digest_mismatch", 1.0)
    assert not t.quarantine(2, 5, 100, 200, "digest_mismatch", 1.1)      # already known
    p = t.tick(1.0, 1000)
    assert p is not None and p.new_set == frozenset({1, 3})
    # in flight: the controller may still hold {1,2,3}; the replica's acks still count, no cut yet
    assert t.repair_due() == [] and 2 in t.ack_set
    t.on_proposal_accepted(frozenset({1, 3}), 11, 1.2)
    assert t.repair_due() == [2]
    t.on_repair_sent(2)
    assert t.repair_due() == []
    # not re-added while quarantined, even caught up
    t.on_ack(2, 1000, 1.3, 1000)
    assert 2 not in t.desired_set(1.3)


def test_a_failed_proposal_keeps_the_replica_counted_and_uncut():
    t = _tracker()
    t.quarantine(2, 5, 100, 200, "digest_mismatch", 1.0)
    t.tick(1.0, 1000)
    t.on_proposal_failed(1.1)
    assert t.repair_due() == []                                  # the controller may hold {1,2,3}
    assert not t.is_acked(1500, 1500)                             # replica 2 must still ack


def test_quarantine_ends_after_repair_reconnect_and_a_verification_covering_the_range():
    t = _tracker()
    t.quarantine(2, 5, 100, 200, "digest_mismatch", 1.0)
    t.tick(1.0, 1000)
    t.on_proposal_accepted(frozenset({1, 3}), 11, 1.2)
    t.on_repair_sent(2)
    assert t.on_verified(2, 0, 1000, True) is None               # the old connection: not repaired yet
    t.on_disconnect(2, 1.3)
    t.on_connect(2, False, 1.4)
    assert t.on_verified(2, 150, 1000, True) is None             # does not cover the bad range
    assert t.on_verified(2, 0, 1000, True) is not None
    assert 2 not in t.quarantined
    t.on_ack(2, 1000, 1.5, 1000)
    assert 2 in t.desired_set(1.5)


def test_quarantine_ends_on_acks_when_the_range_is_no_longer_kept():
    t = _tracker()
    t.quarantine(2, 5, 100, 200, "digest_mismatch", 1.0)
    t.tick(1.0, 1000)
    t.on_proposal_accepted(frozenset({1, 3}), 11, 1.2)
    t.on_repair_sent(2)
    t.on_connect(2, False, 1.4)
    t.on_ack(2, 150, None, 1000)
    assert t.on_verified(2, 500, 1000, False) is None
    t.on_ack(2, 250, None, 1000)
    assert t.on_verified(2, 500, 1000, False) is not None


def test_verify_group_compare_names_each_range_that_differs():
    from autoswitch.app.verify_group import compare

    a = [RangeDigest(1, 0, 100, 1), RangeDigest(1, 100, 200, 2), RangeDigest(2, 200, 300, 3)]
    b = [RangeDigest(1, 0, 100, 1), RangeDigest(1, 100, 200, 9), RangeDigest(2, 200, 300, 3)]
    c = [RangeDigest(1, 0, 100, 1), RangeDigest(1, 100, 250, 2), RangeDigest(2, 250, 300, 3)]
    assert compare({1: a, 2: list(a)}) == (3, 300, [])
    n, same, differ = compare({1: a, 2: b})
    assert (n, same, [d["start"] for d in differ]) == (3, 200, [100])
    n, same, differ = compare({1: a, 3: c})
    assert same == 100 and [d["start"] for d in differ] == [100, 200, 250]
    assert differ[1]["replicas"]["3"] == "no range starts here"
