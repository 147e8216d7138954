"""MessageStore without crashes: appends, segment roll, reads, replication, retention."""

from __future__ import annotations

import os
import zlib

import pytest
from autoswitch.broker.storage import record as rec
from autoswitch.broker.storage.store import (
    BadBatch,
    BadMessage,
    LogCorrupt,
    Message,
    MessageStore,
    OffsetMismatch,
    OffsetOutOfRange,
    StoreConfig,
    StoreError,
)
from autoswitch.epochfile import EpochEntry, EpochRuleError

from autoswitch.base.errors import ConfigError
from tests.unit.test_store_helpers import (
    SMALL,
    fill,
    index_view,
    msg,
    open_store,
    replicate,
    scan_view,
    snapshot,
)


def test_append_and_read_by_queue_offset(tmp_path):
    s = open_store(tmp_path)
    res = s.append_messages([msg("a", 0), msg("b", 0), msg("a", 1)])
    assert res.start_offset == 0 and res.end_offset == s.max_offset
    assert [(q, mid) for _, q, mid in res.records] == [(0, "id-a-0"), (0, "id-b-0"), (1, "id-a-1")]
    got = s.read_messages("a", 0, 10)
    assert [(m.queue_offset, m.msg_id, m.body) for m in got] == [(0, "id-a-0", msg("a", 0).body), (1, "id-a-1", msg("a", 1).body)]
    assert got[0].epoch == 1 and got[0].born_ts_ms == msg("a", 0).born_ts_ms
    assert s.max_queue_offset("a") == 2 and s.max_queue_offset("nope") == 0
    assert s.read_messages("a", 1, 10)[0].msg_id == "id-a-1"
    assert s.read_messages("nope", 0, 10) == []
    # max_phy (the broker passes confirmOffset) hides records ending past it
    assert s.read_messages("a", 0, 10, max_phy=res.records[2][0]) == got[:1]


def test_append_needs_epoch_and_validates_before_writing(tmp_path):
    s = MessageStore(tmp_path, SMALL)
    with pytest.raises(StoreError):
        s.append_messages([msg("a", 0)])
    s.append_epoch(1, 0)
    with pytest.raises(BadMessage):
        s.append_messages([msg("a", 0), Message("a", b"x" * 1001, "big", 0)])
    with pytest.raises(BadMessage):
        s.append_messages([])
    assert s.max_offset == 0 and s.max_queue_offset("a") == 0


def test_segment_roll_writes_padding(tmp_path):
    s = open_store(tmp_path)
    fill(s, 60)
    segs = sorted((tmp_path / "commitlog").iterdir())
    assert len(segs) >= 3
    assert [p.name for p in segs][:2] == [f"{0:020d}", f"{4096:020d}"]
    for p in segs[:-1]:
        assert p.stat().st_size == 4096  # every full segment ends exactly at its limit
    pads = [r for r in s.scan(include_padding=True) if r.padding]
    assert pads and all((r.phy_offset + r.size) % 4096 == 0 for r in pads)
    # no record crosses a segment end
    assert all(r.phy_offset // 4096 == (r.phy_offset + r.size - 1) // 4096 for r in s.scan(include_padding=True))
    assert index_view(s) == scan_view(s)


def test_a_record_that_fills_its_segment_to_the_byte_and_one_more_in_the_same_batch(tmp_path):
    """Found by the storage simulator: the placement asserted that a padding header fits after a
    record that ended exactly at its segment's end, so such a batch failed (AssertionError)."""
    s = open_store(tmp_path)            # 4096-byte segments, bodies of at most 1000 bytes
    fillers = [Message("a", b"f" * 900, f"f{i}", 1) for i in range(4)]
    used = sum(rec.HEADER_SIZE + 1 + len(m.msg_id) + len(m.body) for m in fillers)
    last = Message("a", b"x" * (4096 - used - (rec.HEADER_SIZE + 1 + len("id-0"))), "id-0", 1)  # ends at 4096
    res = s.append_messages([*fillers, last, Message("a", b"after", "id-1", 2), Message("a", b"more", "id-2", 3)])
    assert [p for p, _, _ in res.records][4:] == [4096 - (rec.HEADER_SIZE + 1 + 4 + len(last.body)), 4096,
                                                  4096 + rec.HEADER_SIZE + 1 + 4 + 5]
    assert not [r for r in s.scan(include_padding=True) if r.padding]       # nothing to pad
    assert [m.body for m in s.read_messages("a", 4, 10)] == [last.body, b"after", b"more"]
    s.close()
    s = open_store(tmp_path, epoch=None)
    assert [m.msg_id for m in s.read_messages("a", 4, 10)] == ["id-0", "id-1", "id-2"]


def test_read_raw_whole_records_limits_and_segment_end(tmp_path):
    s = open_store(tmp_path)
    fill(s, 60)
    recs = list(s.scan(include_padding=True))
    data = s.read_raw(0, 1000)
    assert 0 < len(data) <= 1000 and len(data) in {r.phy_offset + r.size for r in recs}
    # never past the limit
    lim = recs[3].phy_offset + 1
    assert len(s.read_raw(0, 100_000, lim)) == recs[3].phy_offset
    # never crosses a segment end
    assert len(s.read_raw(recs[1].phy_offset, 100_000)) == 4096 - recs[1].phy_offset
    # a record bigger than max_bytes is served alone (progress), nothing at the end
    assert len(s.read_raw(0, 1)) == recs[0].size
    assert s.read_raw(s.max_offset, 1000) == b""
    with pytest.raises(OffsetOutOfRange):
        s.read_raw(s.max_offset + 1, 10)


def test_read_raw_detects_corruption(tmp_path):
    s = open_store(tmp_path)
    fill(s, 5)
    seg = tmp_path / "commitlog" / f"{0:020d}"
    raw = bytearray(seg.read_bytes())
    raw[100] ^= 0xFF
    seg.write_bytes(bytes(raw))
    with pytest.raises(LogCorrupt) as ei:
        s.read_raw(0, 100_000)
    assert str(seg) in str(ei.value)
    with pytest.raises(LogCorrupt):
        s.read_messages("b", 0, 10)  # byte 100 lies in the second record (topic b)
    assert len(s.read_messages("a", 0, 1)) == 1


def test_replication_is_byte_identical(tmp_path):
    m = open_store(tmp_path / "m")
    fill(m, 40)
    m.append_epoch(3, m.max_offset)
    fill(m, 40, topics=("b", "c"))
    sl = MessageStore(tmp_path / "s", SMALL)
    replicate(m, sl)
    m.flush()
    sl.flush()
    assert sl.epochs.entries() == m.epochs.entries()
    sm, ss = snapshot(tmp_path / "m"), snapshot(tmp_path / "s")
    for k in sm:
        if k.startswith(("commitlog", "index", "epochfile")):
            assert sm[k] == ss[k], k
    assert index_view(sl) == index_view(m) == scan_view(sl)


def test_append_raw_rejects_without_writing(tmp_path):
    m = open_store(tmp_path / "m")
    fill(m, 10)
    sl = MessageStore(tmp_path / "s", SMALL)
    data = m.read_raw(0, 1000)
    sl.append_raw(0, data, 1, 0)
    before = snapshot(tmp_path / "s")
    nxt = m.read_raw(len(data), 1000)
    bad = bytearray(nxt)
    bad[-1] ^= 1
    with pytest.raises(LogCorrupt):
        sl.append_raw(len(data), bytes(bad), 1, 0)
    with pytest.raises(OffsetMismatch):
        sl.append_raw(len(data) + 1, nxt, 1, 0)
    with pytest.raises(LogCorrupt):
        sl.append_raw(len(data), nxt[:-3], 1, 0)  # torn batch
    with pytest.raises(BadBatch):
        sl.append_raw(len(data), nxt, 1, len(data) + 5)  # epoch starting after the batch
    # a bad record later in the batch also refuses the good ones before it
    with pytest.raises(LogCorrupt):
        sl.append_raw(len(data), nxt + b"\0" * 40, 1, 0)
    assert snapshot(tmp_path / "s") == before and sl.max_offset == len(data)
    assert sl.append_raw(len(data), nxt, 1, 0) == len(data) + len(nxt)


def test_append_raw_rejects_queue_offset_gap_and_segment_crossing(tmp_path):
    sl = MessageStore(tmp_path, SMALL)
    a0 = rec.encode_message(b"a", b"x", b"1", 0, 0, 1)
    a2 = rec.encode_message(b"a", b"y", b"2", 2, 0, 1)
    sl.append_raw(0, a0, 1, 0)
    with pytest.raises(BadBatch):
        sl.append_raw(len(a0), a2, 1, 0)
    with pytest.raises(LogCorrupt):
        sl.append_raw(len(a0), a0 + a2, 1, 0)  # out of sequence inside the batch
    big = rec.encode_message(b"a", b"z", b"q" * 900, 1, 0, 1)
    with pytest.raises((BadBatch, LogCorrupt)):
        sl.append_raw(len(a0), big * 5, 1, 0)  # would cross the 4096 segment end
    assert sl.max_offset == len(a0)


def test_append_raw_records_epoch_before_bytes_and_empty_store_restarts(tmp_path):
    m = open_store(tmp_path / "m", epoch=None)
    m.append_epoch(4, 0)
    fill(m, 30)
    sl = MessageStore(tmp_path / "s", SMALL)
    start = 4096  # an empty slave may start mid-log (e.g. the master's last segment)
    data = m.read_raw(start, 1000)
    assert sl.append_raw(start, data, 4, 0) == start + len(data)
    assert sl.min_offset == start and sl.epochs.entries() == [EpochEntry(4, start)]
    assert sl.read_messages("a", 0, 100)[0].queue_offset == m.read_messages("a", 0, 1000)[0].queue_offset + sum(
        1 for r in m.scan() if r.topic == "a" and r.phy_offset < start
    )
    with pytest.raises(BadBatch):
        sl.append_raw(sl.max_offset, m.read_raw(sl.max_offset, 1000), 3, 0)  # stale epoch


def test_append_epoch_rules(tmp_path):
    s = open_store(tmp_path)
    fill(s, 3)
    with pytest.raises(EpochRuleError):
        s.append_epoch(1, s.max_offset)
    with pytest.raises(EpochRuleError):
        s.append_epoch(2, s.max_offset + 1)
    s.append_epoch(2, s.max_offset)
    s.append_epoch(3, s.max_offset)  # epoch 2 had zero messages: kept
    s.close()
    s = MessageStore(tmp_path, SMALL)
    assert [e.epoch for e in s.epochs.entries()] == [1, 2, 3]


def test_truncate_cuts_log_index_and_epochs(tmp_path):
    s = open_store(tmp_path)
    fill(s, 30)
    s.append_epoch(2, s.max_offset)
    res = fill(s, 30)
    cut = res[2].start_offset
    s.append_epoch(3, s.max_offset)
    s.truncate(cut, last_common_epoch=2)
    assert s.max_offset == cut
    assert [e.epoch for e in s.epochs.entries()] == [1, 2]
    assert index_view(s) == scan_view(s)
    fill(s, 5)  # appends continue at the cut with the right queue offsets
    assert index_view(s) == scan_view(s)
    with pytest.raises(LogCorrupt):
        s.truncate(cut + 1)  # not a record boundary
    with pytest.raises(OffsetOutOfRange):
        s.truncate(s.max_offset + 1)


def test_truncate_drops_epoch_starting_at_the_cut(tmp_path):
    # the slave's own epoch 3 started exactly at the consistent point; the master never had it
    s = open_store(tmp_path)
    fill(s, 10)
    s.append_epoch(3, s.max_offset)
    s.truncate(s.max_offset, last_common_epoch=1)
    assert [e.epoch for e in s.epochs.entries()] == [1]
    s.close()
    assert [e.epoch for e in MessageStore(tmp_path, SMALL).epochs.entries()] == [1]


def test_reset_and_segment_base(tmp_path):
    s = open_store(tmp_path)
    fill(s, 30)
    assert s.segment_base(5000) == 4096 and s.segment_base(10) == 0
    s.reset(10_000)
    assert (s.min_offset, s.max_offset, s.epochs.entries(), s.topics()) == (10_000, 10_000, [], [])
    assert s.segment_base(10_000) == 10_000  # never below min_offset
    s.close()
    s = MessageStore(tmp_path, SMALL)
    assert (s.min_offset, s.max_offset) == (10_000, 10_000)


def test_confirm_offset_persisted_and_clamped(tmp_path):
    s = open_store(tmp_path)
    fill(s, 5)
    s.confirm_offset = 10**12
    assert s.confirm_offset == s.max_offset
    s.confirm_offset = 100
    s.close()
    assert MessageStore(tmp_path, SMALL).confirm_offset == 100


def test_retention_moves_min_offsets(tmp_path):
    s = open_store(tmp_path)
    fill(s, 40)
    s.append_epoch(2, s.max_offset)
    fill(s, 40)
    nsegs = len(list((tmp_path / "commitlog").iterdir()))
    before = index_view(s)
    removed = s.apply_retention(keep_bytes=5000, keep_seconds=None)
    assert removed >= 1 and len(list((tmp_path / "commitlog").iterdir())) == nsegs - removed
    assert s.min_offset == removed * 4096 and s.max_offset - s.min_offset >= 5000 - 4096
    assert s.epochs.first().start_offset >= s.min_offset
    for t, entries in index_view(s).items():
        kept = [e for e in before[t] if e[1] >= s.min_offset]
        assert entries == kept and s.min_queue_offset(t) == kept[0][0]
    assert index_view(s) == scan_view(s)
    # age rule: everything but the active segment is older than 1 s
    for p in (tmp_path / "commitlog").iterdir():
        os.utime(p, (1, 1))
    assert s.apply_retention(None, 1.0) >= 1
    assert len(list((tmp_path / "commitlog").iterdir())) == 1
    s.close()
    s = MessageStore(tmp_path, SMALL)
    assert index_view(s) == scan_view(s)


def test_config_validation():
    with pytest.raises(ConfigError):
        StoreConfig(flush_mode="sometimes")
    with pytest.raises(ConfigError):
        StoreConfig(segment_bytes=1000, max_message_bytes=1000)


def test_sync_flush_mode_appends(tmp_path):
    s = open_store(tmp_path, StoreConfig(segment_bytes=4096, max_message_bytes=1000, flush_mode="sync"))
    fill(s, 10)
    s.abandon()  # killed: no flush, no checkpoint; the fsynced records come back
    s = MessageStore(tmp_path, SMALL)
    assert len(list(s.scan())) == 10


def test_scan_crcs(tmp_path):
    s = open_store(tmp_path)
    fill(s, 10)
    infos = list(s.scan())
    assert [r.msg_id for r in infos] == [f"id-{'ab'[i % 2]}-{i}" for i in range(10)]
    seg = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    r = infos[2]
    assert zlib.crc32(seg[r.phy_offset + 4 : r.phy_offset + r.size]) == r.crc


@pytest.mark.parametrize("max_bytes", [1, 300, 1000, 5000])
def test_replicator_loop_hits_corrupt_length_instead_of_spinning(tmp_path, max_bytes):
    s = open_store(tmp_path)
    fill(s, 20)
    recs = list(s.scan(include_padding=True))
    victim = recs[7]
    seg = tmp_path / "commitlog" / f"{0:020d}"
    raw = bytearray(seg.read_bytes())
    assert victim.phy_offset + victim.size <= len(raw)
    raw[victim.phy_offset + 4 : victim.phy_offset + 8] = (victim.size + 8).to_bytes(4, "big")
    seg.write_bytes(bytes(raw))
    pos = 0
    with pytest.raises(LogCorrupt) as ei:
        for _ in range(100):
            data = s.read_raw(pos, max_bytes)
            assert data, "an empty answer before the log end would make replication spin"
            pos += len(data)
    assert ei.value.offset == victim.phy_offset


def test_a_failed_write_in_the_middle_of_a_batch_leaves_nothing_of_it(tmp_path):
    """A batch crossing a segment end is two writes; when the second failed (ENOSPC), the first
    chunk's records stayed in the log without index entries, and the next batch took their queue
    offsets again (two records of queue offset 1: a slave refuses to copy that). Now the log is
    cut back to where the batch began, the partial bytes too. Found by reading, after the storage
    simulator learnt failed writes."""
    import random

    from autoswitch.broker.storage.store import MessageStore, StoreConfig

    from tests.sim.sim_disk import SimDisk

    disk = SimDisk(random.Random(1))
    cfg = StoreConfig(segment_bytes=80 << 10, max_message_bytes=64 << 10, retention_hours=None)
    s = MessageStore(tmp_path, cfg, log_files=disk.folder(tmp_path / "commitlog"))
    s.append_epoch(1, 0)
    s.append_messages([Message("t", b"x" * 60_000, "a0", 1)])
    start = s.max_offset
    disk.writes_before_failure = 1       # the first chunk (to the segment end) lands, the next fails
    with pytest.raises(OSError):
        s.append_messages([Message("t", b"y" * 15_000, "b0", 1), Message("t", b"z" * 15_000, "b1", 1)])
    assert s.max_offset == start and s.max_queue_offset("t") == 1
    r = s.append_messages([Message("t", b"w" * 100, "c0", 1)])
    assert r.records == [(start, 1, "c0")]
    assert [(m.queue_offset, m.msg_id) for m in s.read_messages("t", 0, 10)] == [(0, "a0"), (1, "c0")]
    assert [(i.queue_offset, i.msg_id) for i in s.scan()] == [(0, "a0"), (1, "c0")]   # one record per offset
    s.close()
    s = MessageStore(tmp_path, cfg, log_files=disk.folder(tmp_path / "commitlog"))
    assert [(i.queue_offset, i.msg_id) for i in s.scan()] == [(0, "a0"), (1, "c0")]
