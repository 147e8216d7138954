"""An in-memory ReplicaLog (autoswitch.ha.log_api) with a durability model for the simulator.

Records are ``u32 length + u32 crc32 + payload``. Every append is durable when it returns
(the brokers run with synchronous flush), except when the simulator crashes a broker inside
the write: then a random prefix of the new bytes survives (a torn tail) and recovery cuts
the log back to the last whole record, detected by the CRC, never guessed.
"""

from __future__ import annotations

import bisect
import random
import struct
import zlib
from types import SimpleNamespace

from autoswitch.broker.storage.divergence import Divergence
from autoswitch.epochfile import EpochCache
from autoswitch.ha.errors import OffsetMismatch

from autoswitch.base.errors import CorruptionError

_HDR = struct.Struct(">II")
MAX_RECORD = 1 << 16


def record(payload: bytes) -> bytes:
    return _HDR.pack(len(payload), zlib.crc32(payload)) + payload


def walk(data: bytes, base: int = 0) -> list[tuple[int, bytes]]:
    """(offset, payload) of every whole record; raises CorruptionError on a bad/partial record."""
    out, i = [], 0
    while i < len(data):
        if i + _HDR.size > len(data):
            raise CorruptionError("partial record header", offset=base + i)
        n, crc = _HDR.unpack_from(data, i)
        if n > MAX_RECORD or i + _HDR.size + n > len(data):
            raise CorruptionError("partial or oversized record", offset=base + i)
        p = bytes(data[i + _HDR.size: i + _HDR.size + n])
        if zlib.crc32(p) != crc:
            raise CorruptionError("record CRC mismatch", offset=base + i)
        out.append((base + i, p))
        i += _HDR.size + n
    return out


class MemReplicaLog:
    """The ReplicaLog surface over one bytearray (record starts kept for boundary checks). A
    subclass frames records: ``_split(data, offset)`` returns the whole framed records of a
    replicated chunk, raising CorruptionError on a partial or damaged one. Shared by the
    simulator's SimLog and the HA session tests' MemLog."""

    def __init__(self, start: int = 0) -> None:
        self._start = start
        self._data = bytearray()
        self._bounds = [start]            # record starts + the end
        self._epochs = EpochCache()
        self.confirm_offset = 0
        self._divergence: Divergence | None = None

    def _split(self, data: bytes, offset: int) -> list[bytes]:
        raise NotImplementedError

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
        return self._start

    def fold_records(self, data: bytes | memoryview, pos: int, end: int, limit: int, h: int) -> tuple[int, int]:
        """The commit log's digest word (CRC32 and length) over this log's framing."""
        p = pos
        for r in self._split(bytes(data[pos:end]), 0):
            if p >= limit:
                break
            h = ((h ^ ((zlib.crc32(r) << 32) | len(r))) * 0x100000001B3) & ((1 << 64) - 1)
            p += len(r)
        return h, p

    def read_raw(self, offset: int, max_bytes: int, limit: int | None = None) -> bytes:
        end = self.max_offset if limit is None else min(limit, self.max_offset)
        i = bisect.bisect_left(self._bounds, offset)
        if i >= len(self._bounds) or self._bounds[i] != offset:
            raise CorruptionError(f"read_raw offset {offset} is not a record boundary")
        j = bisect.bisect_right(self._bounds, min(end, offset + max_bytes)) - 1
        stop = self._bounds[max(i, j)]
        return bytes(self._data[offset - self._start: stop - self._start])

    def _push(self, framed: list[bytes]) -> None:
        for r in framed:
            self._data += r
            self._bounds.append(self.max_offset)

    def append_raw(self, offset: int, data: bytes | memoryview, epoch: int, epoch_start: int) -> int:
        if offset != self.max_offset:
            if self.max_offset == self.min_offset:
                self.reset(offset)
            else:
                raise OffsetMismatch("offset_mismatch", f"{offset} != {self.max_offset}")
        framed = self._split(bytes(data), offset)   # every record checked before anything is written
        last = self._epochs.last()
        if last is None or epoch > last.epoch:
            self._epochs.append(epoch, epoch_start)
        self._push(framed)
        return self.max_offset

    def append_epoch(self, epoch: int, start_offset: int) -> None:
        self._epochs.append(epoch, start_offset)

    def truncate(self, offset: int, last_common_epoch: int | None = None) -> None:
        i = bisect.bisect_left(self._bounds, offset)
        if i >= len(self._bounds) or self._bounds[i] != offset:
            # like the real store: a cut inside a record is refused with a typed error
            raise CorruptionError(f"truncate offset {offset} is not a record boundary")
        del self._bounds[i + 1:]
        del self._data[offset - self._start:]
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

    def sync_log(self) -> None:
        self.flush()

    def begin_log_sync(self) -> SimpleNamespace:
        return SimpleNamespace(target=self.max_offset, run=lambda: None)

    def finish_log_sync(self, s: SimpleNamespace, error: BaseException | None) -> None:
        if error is not None:
            raise error
        self.flush()

    @property
    def divergence(self) -> Divergence | None:
        return self._divergence

    def mark_diverged(self, epoch: int, start: int, end: int, cut: bool = False) -> None:
        self._divergence = Divergence(epoch, start, end, cut)

    def clear_diverged(self, why: str) -> None:
        self._divergence = None

    @property
    def synced_offset(self) -> int:
        return self.max_offset      # in memory, nothing is lost but by a simulated power loss

    def bytes(self) -> bytes:
        return bytes(self._data)


class SimLog(MemReplicaLog):
    """``durable``: every append is on disk when it returns (flush = "sync"); otherwise only what
    ``flush()`` covered survives ``power_loss()``. The EpochFile and truncations are always durable
    (the real store fsyncs both before it goes on)."""

    def __init__(self, durable: bool = True) -> None:
        super().__init__(0)
        self.torn_at: int | None = None   # a crash inside a write left bytes past here
        self.appends_since_start = 0
        self.durable = durable
        self.synced_to = 0

    def flush(self) -> None:
        self.synced_to = self.max_offset

    def sync_log(self) -> None:
        self.flush()

    def finish_log_sync(self, s: SimpleNamespace, error: BaseException | None) -> None:
        if error is not None:
            raise error
        self.synced_to = max(self.synced_to, min(s.target, self.max_offset))

    @property
    def synced_offset(self) -> int:
        return min(self.synced_to, self.max_offset)

    def append_raw(self, offset: int, data: bytes | memoryview, epoch: int, epoch_start: int) -> int:
        end = super().append_raw(offset, data, epoch, epoch_start)
        if self.durable:
            self.synced_to = end
        return end

    def truncate(self, offset: int, last_common_epoch: int | None = None) -> None:
        super().truncate(offset, last_common_epoch)
        self.synced_to = min(self.synced_to, self.max_offset)

    def reset(self, start_offset: int) -> None:
        super().reset(start_offset)
        self.synced_to = start_offset

    def power_loss(self) -> int:
        """The host lost its page cache: everything past the last flush is gone (epoch entries
        that start past the new end go with it, as the real store's recovery drops them).
        Returns the bytes lost."""
        keep = max(self.synced_to, self._start)
        lost = self.max_offset - keep
        if lost > 0:
            self.truncate(keep)
        return max(lost, 0)

    def _split(self, data: bytes, offset: int) -> list[bytes]:
        return [record(p) for _, p in walk(data, offset)]

    def _add(self, recs: list[tuple[int, bytes]]) -> None:
        self._push([record(p) for _, p in recs])

    # ------------------------------------------------------------------ broker side
    def append(self, payload: bytes) -> tuple[int, int]:
        start = self.max_offset
        self._add([(start, payload)])
        if self.durable:
            self.synced_to = self.max_offset
        return start, self.max_offset

    def bytes_between(self, lo: int, hi: int) -> bytes:
        return bytes(self._data[lo - self._start: hi - self._start])

    def records(self, upto: int | None = None) -> list[tuple[int, bytes]]:
        end = self.max_offset if upto is None else min(upto, self.max_offset)
        i = bisect.bisect_right(self._bounds, end) - 1
        return walk(bytes(self._data[: self._bounds[i] - self._start]), self._start)

    def has_record(self, offset: int, raw: bytes) -> bool:
        """Does the log hold exactly the record ``raw`` (header + payload) at ``offset``?"""
        i = offset - self._start
        return i >= 0 and self._data[i: i + len(raw)] == raw

    def payload_at(self, offset: int) -> bytes | None:
        i = bisect.bisect_left(self._bounds, offset)
        if i >= len(self._bounds) - 1 or self._bounds[i] != offset:
            return None
        raw = self._data[offset - self._start: self._bounds[i + 1] - self._start]
        return walk(bytes(raw), offset)[0][1]

    def crash_tear(self, rng: random.Random, last_write: int) -> None:
        """A crash during the last write of ``last_write`` bytes: keep a random prefix of them."""
        keep = rng.randint(0, last_write)
        cut = self.max_offset - last_write + keep
        del self._data[cut - self._start:]
        self._bounds = [b for b in self._bounds if b <= cut]
        self.torn_at = cut

    def recover(self) -> int:
        """Restart: cut a torn tail back to the last whole record (found by CRC walk). Returns bytes cut."""
        good = self._start
        i = 0
        data = bytes(self._data)
        while i < len(data):
            if i + _HDR.size > len(data):
                break
            n, crc = _HDR.unpack_from(data, i)
            if n > MAX_RECORD or i + _HDR.size + n > len(data) or zlib.crc32(data[i + 8: i + 8 + n]) != crc:
                break
            i += _HDR.size + n
            good = self._start + i
        cut = self.max_offset - good
        del self._data[good - self._start:]
        self._bounds = [b for b in self._bounds if b < good] + [good]
        self._bounds = sorted(set(self._bounds))
        self._epochs.truncate_suffix_from_offset(good)
        self.confirm_offset = min(self.confirm_offset, good)
        self.synced_to = min(self.synced_to, good)
        self.torn_at = None
        return cut
