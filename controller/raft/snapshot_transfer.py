"""InstallSnapshot in chunks: the leader sends ``snapshot_chunk_bytes`` at a time (each with the
whole snapshot's size and CRC); the follower assembles them strictly in order, bounded by
``max_snapshot_bytes``, and hands over a snapshot only when the whole image matches its CRC."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from enum import Enum

from .messages import Message, Snapshot


class SnapshotSender:
    """Leader side: the chunk at an offset; the CRC is computed once per snapshot, not per chunk."""

    def __init__(self, chunk_bytes: int) -> None:
        self.chunk_bytes = chunk_bytes
        self._crc_of: tuple[Snapshot | None, int] = (None, 0)

    def chunk(self, snap: Snapshot, offset: int) -> tuple[int, bytes, bool, int]:
        """(offset, data, last chunk?, CRC of the whole snapshot)."""
        off = min(offset, len(snap.data))
        data = snap.data[off: off + self.chunk_bytes]
        if self._crc_of[0] is not snap:
            self._crc_of = (snap, zlib.crc32(snap.data))
        return off, data, off + len(data) >= len(snap.data), self._crc_of[1]


class Received(Enum):
    MORE = "more"                  # chunk taken; ask for the next one at ``offset``
    OUT_OF_ORDER = "out_of_order"  # not the chunk expected; ask again from ``offset``
    TOO_BIG = "too_big"            # over max_snapshot_bytes: dropped
    OVERRUN = "overrun"            # more bytes than announced: dropped
    CORRUPT = "corrupt"            # whole image fails its size or CRC: start over
    DONE = "done"                  # ``snapshot`` is complete and checked


@dataclass(slots=True)
class ChunkOutcome:
    kind: Received
    offset: int = 0
    snapshot: Snapshot | None = None


@dataclass(slots=True)
class _Assembly:
    index: int
    term: int
    total: int
    crc: int
    buf: bytearray


class SnapshotReceiver:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._in: _Assembly | None = None

    def reset(self) -> None:
        self._in = None

    def on_chunk(self, m: Message) -> ChunkOutcome:
        if m.snap_total > self.max_bytes:
            return ChunkOutcome(Received.TOO_BIG)
        if m.snap_offset == 0:
            self._in = _Assembly(m.snap_index, m.snap_term, m.snap_total, m.snap_crc, bytearray())
        a = self._in
        if a is None or a.index != m.snap_index or len(a.buf) != m.snap_offset:
            want = len(a.buf) if a is not None and a.index == m.snap_index else 0
            return ChunkOutcome(Received.OUT_OF_ORDER, want)
        a.buf += m.snap_data
        if len(a.buf) > a.total:
            self._in = None
            return ChunkOutcome(Received.OVERRUN, len(a.buf))
        if not m.snap_done:
            return ChunkOutcome(Received.MORE, len(a.buf))
        self._in = None
        data = bytes(a.buf)
        if len(data) != a.total or zlib.crc32(data) != a.crc:
            return ChunkOutcome(Received.CORRUPT, len(data))
        return ChunkOutcome(Received.DONE, len(data), Snapshot(a.index, a.term, data))
