"""One fixed-size commit-log segment file, and the file system it lives on.

Named by its base offset, zero padded to 20 digits (RocketMQ's layout); byte ``i``
of the file is log offset ``base + i``. Files grow by appends (no preallocation),
so after a crash the file length is where a torn tail, if any, ends. A segment
that starts mid-way (an empty store restarted at an offset) has a sparse hole
before its first record.

The segment files are reached through ``SegmentFiles`` (a folder) and ``SegmentFile`` (one open
file): the broker's are ``OsSegmentFiles`` (os.open, pwrite, fdatasync, mmap); the storage
simulator's keep written and synced bytes apart and fail fsyncs, tear writes and flip bits
(tests/sim/sim_disk.py), so the simulator drives this log and its recovery, not a copy.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Protocol

from autoswitch.broker.storage.store_errors import LogCorrupt

from autoswitch.base.fsutil import fsync_dir, fsync_fd

NAME_DIGITS = 20


def segment_name(base: int) -> str:
    return f"{base:0{NAME_DIGITS}d}"


def parse_segment_name(name: str) -> int | None:
    if len(name) == NAME_DIGITS and name.isdigit():
        return int(name)
    return None


# What pwrite takes (bytes, bytearray, memoryview).
Bytes = bytes | bytearray | memoryview


class Snapshot(Protocol):
    """A file's bytes for a recovery walk, readable as a buffer (an mmap, or the simulator's
    copy); closed after."""

    def __len__(self) -> int: ...
    def close(self) -> None: ...


class SegmentFile(Protocol):
    """One open segment file. ``sync`` raises ``FsyncFailed`` (after which nothing written to
    this file may be trusted: the store poisons itself); ``duplicate`` is a second handle on the
    same file that another thread may sync and close (the group commit's)."""

    def size(self) -> int: ...
    def mtime(self) -> float: ...
    def pwrite(self, data: Bytes, pos: int) -> int: ...
    def pread(self, n: int, pos: int) -> bytes: ...
    def snapshot(self) -> Snapshot | None: ...
    def truncate(self, size: int) -> None: ...
    def sync(self, data_only: bool) -> None: ...
    def duplicate(self) -> SegmentFile: ...
    def close(self) -> None: ...


class SegmentFiles(Protocol):
    """The commit log's folder: segment files by name."""

    path: Path

    def names(self) -> list[str]: ...
    def open(self, name: str) -> SegmentFile: ...
    def remove(self, name: str) -> None: ...
    def sync(self) -> None: ...


class OsSegmentFile:
    __slots__ = ("fd", "what")

    def __init__(self, fd: int, what: str) -> None:
        self.fd = fd
        self.what = what

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def mtime(self) -> float:
        return os.fstat(self.fd).st_mtime

    def pwrite(self, data: Bytes, pos: int) -> int:
        return os.pwrite(self.fd, data, pos)

    def pread(self, n: int, pos: int) -> bytes:
        return os.pread(self.fd, n, pos)

    def snapshot(self) -> mmap.mmap | None:
        size = self.size()
        if size == 0:
            return None
        return mmap.mmap(self.fd, size, prot=mmap.PROT_READ)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def sync(self, data_only: bool) -> None:
        fsync_fd(self.fd, data_only=data_only, what=self.what)

    def duplicate(self) -> OsSegmentFile:
        return OsSegmentFile(os.dup(self.fd), self.what)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class OsSegmentFiles:
    """Segment files in a folder of the host's file system (created if absent)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def names(self) -> list[str]:
        return [p.name for p in self.path.iterdir()]

    def open(self, name: str) -> OsSegmentFile:
        path = self.path / name
        return OsSegmentFile(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), str(path))

    def remove(self, name: str) -> None:
        try:
            (self.path / name).unlink()
        except FileNotFoundError:
            pass

    def sync(self) -> None:
        fsync_dir(self.path)


class Segment:
    __slots__ = ("base", "size_limit", "path", "file", "dirty", "_files")

    def __init__(self, files: SegmentFiles, base: int, size_limit: int) -> None:
        self.base = base
        self.size_limit = size_limit
        self._files = files
        self.path = files.path / segment_name(base)
        self.file: SegmentFile | None = files.open(segment_name(base))
        self.dirty = False

    @property
    def end_limit(self) -> int:
        return self.base + self.size_limit

    def _f(self) -> SegmentFile:
        assert self.file is not None, f"segment {self.path} is closed"
        return self.file

    def file_size(self) -> int:
        return self._f().size()

    def modified_at(self) -> float:
        """When the file was last written (seconds since the epoch): age-based retention."""
        return self._f().mtime()

    def write(self, offset: int, data) -> None:
        """One pwrite (looped only on short writes) at log offset ``offset``."""
        self.pwrite_all(offset, data)
        self.dirty = True

    def pwrite_all(self, offset: int, data) -> None:
        """The bytes only (no bookkeeping), so a writer thread may run it: pwrite releases
        the GIL. The caller marks the segment dirty when it commits the write."""
        assert self.base <= offset and offset + len(data) <= self.end_limit, (self.base, offset, len(data))
        pos = offset - self.base
        view = memoryview(data)
        f = self._f()
        while view:
            n = f.pwrite(view, pos)
            pos += n
            view = view[n:]

    def read(self, offset: int, n: int) -> bytes:
        """Exactly ``n`` bytes: a file shorter than the log says is corruption (a segment cut or
        emptied under us), never a short buffer for the record parser to trip on."""
        assert self.base <= offset and offset + n <= self.end_limit
        data = self._f().pread(n, offset - self.base)
        if len(data) < n:
            raise LogCorrupt(f"segment file ends at {offset + len(data)}, the log needs {offset + n}",
                             path=str(self.path), offset=offset + len(data))
        return data

    def map(self) -> Snapshot | None:
        return self._f().snapshot()

    def truncate(self, offset: int) -> None:
        assert self.base <= offset <= self.end_limit
        f = self._f()
        f.truncate(offset - self.base)
        f.sync(data_only=False)
        self.dirty = False

    def fsync(self) -> None:
        if self.dirty:
            self._f().sync(data_only=True)
            self.dirty = False

    def duplicate(self) -> SegmentFile:
        """A handle the group commit's thread syncs and closes (this one stays open)."""
        return self._f().duplicate()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def delete(self) -> None:
        self.close()
        self._files.remove(segment_name(self.base))
