"""An in-memory ReplicaLog for the HA session tests (it is scaffolding, not under test).

Records are ``u32 length + payload``; the real MessageStore is used by the adapter tests.
"""

from __future__ import annotations

import bisect
import struct

import pytest
from autoswitch.ha.log_api import ReplicaLog

from autoswitch.base.errors import CorruptionError
from tests.sim.memlog import MemReplicaLog

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


class MemLog(MemReplicaLog):
    def __init__(self, start: int = 0, segment_size: int = 1 << 20) -> None:
        super().__init__(start)
        self.segment_size = segment_size

    def _split(self, data: bytes, offset: int) -> list[bytes]:
        return split_records(data)

    def segment_base(self, offset: int) -> int:
        target = max(self._start, offset - offset % self.segment_size)
        i = bisect.bisect_left(self._bounds, target)
        return min(self._bounds[i], offset)

    def append(self, payloads: list[bytes]) -> int:
        """Master-side write."""
        self._push([record(p) for p in payloads])
        return self.max_offset


def test_memlog_is_a_replica_log_and_reads_whole_records():
    log = MemLog()
    assert isinstance(log, ReplicaLog)
    log.append_epoch(1, 0)
    log.append([b"a" * 10, b"b" * 10, b"c" * 10])
    assert log.read_raw(0, 20) == record(b"a" * 10)
    assert log.read_raw(14, 100, limit=28) == record(b"b" * 10)
    with pytest.raises(CorruptionError):
        split_records(b"\x00\x00\x00\x09abc")
