"""Durable Raft storage on real files: restart from snapshot + log, torn tail cut after a crash,
corruption refused with file and offset, overwrite of a conflicting tail, crash-safe snapshots."""

from __future__ import annotations

import os

import pytest
from autoswitch.controller.raft import codec
from autoswitch.controller.raft.config import RaftConfig
from autoswitch.controller.raft.errors import RaftStorageCorrupt
from autoswitch.controller.raft.harness import SimNet
from autoswitch.controller.raft.messages import Entry, HardState, Snapshot
from autoswitch.controller.raft.storage import FileStorage


def ents(lo: int, hi: int, term: int = 1) -> list[Entry]:
    return [Entry(i, term, f"v{i}".encode()) for i in range(lo, hi + 1)]


def segs(d) -> list:
    return sorted(p for p in d.iterdir() if p.name.startswith("seg-"))


def test_entries_and_hard_state_survive_reopen(tmp_path):
    s = FileStorage(tmp_path)
    s.load()
    s.save(HardState(3, "b", 2), ents(1, 5, 3))
    s.save(None, ents(6, 7, 3))
    s.close()
    rec = FileStorage(tmp_path).load()
    assert rec.hard_state == HardState(3, "b", 2)
    assert rec.entries == ents(1, 7, 3) and rec.snapshot is None and rec.torn_bytes == 0


def test_conflicting_tail_is_overwritten_by_a_later_frame(tmp_path):
    s = FileStorage(tmp_path)
    s.load()
    s.save(None, ents(1, 5, 1))
    s.save(None, ents(4, 6, 2))
    s.close()
    rec = FileStorage(tmp_path).load()
    assert [(e.index, e.term) for e in rec.entries] == [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2)]


def test_restart_from_snapshot_plus_log_with_compaction(tmp_path):
    s = FileStorage(tmp_path, segment_bytes=200)
    s.load()
    for i in range(1, 41):
        s.save(None, ents(i, i, 2))
    before = len(segs(tmp_path))
    s.save_snapshot(Snapshot(30, 2, b"state@30"))
    assert len(segs(tmp_path)) < before           # whole segments behind the snapshot are gone
    s.save(None, ents(41, 45, 2))
    s.close()
    rec = FileStorage(tmp_path, segment_bytes=200).load()
    assert rec.snapshot == Snapshot(30, 2, b"state@30")
    assert [e.index for e in rec.entries] == list(range(31, 46))


def test_cluster_restarts_from_snapshot_and_log_files(tmp_path):
    ids = ["a", "b", "c"]
    cfg = RaftConfig(segment_bytes=512)
    stores = {i: FileStorage(tmp_path / i, cfg.segment_bytes) for i in ids}
    net = SimNet(ids, seed=6, config=cfg, storages=stores)
    ld = net.wait_leader()
    for k in range(30):
        net.propose(ld, f"k{k % 5}={k}".encode())
        net.run(3)
    net.run(100)
    for i in ids:
        net.take_snapshot(i)
    for k in range(30, 40):
        net.propose(ld, f"k{k % 5}={k}".encode())
        net.run(3)
    net.run(100)
    want = dict(net.nodes[ld].sm.kv)
    assert want["k4"] == "39"
    for i in ids:
        stores[i].close()
    stores2 = {i: FileStorage(tmp_path / i, cfg.segment_bytes) for i in ids}
    net2 = SimNet(ids, seed=7, config=cfg, storages=stores2)
    for i in ids:
        assert net2.nodes[i].core.log.offset > 0          # booted from a snapshot, not from index 1
    ld2 = net2.wait_leader()
    net2.propose(ld2, b"post=restart")
    assert net2.run_until(lambda: all(n.sm.kv == {**want, "post": "restart"} for n in net2.nodes.values()), 2000)


@pytest.mark.parametrize("tail", ["half_frame", "zeros", "header_only", "flipped_last_frame"])
def test_torn_log_tail_after_a_crash_is_cut(tmp_path, tail):
    s = FileStorage(tmp_path)
    s.load()
    s.save(HardState(1, "a", 3), ents(1, 3))
    s.save(None, ents(4, 6))
    s.close()
    seg = segs(tmp_path)[-1]
    good = seg.stat().st_size
    frame = codec.encode_frame(ents(7, 9))
    with open(seg, "r+b") as f:
        f.seek(0, os.SEEK_END)
        if tail == "half_frame":
            f.write(frame[: len(frame) // 2])
        elif tail == "zeros":
            f.write(b"\0" * 300)
        elif tail == "header_only":
            f.write(frame[: codec.HEADER_SIZE])
        else:
            f.write(frame[:-3] + bytes([frame[-3] ^ 0xFF]) + frame[-2:])
    rec = FileStorage(tmp_path).load()
    assert [e.index for e in rec.entries] == list(range(1, 7))
    assert rec.torn_bytes > 0 and seg.stat().st_size == good
    s2 = FileStorage(tmp_path)
    s2.load()
    s2.save(None, ents(7, 7))        # appends cleanly after the cut
    s2.close()
    assert [e.index for e in FileStorage(tmp_path).load().entries] == list(range(1, 8))


def test_corruption_before_the_synced_point_is_refused_naming_file_and_offset(tmp_path):
    s = FileStorage(tmp_path)
    s.load()
    s.save(None, ents(1, 3))
    second = segs(tmp_path)[0].stat().st_size
    s.save(None, ents(4, 6))
    s.save(None, ents(7, 9))
    s.close()
    seg = segs(tmp_path)[0]
    data = bytearray(seg.read_bytes())
    data[second + codec.HEADER_SIZE + 10] ^= 0x01          # inside the payload of the middle frame
    seg.write_bytes(bytes(data))
    with pytest.raises(RaftStorageCorrupt) as ei:
        FileStorage(tmp_path).load()
    assert ei.value.path == str(seg) and ei.value.offset == second
    assert str(seg) in str(ei.value) and f"offset {second}" in str(ei.value)


def test_corruption_in_a_sealed_segment_is_refused(tmp_path):
    s = FileStorage(tmp_path, segment_bytes=100)
    s.load()
    for i in range(1, 10):
        s.save(None, ents(i, i))
    s.close()
    first = segs(tmp_path)[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0x40                                       # last byte of a non-last segment
    first.write_bytes(bytes(data))
    with pytest.raises(RaftStorageCorrupt) as ei:
        FileStorage(tmp_path, segment_bytes=100).load()
    assert ei.value.path == str(first)


def test_log_shorter_than_persisted_commit_is_refused(tmp_path):
    s = FileStorage(tmp_path)
    s.load()
    s.save(HardState(2, "a", 0), ents(1, 3))
    s.save(HardState(3, "a", 9), [])
    s.close()
    with pytest.raises(RaftStorageCorrupt, match="below the persisted commit"):
        FileStorage(tmp_path).load()


def test_hard_state_shares_the_log_sync_and_survives_compaction(tmp_path):
    s = FileStorage(tmp_path, segment_bytes=120)
    s.load()
    s.save(HardState(7, "c", 0), ents(1, 1, 7))       # one frame pair, one fdatasync
    assert not (tmp_path / "hardstate").exists()
    for i in range(2, 12):
        s.save(None, ents(i, i, 7))
    s.save_snapshot(Snapshot(10, 7, b"s"))             # deletes the segment holding the record
    assert (tmp_path / "hardstate").exists()
    s.close()
    rec = FileStorage(tmp_path, segment_bytes=120).load()
    assert rec.hard_state == HardState(7, "c", 0) and [e.index for e in rec.entries] == [11]


def test_corrupt_hard_state_and_snapshot_are_refused(tmp_path):
    s = FileStorage(tmp_path, segment_bytes=100)
    s.load()
    s.save(HardState(2, "a", 0), ents(1, 1))
    for i in range(2, 6):
        s.save(None, ents(i, i))
    s.save_snapshot(Snapshot(4, 1, b"snapdata"))
    s.close()
    snap = next(p for p in tmp_path.iterdir() if p.suffix == ".snap")
    good = snap.read_bytes()
    snap.write_bytes(good[:-1] + b"X")
    with pytest.raises(RaftStorageCorrupt) as ei:
        FileStorage(tmp_path).load()
    assert ei.value.path == str(snap)
    snap.write_bytes(good)
    hs = tmp_path / "hardstate"
    hs.write_bytes(hs.read_bytes()[:-1] + b"\0")
    with pytest.raises(RaftStorageCorrupt) as ei:
        FileStorage(tmp_path).load()
    assert ei.value.path == str(hs)


def test_leftover_temp_files_from_a_crash_mid_write_are_ignored(tmp_path):
    s = FileStorage(tmp_path)
    s.load()
    s.save(HardState(4, "c", 0), ents(1, 2, 4))
    s.close()
    (tmp_path / "hardstate.tmp").write_bytes(b"half")
    (tmp_path / "snapshot-00000000000000000002-4.snap.tmp").write_bytes(b"half")
    rec = FileStorage(tmp_path).load()
    assert rec.hard_state.term == 4 and rec.snapshot is None
    assert not list(tmp_path.glob("*.tmp"))


def test_installing_a_divergent_snapshot_replaces_the_log(tmp_path):
    s = FileStorage(tmp_path)
    s.load()
    s.save(None, ents(1, 5, 1))
    s.install_snapshot(Snapshot(8, 3, b"leader-state"))
    s.save(None, ents(9, 10, 3))
    s.close()
    rec = FileStorage(tmp_path).load()
    assert rec.snapshot.index == 8 and [e.index for e in rec.entries] == [9, 10]


def test_memory_storage_loses_unsynced_writes_on_crash():
    from autoswitch.controller.raft.storage import MemoryStorage
    s = MemoryStorage(sync=False)
    s.save(HardState(1, "a", 0), ents(1, 2))
    s.sync()
    s.save(HardState(2, "b", 0), ents(3, 4))
    s.crash()
    rec = s.load()
    assert rec.hard_state == HardState(1, "a", 0) and [e.index for e in rec.entries] == [1, 2]


def test_cluster_with_unsynced_memory_storage_survives_crash_restart():
    from autoswitch.controller.raft.storage import MemoryStorage
    ids = ["a", "b", "c"]
    net = SimNet(ids, seed=12, storages={i: MemoryStorage(sync=False) for i in ids})
    ld = net.wait_leader()
    for k in range(5):
        net.propose(ld, f"k={k}".encode())
    net.run(50)
    net.crash(ld)
    net.restart(ld)
    ld2 = net.wait_leader()
    net.propose(ld2, b"z=1")
    assert net.run_until(lambda: all(n.sm.kv == {"k": "4", "z": "1"} for n in net.nodes.values()), 3000)
