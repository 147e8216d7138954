"""A simulated disk for the commit log's segment files (broker/storage/segment.py ``SegmentFiles``).

Each file keeps what the process reads (its page cache) apart from what a power cut keeps for
sure (the bytes of its last successful sync), and the writes in between in order. The faults are
the ones real disks and kernels have (issue 61's menu, the part a single store meets):

- **the fsync boundary**: a power cut keeps each unsynced write whole, a prefix of it (torn), or
  nothing, independently, so a later write may survive an earlier lost one (a hole of zeros);
  a segment created since its folder's last sync may vanish;
- **a failed fsync** (EIO): the kernel marks the pages clean although they never reached the
  disk, so the writes are gone at the next power cut and a later fsync "succeeds" without them
  (PostgreSQL's fsyncgate);
- **a bit flip** in bytes already on the disk (media corruption), seen by every later read;
- **a failed write** (ENOSPC, or EIO), after which a part of the bytes may be in the file.

Deterministic: every choice comes from the ``random.Random`` it is given; no threads, no files.
"""

from __future__ import annotations

import errno
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from autoswitch.base.fsutil import FsyncFailed

# (pos, bytes): a write at pos; (size, None): a truncate to size
Op = tuple[int, bytes | None]


@dataclass
class _File:
    data: bytearray = field(default_factory=bytearray)        # what the process reads
    durable: bytearray = field(default_factory=bytearray)     # what a power cut keeps for sure
    unsynced: list[Op] = field(default_factory=list)   # the writes and truncates since the last sync
    mtime: float = 0.0
    entry_durable: bool = False       # its folder was synced since it was created


def _apply(d: bytearray, ops: list[Op]) -> None:
    """The one way bytes change here: the page cache, a sync and a power cut all apply ops."""
    for pos, b in ops:
        if b is None:                       # a truncate
            if pos < len(d):
                del d[pos:]
            else:
                d.extend(bytes(pos - len(d)))
            continue
        if pos > len(d):
            d.extend(bytes(pos - len(d)))
        d[pos:pos + len(b)] = b


class _Snap(bytes):
    """A file's bytes for the recovery walk (the real store maps the file)."""

    def close(self) -> None:
        pass


class SimSegmentFile:
    __slots__ = ("disk", "f", "what", "closed")

    def __init__(self, disk: SimDisk, f: _File, what: str) -> None:
        self.disk, self.f, self.what, self.closed = disk, f, what, False

    def size(self) -> int:
        return len(self.f.data)

    def mtime(self) -> float:
        return self.f.mtime

    def pwrite(self, data, pos: int) -> int:
        assert not self.closed
        b = bytes(data)
        disk = self.disk
        if disk.writes_before_failure is not None:
            if disk.writes_before_failure == 0:
                disk.writes_before_failure = None
                disk.fail_writes += 1
            else:
                disk.writes_before_failure -= 1
        if disk.fail_writes > 0:
            # a full disk (or an I/O error on write): maybe a part lands, then the call fails
            disk.fail_writes -= 1
            disk.stats["write_failed"] += 1
            part = b[: disk.rng.randrange(len(b))] if len(b) > 1 and disk.rng.random() < 0.5 else b""
            if part:
                self._put(part, pos)
            code = errno.ENOSPC if disk.rng.random() < 0.7 else errno.EIO
            raise OSError(code, os.strerror(code), self.what)
        self._put(b, pos)
        return len(b)

    def _put(self, b: bytes, pos: int) -> None:
        self._do((pos, b))
        self.f.mtime = self.disk.clock()
        self.disk.stats["writes"] += 1

    def _do(self, op: Op) -> None:
        _apply(self.f.data, [op])
        self.f.unsynced.append(op)

    def pread(self, n: int, pos: int) -> bytes:
        assert not self.closed
        return bytes(self.f.data[pos:pos + n])

    def snapshot(self) -> _Snap | None:
        return _Snap(self.f.data) if self.f.data else None

    def truncate(self, size: int) -> None:
        self._do((size, None))

    def sync(self, data_only: bool) -> None:
        assert not self.closed
        disk = self.disk
        if disk.fail_syncs > 0:
            disk.fail_syncs -= 1
            disk.stats["fsync_failed"] += 1
            # the kernel drops the error with the pages: marked clean, never written
            self.f.unsynced = []
            raise FsyncFailed(f"fsync of {self.what} failed: Input/output error", path=self.what, errno=errno.EIO)
        # the writes since the last sync reach the disk; bytes a failed sync lost stay lost (the
        # page cache still shows them, marked clean, and no later fsync writes them)
        _apply(self.f.durable, self.f.unsynced)
        self.f.unsynced = []
        disk.stats["fsyncs"] += 1

    def duplicate(self) -> SimSegmentFile:
        return SimSegmentFile(self.disk, self.f, self.what)

    def close(self) -> None:
        self.closed = True


class SimSegmentFiles:
    """One folder of the simulated disk (the commit log's)."""

    def __init__(self, disk: SimDisk, path: Path) -> None:
        self.disk = disk
        self.path = path

    def _key(self, name: str) -> str:
        return str(self.path / name)

    def names(self) -> list[str]:
        prefix = str(self.path) + "/"
        return [k[len(prefix):] for k in self.disk.files if k.startswith(prefix)]

    def open(self, name: str) -> SimSegmentFile:
        key = self._key(name)
        f = self.disk.files.get(key)
        if f is None:
            f = self.disk.files[key] = _File(mtime=self.disk.clock())
        return SimSegmentFile(self.disk, f, key)

    def remove(self, name: str) -> None:
        self.disk.files.pop(self._key(name), None)

    def sync(self) -> None:
        prefix = str(self.path) + "/"
        for k, f in self.disk.files.items():
            if k.startswith(prefix):
                f.entry_durable = True


class SimDisk:
    def __init__(self, rng: random.Random, clock=lambda: 0.0) -> None:
        self.rng = rng
        self.clock = clock
        self.files: dict[str, _File] = {}
        self.fail_syncs = 0             # the next so many syncs fail (EIO)
        self.fail_writes = 0            # the next so many writes fail (ENOSPC or EIO, maybe after a part)
        self.writes_before_failure: int | None = None   # so many writes succeed, then one fails
        self.stats: Counter[str] = Counter()

    def folder(self, path: Path) -> SimSegmentFiles:
        return SimSegmentFiles(self, path)

    def power_cut(self) -> None:
        """Every file becomes what a power cut leaves: its durable bytes, then each unsynced
        write kept whole, torn or lost (independently, in order); a file created since its
        folder's last sync may be gone."""
        rng = self.rng
        for key in list(self.files):
            f = self.files[key]
            if not f.entry_durable and rng.random() < 0.5:
                del self.files[key]
                self.stats["files_lost"] += 1
                continue
            survived: list[Op] = []
            for pos, b in f.unsynced:
                if b is not None:               # (a truncate always survives: the store syncs each at once)
                    r = rng.random()
                    if r < 0.45:
                        self.stats["writes_lost"] += 1
                        continue
                    if r < 0.65 and len(b) > 1:
                        b = b[: rng.randrange(1, len(b))]
                        self.stats["writes_torn"] += 1
                    else:
                        self.stats["writes_kept"] += 1
                survived.append((pos, b))
            d = bytearray(f.durable)
            _apply(d, survived)
            f.data, f.durable, f.unsynced = d, bytearray(d), []
            f.entry_durable = True
        self.stats["power_cuts"] += 1

    def flip_bit(self, key: str, pos: int) -> None:
        """Media corruption: one bit of a byte already on the disk, seen by every later read."""
        f = self.files[key]
        assert pos < len(f.durable) and pos < len(f.data)
        bit = 1 << self.rng.randrange(8)
        f.durable[pos] ^= bit
        f.data[pos] ^= bit
        self.stats["bit_flips"] += 1
