"""One fixed-size commit-log segment file.

Named by its base offset, zero padded to 20 digits (RocketMQ's layout); byte ``i``
of the file is log offset ``base + i``. Files grow by appends (no preallocation),
so after a crash the file length is where a torn tail, if any, ends. A segment
that starts mid-way (an empty store restarted at an offset) has a sparse hole
before its first record.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from autoswitch.broker.storage.store_errors import LogCorrupt

from autoswitch.base.fsutil import fsync_fd

NAME_DIGITS = 20


def segment_name(base: int) -> str:
    return f"{base:0{NAME_DIGITS}d}"


def parse_segment_name(name: str) -> int | None:
    if len(name) == NAME_DIGITS and name.isdigit():
        return int(name)
    return None


class Segment:
    __slots__ = ("base", "size_limit", "path", "fd", "dirty")

    def __init__(self, directory: Path, base: int, size_limit: int) -> None:
        self.base = base
        self.size_limit = size_limit
        self.path = directory / segment_name(base)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.dirty = False

    @property
    def end_limit(self) -> int:
        return self.base + self.size_limit

    def file_size(self) -> int:
        return os.fstat(self.fd).st_size

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
        while view:
            n = os.pwrite(self.fd, view, pos)
            pos += n
            view = view[n:]

    def read(self, offset: int, n: int) -> bytes:
        """Exactly ``n`` bytes: a file shorter than the log says is corruption (a segment cut or
        emptied under us), never a short buffer for the record parser to trip on."""
        assert self.base <= offset and offset + n <= self.end_limit
        data = os.pread(self.fd, n, offset - self.base)
        if len(data) < n:
            raise LogCorrupt(f"segment file ends at {offset + len(data)}, the log needs {offset + n}",
                             path=str(self.path), offset=offset + len(data))
        return data

    def map(self) -> mmap.mmap | None:
        size = self.file_size()
        if size == 0:
            return None
        return mmap.mmap(self.fd, size, prot=mmap.PROT_READ)

    def truncate(self, offset: int) -> None:
        assert self.base <= offset <= self.end_limit
        os.ftruncate(self.fd, offset - self.base)
        fsync_fd(self.fd, what=str(self.path))
        self.dirty = False

    def fsync(self) -> None:
        if self.dirty:
            fsync_fd(self.fd, data_only=True, what=str(self.path))
            self.dirty = False

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
