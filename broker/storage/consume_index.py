"""Per-topic consume index: fixed 12-byte entries (phyOffset u64, size u32), big-endian.

Entry ``q`` of a topic lives in the file whose name (20 digits) is the first queue
offset it holds; every file but the last holds exactly ``entries_per_file`` entries,
so lookup is arithmetic (O(1)) and needs no in-memory table. Files grow by appends;
recovery never rebuilds an index, it cuts it back to the checkpointed entry count
and re-indexes only the log records written after the checkpoint.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from autoswitch.broker.storage.segment import NAME_DIGITS, parse_segment_name
from autoswitch.broker.storage.store_errors import LogCorrupt

from autoswitch.base.fsutil import fsync_dir, fsync_fd

ENTRY = struct.Struct(">QI")
ENTRY_SIZE = ENTRY.size
_ENTRY_DTYPE = np.dtype([("phy", ">u8"), ("size", ">u4")])
_DTYPE = np.dtype([("phy", ">u8"), ("size", ">u4")])
assert _DTYPE.itemsize == ENTRY_SIZE
_MAX_READ_FDS = 4  # per topic; consumers mostly read the newest file


def topic_dir_name(topic: str) -> str:
    # hex keeps any UTF-8 topic a safe, unambiguous file name; past NAME_MAX a digest
    h = topic.encode().hex()
    return h if len(h) <= 200 else "sha256-" + hashlib.sha256(topic.encode()).hexdigest()


def pack_entries(phys: Sequence[int], sizes: Sequence[int]) -> bytes:
    arr = np.empty(len(phys), dtype=_DTYPE)
    arr["phy"] = phys
    arr["size"] = sizes
    return arr.tobytes()


class TopicIndex:
    def __init__(self, directory: Path, topic: str, entries_per_file: int, min_q: int = 0, next_q: int = 0) -> None:
        self.dir = directory
        self.topic = topic
        self.per_file = entries_per_file
        self.min_q = min_q
        self.next_q = next_q
        self.bases: list[int] = []
        self._wfd: int | None = None  # fd of the last file
        self._rfds: dict[int, int] = {}  # base -> read fd, a few recent files (bounded)
        self._dirty = False

    # --- files ---------------------------------------------------------------------
    def _path(self, base: int) -> Path:
        return self.dir / f"{base:0{NAME_DIGITS}d}"

    def open_files(self) -> None:
        """Load the file list; next_q = what the files hold (recovery then cuts it)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        bases = sorted(b for b in (parse_segment_name(p.name) for p in self.dir.iterdir()) if b is not None)
        for a, b in zip(bases, bases[1:], strict=False):
            if b != a + self.per_file:
                raise LogCorrupt(f"consume index files not contiguous ({a} then {b})", path=str(self.dir))
        self.bases = bases
        if bases:
            size = os.path.getsize(self._path(bases[-1]))
            self.next_q = bases[-1] + min(size // ENTRY_SIZE, self.per_file)
            self.min_q = max(self.min_q, bases[0])

    def _write_fd(self) -> int:
        if self._wfd is None:
            self._wfd = os.open(self._path(self.bases[-1]), os.O_RDWR | os.O_CREAT, 0o644)
        return self._wfd

    def _close_wfd(self) -> None:
        if self._wfd is not None:
            if self._dirty:  # a rolled file must be durable before the checkpoint counts it
                fsync_fd(self._wfd, data_only=True, what=str(self.dir))
            os.close(self._wfd)
            self._wfd = None

    # --- append --------------------------------------------------------------------
    def append(self, q0: int, data: bytes) -> None:
        """Bulk-append packed entries for queue offsets q0, q0+1, ..."""
        assert q0 == self.next_q, (self.topic, q0, self.next_q)
        count = len(data) // ENTRY_SIZE
        assert count * ENTRY_SIZE == len(data)
        view = memoryview(data)
        done = 0
        while done < count:
            q = self.next_q
            if not self.bases or q >= self.bases[-1] + self.per_file:
                self._close_wfd()
                self.bases.append(q if not self.bases else self.bases[-1] + self.per_file)
                self._write_fd()
                fsync_dir(self.dir)
            fd = self._write_fd()
            base = self.bases[-1]
            n = min(count - done, base + self.per_file - q)
            chunk = view[done * ENTRY_SIZE : (done + n) * ENTRY_SIZE]
            pos = (q - base) * ENTRY_SIZE
            while chunk:
                w = os.pwrite(fd, chunk, pos)
                pos += w
                chunk = chunk[w:]
            done += n
            self.next_q += n
        self._dirty = True

    # --- lookup --------------------------------------------------------------------
    def _read(self, q: int, count: int) -> bytes:
        parts = []
        while count > 0:
            i = (q - self.bases[0]) // self.per_file
            base = self.bases[i]
            n = min(count, base + self.per_file - q)
            b = os.pread(self._read_fd(base), n * ENTRY_SIZE, (q - base) * ENTRY_SIZE)
            if len(b) != n * ENTRY_SIZE:
                raise LogCorrupt(f"consume index file short at queue offset {q}", path=str(self._path(base)))
            parts.append(b)
            q += n
            count -= n
        return b"".join(parts)

    def _read_fd(self, base: int) -> int:
        fd = self._rfds.get(base)
        if fd is None:
            if len(self._rfds) >= _MAX_READ_FDS:
                self._close_rfds()
            fd = self._rfds[base] = os.open(self._path(base), os.O_RDONLY)
        return fd

    def _close_rfds(self) -> None:
        for fd in self._rfds.values():
            os.close(fd)
        self._rfds.clear()

    def lookup(self, q: int, count: int) -> list[tuple[int, int]]:
        """Entries for queue offsets [q, q+count) clamped to [min_q, next_q)."""
        q = max(q, self.min_q)
        count = min(count, self.next_q - q)
        if count <= 0 or not self.bases:
            return []
        return list(ENTRY.iter_unpack(self._read(q, count)))

    def lookup_arrays(self, q: int, count: int) -> tuple[int, np.ndarray, np.ndarray]:
        """``lookup`` as (first queue offset, phys, sizes) int64 arrays, for batch readers."""
        q = max(q, self.min_q)
        count = min(count, self.next_q - q)
        if count <= 0 or not self.bases:
            return q, np.empty(0, np.int64), np.empty(0, np.int64)
        raw = np.frombuffer(self._read(q, count), dtype=_ENTRY_DTYPE)
        return q, raw["phy"].astype(np.int64), raw["size"].astype(np.int64)

    def first_q_at_or_after(self, phy: int) -> int:
        """Smallest queue offset whose entry's phy >= ``phy`` (next_q if none): binary search."""
        lo = max(self.min_q, self.bases[0]) if self.bases else self.next_q
        hi = self.next_q
        while lo < hi:
            mid = (lo + hi) // 2
            (p, _s) = ENTRY.unpack(self._read(mid, 1))
            if p < phy:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # --- cuts ----------------------------------------------------------------------
    def truncate_to(self, q: int) -> None:
        """Keep entries below ``q`` (idempotent; also cuts a partial entry left by a crash)."""
        self._close_wfd()
        self._close_rfds()
        changed = False
        while self.bases and self.bases[-1] >= q:
            self._path(self.bases.pop()).unlink(missing_ok=True)
            changed = True
        if self.bases:
            base = self.bases[-1]
            keep = (min(q, base + self.per_file) - base) * ENTRY_SIZE
            path = self._path(base)
            if os.path.getsize(path) != keep:
                with open(path, "r+b") as f:
                    f.truncate(keep)
                    fsync_fd(f.fileno(), what=str(path))
        if changed:
            fsync_dir(self.dir)
        self.next_q = min(self.next_q, q) if self.bases else q
        self.min_q = min(self.min_q, self.next_q)

    def drop_below(self, q: int) -> None:
        """Retention: entries below ``q`` are gone; whole files below it are deleted."""
        q = min(q, self.next_q)
        self.min_q = max(self.min_q, q)
        self._close_rfds()
        changed = False
        while len(self.bases) > 1 and self.bases[0] + self.per_file <= self.min_q:
            self._path(self.bases.pop(0)).unlink(missing_ok=True)
            changed = True
        if self.bases and self.bases[0] + self.per_file <= self.min_q and self.min_q == self.next_q:
            self._close_wfd()
            self._path(self.bases.pop(0)).unlink(missing_ok=True)
            changed = True
        if changed:
            fsync_dir(self.dir)

    def fsync(self) -> None:
        if self._dirty and self._wfd is not None:
            fsync_fd(self._wfd, data_only=True, what=str(self.dir))
        self._dirty = False

    def close(self) -> None:
        self._close_wfd()
        self._close_rfds()

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)
