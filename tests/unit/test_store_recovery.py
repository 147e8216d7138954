"""Crash recovery: torn/zero/garbage tails, data-before-checkpoint, corruption before the
synced point, crashes inside truncate/reset/retention, EpochFile reconciliation.

A "crash" is ``abandon()`` (fds closed, nothing flushed, no checkpoint) followed by
editing the files the way a kill or power loss leaves them.
"""

from __future__ import annotations

import os

import pytest
from autoswitch.broker.storage.store import LogCorrupt, MessageStore
from autoswitch.epochfile import EpochFileCorrupt

from autoswitch.base import crashpoints
from tests.unit.test_store_helpers import SMALL, fill, index_view, open_store, scan_view, snapshot


class SimulatedCrash(Exception):
    pass


def _crash(name: str) -> None:
    raise SimulatedCrash(name)


@pytest.fixture(autouse=True)
def _no_armed_crash_points():
    yield
    crashpoints.disarm_all()


def last_segment(root):
    return sorted((root / "commitlog").iterdir())[-1]


def lose_tail(root, synced):
    """Power loss: every log byte at or past ``synced`` never reached the disk."""
    for p in (root / "commitlog").iterdir():
        base = int(p.name)
        if base >= synced:
            p.write_bytes(b"")
        elif base + 4096 > synced:
            p.write_bytes(p.read_bytes()[: synced - base])


def reopen_twice(root):
    """Recover, then check a second recovery changes nothing on disk."""
    s = MessageStore(root, SMALL)
    s.abandon()
    first = snapshot(root)
    s2 = MessageStore(root, SMALL)
    s2.abandon()
    assert snapshot(root) == first, "second recovery changed files"
    return MessageStore(root, SMALL)


def synced_state(tmp_path, n=40):
    s = open_store(tmp_path)
    fill(s, n)
    s.flush()
    synced = s.max_offset
    ids = [r.msg_id for r in s.scan()]
    fill(s, 10, topics=("a", "c"))  # unsynced tail (written, never flushed)
    s.abandon()
    return synced, ids


@pytest.mark.parametrize("tail", ["torn", "zeros", "garbage", "torn_then_zeros"])
def test_tail_is_cut_and_synced_records_kept(tmp_path, tail):
    synced, ids = synced_state(tmp_path)
    seg = last_segment(tmp_path)
    data = seg.read_bytes()
    if tail == "torn":
        seg.write_bytes(data[:-7])
    elif tail == "zeros":
        seg.write_bytes(data + bytes(300))
    elif tail == "garbage":
        seg.write_bytes(data + os.urandom(300))
    else:
        seg.write_bytes(data[:-7] + bytes(4096 - len(data) + 7))
    s = reopen_twice(tmp_path)
    got = [r.msg_id for r in s.scan()]
    assert got[: len(ids)] == ids and s.max_offset >= synced
    assert index_view(s) == scan_view(s)
    fill(s, 5)  # appends continue after the cut
    assert index_view(s) == scan_view(s)


def test_lost_unsynced_segment_files(tmp_path):
    # the page cache lost everything after the synced point, including a new segment's contents
    synced, ids = synced_state(tmp_path, n=30)
    lose_tail(tmp_path, synced)
    s = reopen_twice(tmp_path)
    assert s.max_offset == synced and [r.msg_id for r in s.scan()] == ids
    assert index_view(s) == scan_view(s)


def test_crash_between_data_and_checkpoint(tmp_path):
    s = open_store(tmp_path)
    fill(s, 20)
    s.flush()
    fill(s, 20)
    s._log.fsync()  # data durable, checkpoint not written yet
    end = s.max_offset
    want = index_view(s)
    s.abandon()
    s = reopen_twice(tmp_path)
    assert s.max_offset == end
    assert index_view(s) == want == scan_view(s)


def test_index_files_ahead_of_checkpoint_are_cut(tmp_path):
    s = open_store(tmp_path)
    fill(s, 12)
    s.flush()
    synced = s.max_offset
    want = index_view(s)
    fill(s, 12)
    for ti in s._indexes.values():
        ti.fsync()  # the index reached disk, the log tail did not
    s.abandon()
    lose_tail(tmp_path, synced)
    idx = sorted((tmp_path / "index").rglob("0*"))[-1]
    idx.write_bytes(idx.read_bytes() + b"\x01\x02\x03")  # and a torn entry
    s = reopen_twice(tmp_path)
    assert s.max_offset == synced
    assert index_view(s) == want == scan_view(s)


def test_corruption_before_synced_point_is_refused(tmp_path):
    s = open_store(tmp_path)
    fill(s, 40)
    s.close()
    seg = last_segment(tmp_path)
    raw = bytearray(seg.read_bytes())
    assert len(raw) > 200
    raw[60] ^= 0x10  # inside the first record of the last segment, well below the synced point
    seg.write_bytes(bytes(raw))
    with pytest.raises(LogCorrupt) as ei:
        MessageStore(tmp_path, SMALL)
    assert str(seg) in str(ei.value) and ei.value.offset == int(seg.name)
    # and nothing was "repaired" behind the operator's back
    assert seg.read_bytes() == bytes(raw)


def test_synced_segment_shortened_is_refused(tmp_path):
    s = open_store(tmp_path)
    fill(s, 40)
    s.close()
    seg = last_segment(tmp_path)
    seg.write_bytes(seg.read_bytes()[:-10])
    with pytest.raises(LogCorrupt, match="synced"):
        MessageStore(tmp_path, SMALL)


def test_missing_middle_segment_is_refused(tmp_path):
    s = open_store(tmp_path)
    fill(s, 60)
    s.close()
    segs = sorted((tmp_path / "commitlog").iterdir())
    assert len(segs) >= 3
    segs[1].unlink()
    with pytest.raises(LogCorrupt, match="missing segment"):
        MessageStore(tmp_path, SMALL)


def test_missing_or_corrupt_checkpoint_is_refused(tmp_path):
    s = open_store(tmp_path)
    fill(s, 5)
    s.close()
    cp = tmp_path / "checkpoint"
    good = cp.read_bytes()
    cp.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(LogCorrupt, match="checkpoint"):
        MessageStore(tmp_path, SMALL)
    cp.unlink()
    with pytest.raises(LogCorrupt, match="checkpoint missing"):
        MessageStore(tmp_path, SMALL)


def test_corrupt_epochfile_is_refused(tmp_path):
    s = open_store(tmp_path)
    fill(s, 5)
    s.close()
    (tmp_path / "epochfile").write_bytes(b"garbage")
    with pytest.raises(EpochFileCorrupt):
        MessageStore(tmp_path, SMALL)


def test_startup_drops_epochs_past_the_log_end(tmp_path):
    s = open_store(tmp_path)
    fill(s, 10)
    s.flush()
    synced = s.max_offset
    s.append_epoch(2, synced)  # zero-message epoch at the end: must survive
    fill(s, 5)
    s.append_epoch(3, s.max_offset)
    s.abandon()
    lose_tail(tmp_path, synced)
    s = reopen_twice(tmp_path)
    assert s.max_offset == synced
    assert [(e.epoch, e.start_offset) for e in s.epochs.entries()] == [(1, 0), (2, synced)]


TRUNCATE_STEPS = ["truncate_intent_written", "truncate_log_cut", "truncate_index_cut", "truncate_epochs_saved"]


@pytest.mark.parametrize("step", TRUNCATE_STEPS)
def test_crash_inside_truncate(tmp_path, step):
    s = open_store(tmp_path)
    fill(s, 30)
    s.append_epoch(2, s.max_offset)
    res = fill(s, 30)
    s.append_epoch(4, s.max_offset)
    s.flush()
    cut = res[3].start_offset
    kept = [r.msg_id for r in s.scan() if r.phy_offset < cut]

    crashpoints.arm(f"store.{step}", _crash)
    with pytest.raises(SimulatedCrash):
        s.truncate(cut, last_common_epoch=2)
    s.abandon()
    s = reopen_twice(tmp_path)
    assert s.max_offset == cut
    assert [r.msg_id for r in s.scan()] == kept  # nothing past the cut came back
    assert [e.epoch for e in s.epochs.entries()] == [1, 2]
    assert index_view(s) == scan_view(s)
    fill(s, 4)
    assert index_view(s) == scan_view(s)


@pytest.mark.parametrize("step", ["reset_intent_written", "reset_files_dropped"])
def test_crash_inside_reset(tmp_path, step):
    s = open_store(tmp_path)
    fill(s, 30)
    s.flush()

    crashpoints.arm(f"store.{step}", _crash)
    with pytest.raises(SimulatedCrash):
        s.reset(50_000)
    s.abandon()
    s = reopen_twice(tmp_path)
    assert (s.min_offset, s.max_offset, s.topics(), s.epochs.entries()) == (50_000, 50_000, [], [])
    assert list((tmp_path / "commitlog").iterdir()) == []


def test_crash_inside_retention(tmp_path):
    s = open_store(tmp_path)
    fill(s, 50)
    s.append_epoch(2, s.max_offset)
    fill(s, 30)
    s.flush()

    crashpoints.arm("store.retention_checkpoint_written", _crash)
    with pytest.raises(SimulatedCrash):
        s.apply_retention(keep_bytes=4096, keep_seconds=None)
    s.abandon()
    s = reopen_twice(tmp_path)
    assert s.min_offset > 0
    assert all(int(p.name) + 4096 > s.min_offset for p in (tmp_path / "commitlog").iterdir())
    assert s.epochs.first().start_offset >= s.min_offset
    assert index_view(s) == scan_view(s)
    assert all(m[1] >= s.min_offset for v in index_view(s).values() for m in v)


def test_lost_consume_index_files_are_refused(tmp_path):
    s = open_store(tmp_path)
    fill(s, 30)  # 5 entries per index file: several files per topic
    s.close()
    files = sorted((tmp_path / "index").rglob("0*"))
    files[0].unlink()
    with pytest.raises(LogCorrupt, match="missing"):
        MessageStore(tmp_path, SMALL)



def test_bytes_past_a_full_verified_segment_are_cut(tmp_path):
    s = open_store(tmp_path)
    while s.max_offset <= 4096:
        fill(s, 3)
    s.truncate(4096)  # synced point exactly at the first segment's end (after its padding)
    fill(s, 3)  # unsynced tail in the next segment
    end = s.max_offset
    s.abandon()
    seg0 = tmp_path / "commitlog" / f"{0:020d}"
    assert seg0.stat().st_size == 4096
    seg0.write_bytes(seg0.read_bytes() + b"junk")  # bytes past a full, non-last segment
    s = reopen_twice(tmp_path)
    assert seg0.stat().st_size == 4096 and s.max_offset == end
    assert index_view(s) == scan_view(s)
