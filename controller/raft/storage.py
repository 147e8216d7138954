"""Durable Raft storage: log segments of CRC'd frames, hard state, snapshots.

Layout of ``data_dir``::

    seg-<seq>.log                  log segments of CRC'd frames, appended in order: entry frames and
                                   hard-state frames (term, votedFor, commit) share one fdatasync.
                                   An entry frame whose first index is <= the previous last index
                                   overwrites from there (a follower's conflicting tail), so the
                                   log never truncates in place
    hardstate                      checkpoint of the hard state, rewritten (temp + fsync + rename +
                                   dir fsync) before compaction deletes segments holding its records
    snapshot-<index>-<term>.snap   latest snapshot (same crash-safe write, CRC)
    segments.manifest              the newest segment's sequence number, rewritten (crash-safe)
                                   whenever a segment is opened: a missing newest segment (or all
                                   of them) is detected at start instead of starting as a new node

Start-up consistency (like etcd's WAL/snapshot check): the node refuses to start, naming the
files, when the manifest's newest segment is missing, when there is a hard state or snapshot but
no segment, or when the log ends before the persisted commit index. A node whose disk was
replaced rejoins only through `autoswitch recover-member`.

The ``Storage`` protocol is what the driver needs; ``MemoryStorage`` implements it without
files (and can drop unsynced writes) so a simulator can crash nodes cheaply.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from autoswitch.base.fsutil import fsync_dir, write_atomic
from autoswitch.base.log import get_logger

from . import codec
from .errors import RaftStorageCorrupt
from .messages import Entry, HardState, Snapshot

MANIFEST = "segments.manifest"
_SEG_RE = re.compile(r"^seg-(\d{8})\.log$")
_SNAP_RE = re.compile(r"^snapshot-(\d{20})-(\d+)\.snap$")


@dataclass
class Recovered:
    hard_state: HardState
    snapshot: Snapshot | None
    entries: list[Entry] = field(default_factory=list)
    torn_bytes: int = 0


class Storage(Protocol):
    def load(self) -> Recovered: ...
    def save(self, hard_state: HardState | None, entries: list[Entry]) -> None: ...   # durable on return
    def install_snapshot(self, snap: Snapshot) -> None: ...    # from the leader; log mirrors RaftLog.restore
    def save_snapshot(self, snap: Snapshot) -> None: ...       # local snapshot of applied state; compacts
    def close(self) -> None: ...


class _Terms:
    """Term of every retained index (cheap: one int each) so storage can mirror RaftLog.restore."""

    def __init__(self) -> None:
        self.base = 0            # index of terms[0] is base + 1
        self.terms: list[int] = []

    def last(self) -> int:
        return self.base + len(self.terms)

    def trim(self, index: int) -> None:
        """Forget terms up to index (compacted): keeps this list bounded like the log."""
        n = min(index, self.last()) - self.base
        if n > 0:
            del self.terms[:n]
            self.base += n

    def term(self, index: int) -> int | None:
        if index <= self.base or index > self.last():
            return None
        return self.terms[index - self.base - 1]

    def write(self, entries: list[Entry]) -> None:
        if not entries:
            return
        first = entries[0].index
        if first <= self.base or not self.terms:
            self.base, self.terms = first - 1, []
        elif first <= self.last():
            del self.terms[first - self.base - 1:]
        elif first != self.last() + 1:
            raise AssertionError(f"gap in raft log: {first} after {self.last()}")
        self.terms.extend(e.term for e in entries)


@dataclass
class _Segment:
    seq: int
    path: Path
    size: int
    max_index: int = 0


class FileStorage:
    def __init__(self, data_dir: Path, segment_bytes: int = 64 << 20, fsync: bool = True) -> None:
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.log = get_logger("raft.storage", dir=str(self.dir))
        self._segs: list[_Segment] = []
        self._fd: int | None = None
        self._terms = _Terms()
        self._snap: Snapshot | None = None
        self._hs = HardState()
        self._loaded = False

    # ---------------------------------------------------------------- recovery
    def _refuse(self, what: str, path: Path | None) -> RaftStorageCorrupt:
        return RaftStorageCorrupt(f"{what}; refusing to start (a node that forgot its log or vote could elect a "
                                  f"second leader or lose committed entries). If this disk was lost or replaced, "
                                  f"rejoin with `autoswitch recover-member` (docs/operations-controller.md)",
                                  path=str(path) if path is not None else str(self.dir), offset=None)

    def _manifest_last(self) -> int | None:
        path = self.dir / MANIFEST
        try:
            doc = json.loads(path.read_text())
            last = doc["last_segment"]
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise self._refuse("segments.manifest is corrupt", path) from None
        if not isinstance(last, int) or last < 1:
            raise self._refuse("segments.manifest is corrupt", path)
        return last

    def _write_manifest(self) -> None:
        if self._segs:
            write_atomic(self.dir / MANIFEST, json.dumps({"last_segment": self._segs[-1].seq}).encode(), self.fsync)

    def load(self) -> Recovered:
        for p in self.dir.glob("*.tmp"):       # half-written atomic files never became visible
            p.unlink()
        hs_states: list[HardState] = []
        hs_path = self.dir / "hardstate"
        if hs_path.exists():
            hs_states.append(codec.decode_hard_state(hs_path.read_bytes(), str(hs_path)))
        snaps = sorted((m.group(1), p) for p in self.dir.iterdir() if (m := _SNAP_RE.match(p.name)))
        snap = None
        if snaps:
            # refuse a corrupt newest snapshot: the log behind it may already be compacted away
            snap = codec.decode_snapshot(snaps[-1][1].read_bytes(), str(snaps[-1][1]))
            for _, old in snaps[:-1]:
                old.unlink()
        self._snap = snap
        segs = sorted((int(m.group(1)), p) for p in self.dir.iterdir() if (m := _SEG_RE.match(p.name)))
        manifest_last = self._manifest_last()
        if manifest_last is not None and (not segs or segs[-1][0] < manifest_last):
            raise self._refuse(f"raft log segment seg-{manifest_last:08d}.log is missing (segments.manifest names "
                               f"it; found {[p.name for _, p in segs] or 'no segments'})",
                               self.dir / f"seg-{manifest_last:08d}.log")
        if not segs and (hs_path.exists() or snaps):
            raise self._refuse(f"no raft log segment next to {'hardstate' if hs_path.exists() else snaps[-1][1].name}",
                               self.dir)
        replay = codec.LogReplay()
        torn = 0
        for i, (seq, path) in enumerate(segs):
            buf = path.read_bytes()
            scan = codec.scan_segment(buf, str(path), is_last=(i == len(segs) - 1))
            seg = _Segment(seq, path, scan.good_end)
            for off, frame in scan.frames:
                if frame:
                    seg.max_index = max(seg.max_index, frame[-1].index)
                replay.add(frame, str(path), off)
            hs_states.extend(h for _, h in scan.hard_states)
            if scan.torn:
                torn = len(buf) - scan.good_end
                self.log.warning("raft_log_torn_tail_cut", path=str(path), offset=scan.good_end, bytes=torn)
                with open(path, "r+b") as f:
                    f.truncate(scan.good_end)
                    if self.fsync:
                        os.fsync(f.fileno())
            self._segs.append(seg)
        entries = replay.entries
        hs = codec.newest_hard_state(hs_states)
        self._hs = hs
        snap_index = snap.index if snap else 0
        last_index = max(snap_index, entries[-1].index if entries else 0)
        if last_index < hs.commit:
            raise self._refuse(f"raft log ends at {last_index} below the persisted commit index {hs.commit} "
                               f"(committed entries are gone: a truncated or deleted segment)",
                               self._segs[-1].path if self._segs else None)
        if snap is not None:
            entries = self._entries_after_snapshot(entries, snap)
        self._terms.write(entries)
        if snap is not None and not entries:
            self._terms.base = snap.index
        self._loaded = True
        if segs and manifest_last != segs[-1][0]:
            self._write_manifest()          # a data dir from before the manifest, or a crash in _open_segment
        self.log.info("raft_storage_loaded", term=hs.term, vote=hs.vote, snapshot=snap_index,
                      first=entries[0].index if entries else None, last=entries[-1].index if entries else None,
                      segments=len(self._segs))
        return Recovered(hs, snap, entries, torn)

    def _entries_after_snapshot(self, entries: list[Entry], snap: Snapshot) -> list[Entry]:
        at = [e for e in entries if e.index == snap.index]
        tail = [e for e in entries if e.index > snap.index]
        if tail and tail[0].index != snap.index + 1:
            raise RaftStorageCorrupt(f"raft log resumes at {tail[0].index} after snapshot {snap.index}",
                                     path=str(self.dir), offset=None)
        if (at and at[0].term != snap.term) or (tail and tail[0].term < snap.term):
            # an installed snapshot replaced a divergent log; the crash came before the old segments went
            self.log.warning("raft_log_divergent_tail_dropped", snapshot=snap.index, dropped=len(tail))
            return []
        return tail

    # ---------------------------------------------------------------- writes
    def _open_segment(self) -> None:
        seq = self._segs[-1].seq + 1 if self._segs else 1
        path = self.dir / f"seg-{seq:08d}.log"
        self._close_fd()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._segs.append(_Segment(seq, path, 0))
        if self.fsync:
            fsync_dir(self.dir)
        self._write_manifest()

    def _ensure_fd(self) -> None:
        if self._fd is None:
            if self._segs and self._segs[-1].size < self.segment_bytes:
                self._fd = os.open(self._segs[-1].path, os.O_WRONLY | os.O_APPEND)
            else:
                self._open_segment()

    def save(self, hard_state: HardState | None, entries: list[Entry]) -> None:
        """One write + one fdatasync for the entries and the hard state together (group commit)."""
        buf = b""
        if entries:
            buf += codec.encode_frame(entries)
        if hard_state is not None:
            buf += codec.encode_hard_state_frame(hard_state)
        if not buf:
            return
        self._ensure_fd()
        if self._segs[-1].size > 0 and self._segs[-1].size + len(buf) > self.segment_bytes:
            self._open_segment()
        assert self._fd is not None
        n = os.write(self._fd, buf)
        if n != len(buf):
            raise OSError(f"short write to raft log: {n} of {len(buf)}")
        seg = self._segs[-1]
        seg.size += n
        if entries:
            seg.max_index = max(seg.max_index, entries[-1].index)
        if self.fsync:
            os.fdatasync(self._fd)
        if entries:
            self._terms.write(entries)
        if hard_state is not None:
            self._hs = hard_state

    def _write_snapshot_file(self, snap: Snapshot) -> None:
        path = self.dir / f"snapshot-{snap.index:020d}-{snap.term}.snap"
        write_atomic(path, codec.encode_snapshot(snap), self.fsync)
        for p in self.dir.iterdir():
            if _SNAP_RE.match(p.name) and p != path:
                p.unlink()
        self._snap = snap

    def save_snapshot(self, snap: Snapshot) -> None:
        if self._snap is not None and snap.index <= self._snap.index:
            return
        self._write_snapshot_file(snap)
        self._compact(snap.index)

    def install_snapshot(self, snap: Snapshot) -> None:
        matches = self._terms.term(snap.index) == snap.term and self._terms.last() > snap.index
        self._write_snapshot_file(snap)
        if matches:
            self._compact(snap.index)
            return
        # our log diverged from (or is behind) the snapshot: it is replaced entirely. The new
        # (empty) segment exists before the old ones go, so no crash leaves a hard state without
        # any segment (which start-up refuses as a lost log).
        self._close_fd()
        write_atomic(self.dir / "hardstate", codec.encode_hard_state(self._hs), self.fsync)
        old = list(self._segs)
        self._open_segment()
        for seg in old:
            seg.path.unlink()
        self._segs = self._segs[len(old):]
        if self.fsync:
            fsync_dir(self.dir)
        self._terms = _Terms()
        self._terms.base = snap.index

    def _compact(self, index: int) -> None:
        """Delete whole segments whose entries are all covered by the snapshot (never the open one)."""
        self._terms.trim(index - 1)     # keep the term at the snapshot index for install_snapshot's check
        removed = 0
        if len(self._segs) > 1 and self._segs[0].max_index <= index:
            # the hard-state records in the segments about to go must survive them
            write_atomic(self.dir / "hardstate", codec.encode_hard_state(self._hs), self.fsync)
        while len(self._segs) > 1 and self._segs[0].max_index <= index:
            self._segs.pop(0).path.unlink()
            removed += 1
        if removed:
            if self.fsync:
                fsync_dir(self.dir)
            self.log.info("raft_log_compacted", upto=index, segments_removed=removed)

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._close_fd()


class MemoryStorage:
    """In-memory Storage for simulators. ``lose_unsynced`` models a crash: with ``sync=False``
    writes are staged, and only ``sync()`` makes them survive ``crash()``."""

    def __init__(self, sync: bool = True) -> None:
        self.auto_sync = sync
        self.durable = Recovered(HardState(), None, [])
        self._staged: list[tuple[str, object]] = []

    def load(self) -> Recovered:
        d = self.durable
        return Recovered(d.hard_state, d.snapshot, list(d.entries))

    def _apply(self, op: str, arg) -> None:
        d = self.durable
        if op == "hs":
            d.hard_state = arg
        elif op == "entries":
            first = arg[0].index
            d.entries = [e for e in d.entries if e.index < first] + list(arg)
        elif op == "snap_local":
            d.snapshot = arg
            d.entries = [e for e in d.entries if e.index > arg.index]
        elif op == "snap_install":
            match = any(e.index == arg.index and e.term == arg.term for e in d.entries)
            d.snapshot = arg
            d.entries = [e for e in d.entries if e.index > arg.index] if match else []

    def _do(self, op: str, arg) -> None:
        if self.auto_sync:
            self._apply(op, arg)
        else:
            self._staged.append((op, arg))

    def save(self, hard_state: HardState | None, entries: list[Entry]) -> None:
        if entries:
            self._do("entries", list(entries))
        if hard_state is not None:
            self._do("hs", hard_state)

    def install_snapshot(self, snap: Snapshot) -> None:
        self._do("snap_install", snap)

    def save_snapshot(self, snap: Snapshot) -> None:
        self._do("snap_local", snap)

    def sync(self) -> None:
        for op, arg in self._staged:
            self._apply(op, arg)
        self._staged = []

    def crash(self) -> None:
        self._staged = []

    def close(self) -> None:
        pass
