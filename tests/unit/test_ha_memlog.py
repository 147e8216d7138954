"""An in-memory ReplicaLog for the HA session tests (it is scaffolding, not under test).

Records are ``u32 length + payload``; the real MessageStore is used by the adapter tests.
"""

from __future__ import annotations

import bisect
import struct

import pytest
from autoswitch.epochfile import EpochCache
from autoswitch.ha.errors import OffsetMismatch
from autoswitch.ha.log_api import ReplicaLog

from autoswitch.errors import CorruptionError

_LEN = struct.Struct(">I")


def record(payload: bytes) -> bytes:
    return _LEN.pack(len(payload)) + payload


def split_records(data: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        if i + 4 > len(data):
            raise CorruptionError("partial record header")
        (n,) = _LEN.unpack_from(data, i)
        if i + 4 + n > len(data):
            raise CorruptionError("partial record")
        out.append(data[i : i + 4 + n])
        i += 4 + n
    return out


class MemLog:
    def __init__(self, start: int = 0, segment_size: int = 1 << 20) -> None:
        self._start = start
        self._data = bytearray()
        self._bounds = [start]          # record starts + the end
        self._epochs = EpochCache()
        self.confirm_offset = 0
        self.segment_size = segment_size

    @property
    def max_offset(self) -> int:
        return self._start + len(self._data)

    @property
    def min_offset(self) -> int:
        return self._start

    @property
    def epochs(self) -> EpochCache:
        return self._epochs

    def segment_base(self, offset: int) -> int:
        target = max(self._start, offset - offset % self.segment_size)
        i = bisect.bisect_left(self._bounds, target)
        return min(self._bounds[i], offset)

    def read_raw(self, offset: int, max_bytes: int, limit: int | None = None) -> bytes:
        end = self.max_offset if limit is None else min(limit, self.max_offset)
        i = bisect.bisect_left(self._bounds, offset)
        if i >= len(self._bounds) or self._bounds[i] != offset:
            raise CorruptionError(f"read_raw offset {offset} is not a record boundary")
        j = bisect.bisect_right(self._bounds, min(end, offset + max_bytes)) - 1
        stop = self._bounds[max(i, j)]
        return bytes(self._data[offset - self._start : stop - self._start])

    def append(self, payloads: list[bytes]) -> int:
        """Master-side write."""
        for p in payloads:
            self._data += record(p)
            self._bounds.append(self.max_offset)
        return self.max_offset

    def append_raw(self, offset: int, data: bytes, epoch: int, epoch_start: int) -> int:
        if offset != self.max_offset:
            if self.max_offset == self.min_offset:
                self.reset(offset)
            else:
                raise OffsetMismatch("offset_mismatch", f"{offset} != {self.max_offset}")
        recs = split_records(data)
        last = self._epochs.last()
        if last is None or epoch > last.epoch:
            self._epochs.append(epoch, epoch_start)
        for r in recs:
            self._data += r
            self._bounds.append(self.max_offset)
        return self.max_offset

    def append_epoch(self, epoch: int, start_offset: int) -> None:
        self._epochs.append(epoch, start_offset)

    def truncate(self, offset: int, last_common_epoch: int | None = None) -> None:
        i = bisect.bisect_left(self._bounds, offset)
        if i >= len(self._bounds) or self._bounds[i] != offset:
            # Like the real store: a cut inside a record is refused with a typed error.
            raise CorruptionError(f"truncate offset {offset} is not a record boundary")
        del self._bounds[i + 1 :]
        del self._data[offset - self._start :]
        self._epochs.truncate_suffix_from_offset(offset)
        if last_common_epoch is not None:
            self._epochs.truncate_suffix_after_epoch(last_common_epoch)
        self.confirm_offset = min(self.confirm_offset, offset)

    def reset(self, start_offset: int) -> None:
        self._start = start_offset
        self._data = bytearray()
        self._bounds = [start_offset]
        self._epochs = EpochCache()
        self.confirm_offset = start_offset

    def flush(self) -> None:
        pass

    def bytes(self) -> bytes:
        return bytes(self._data)


def test_memlog_is_a_replica_log_and_reads_whole_records():
    log = MemLog()
    assert isinstance(log, ReplicaLog)
    log.append_epoch(1, 0)
    log.append([b"a" * 10, b"b" * 10, b"c" * 10])
    assert log.read_raw(0, 20) == record(b"a" * 10)
    assert log.read_raw(14, 100, limit=28) == record(b"b" * 10)
    with pytest.raises(CorruptionError):
        split_records(b"\x00\x00\x00\x09abc")
