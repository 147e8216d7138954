"""On-disk record formats of the Raft log (segment frames), hard state and snapshots.

Segment frame (big-endian):

    u32 magic | u32 payload_len | u32 payload_crc32 | u32 header_crc32 (of the first 12 bytes)
    magic 'RFT1': payload = u32 count, then count x (u64 index, u64 term, u8 kind, u32 len, data)
    magic 'RFH1': payload = a hard state record (term, votedFor, commit), see encode_hard_state

One persisted batch (entries and/or hard state) is written with one write() and one fdatasync, so
an election's term/vote costs one sync like an append (etcd keeps HardState in its WAL too).

A frame is the unit of durability: it is written with one write() and then fsynced, so a crash
can tear only the last frame of the last segment. See ``scan_segment`` for how a torn tail is
told apart from corruption.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from autoswitch.base.crcfile import seal, sealed_body

from .errors import RaftStorageCorrupt
from .messages import Entry, EntryKind, HardState, Snapshot

FRAME_MAGIC = b"RFT1"
HS_FRAME_MAGIC = b"RFH1"
_MAGICS = (FRAME_MAGIC, HS_FRAME_MAGIC)
_HDR = struct.Struct(">4sIII")
HEADER_SIZE = _HDR.size
_ENTRY = struct.Struct(">QQBI")
_COUNT = struct.Struct(">I")
MAX_FRAME_PAYLOAD = 1 << 30

HS_MAGIC = b"RHS1"
_HS = struct.Struct(">4sQQH")
SNAP_MAGIC = b"RSN1"
_SNAP = struct.Struct(">4sQQQI")


def _frame(magic: bytes, payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME_PAYLOAD:
        raise ValueError(f"frame payload {len(payload)} > {MAX_FRAME_PAYLOAD}")
    head = struct.pack(">4sII", magic, len(payload), zlib.crc32(payload))
    return head + struct.pack(">I", zlib.crc32(head)) + payload


def encode_frame(entries: Iterable[Entry]) -> bytes:
    parts = []
    n = 0
    for e in entries:
        parts.append(_ENTRY.pack(e.index, e.term, int(e.kind), len(e.data)))
        parts.append(e.data)
        n += 1
    return _frame(FRAME_MAGIC, _COUNT.pack(n) + b"".join(parts))


def encode_hard_state_frame(hs: HardState) -> bytes:
    return _frame(HS_FRAME_MAGIC, encode_hard_state(hs))


def _header_ok(buf: bytes | memoryview, pos: int) -> int | None:
    """Payload length if a well-formed frame header starts at pos, else None."""
    if len(buf) - pos < HEADER_SIZE:
        return None
    magic, plen, _pcrc, hcrc = _HDR.unpack_from(buf, pos)
    if magic not in _MAGICS or plen > MAX_FRAME_PAYLOAD or zlib.crc32(bytes(buf[pos:pos + 12])) != hcrc:
        return None
    return plen


def _frame_ok(buf: bytes, pos: int) -> bool:
    plen = _header_ok(buf, pos)
    if plen is None or pos + HEADER_SIZE + plen > len(buf):
        return False
    _m, _l, pcrc, _h = _HDR.unpack_from(buf, pos)
    return zlib.crc32(buf[pos + HEADER_SIZE: pos + HEADER_SIZE + plen]) == pcrc


def decode_payload(payload: bytes, where: str, offset: int) -> list[Entry]:
    """Entries of a CRC-valid payload; any structural problem is corruption (the CRC matched)."""
    try:
        (n,) = _COUNT.unpack_from(payload, 0)
        pos = _COUNT.size
        out = []
        for _ in range(n):
            index, term, kind, ln = _ENTRY.unpack_from(payload, pos)
            pos += _ENTRY.size
            if pos + ln > len(payload):
                raise ValueError("entry data past payload end")
            out.append(Entry(index, term, payload[pos:pos + ln], EntryKind(kind)))
            pos += ln
        if pos != len(payload):
            raise ValueError("trailing bytes in payload")
    except (struct.error, ValueError) as exc:
        raise RaftStorageCorrupt(f"malformed raft log frame in {where} at offset {offset}: {exc}",
                                 path=where, offset=offset) from exc
    for a, b in zip(out, out[1:], strict=False):
        if b.index != a.index + 1 or b.term < a.term:
            raise RaftStorageCorrupt(f"non-contiguous entries in {where} at offset {offset}", path=where,
                                     offset=offset)
    return out


@dataclass
class SegmentScan:
    frames: list[tuple[int, list[Entry]]]   # (file offset, entries) of every good entries frame
    good_end: int                            # bytes to keep; < len(buf) means a torn tail was found
    torn: bool
    hard_states: list[tuple[int, HardState]] = field(default_factory=list)


def _next_magic(buf: bytes, start: int) -> int:
    hits = [i for i in (buf.find(m, start) for m in _MAGICS) if i != -1]
    return min(hits) if hits else -1


def scan_segment(buf: bytes, where: str, is_last: bool) -> SegmentScan:
    """Parse a segment. Raises RaftStorageCorrupt, naming file and offset, unless the damage is a
    torn tail: in the last segment, at the first bad frame, with no valid frame anywhere after it
    (fsync makes every earlier frame durable, so only the last unsynced write can be partial)."""
    out = SegmentScan([], 0, False)
    pos = 0
    while pos < len(buf):
        if _frame_ok(buf, pos):
            plen = _header_ok(buf, pos)
            assert plen is not None
            payload = buf[pos + HEADER_SIZE: pos + HEADER_SIZE + plen]
            if buf[pos:pos + 4] == HS_FRAME_MAGIC:
                out.hard_states.append((pos, decode_hard_state(payload, f"{where} at offset {pos}", where, pos)))
            else:
                out.frames.append((pos, decode_payload(payload, where, pos)))
            pos += HEADER_SIZE + plen
            continue
        if not is_last:
            raise RaftStorageCorrupt(f"corrupt raft log frame in {where} at offset {pos} (not the last segment)",
                                     path=where, offset=pos)
        nxt = _next_magic(buf, pos + 1)
        while nxt != -1:
            if _frame_ok(buf, nxt):
                raise RaftStorageCorrupt(
                    f"corrupt raft log frame in {where} at offset {pos}: valid data follows at {nxt}, "
                    "so this is not a torn write", path=where, offset=pos)
            nxt = _next_magic(buf, nxt + 1)
        out.good_end, out.torn = pos, True
        return out
    out.good_end = pos
    return out


def newest_hard_state(states: Iterable[HardState]) -> HardState:
    """Hard state only moves forward: higher term, then a vote cast, then a higher commit."""
    best = HardState()
    for hs in states:
        if (hs.term, hs.vote is not None, hs.commit) > (best.term, best.vote is not None, best.commit):
            best = hs
    return best


class LogReplay:
    """Rebuilds the log from frames in write order: a frame starting at or below the current end
    overwrites from there (a follower's replaced tail); a gap is corruption."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def add(self, frame: list[Entry], where: str, offset: int) -> None:
        if not frame:
            return
        ents = self.entries
        first = frame[0].index
        if ents and first <= ents[-1].index:
            if first <= ents[0].index:
                ents.clear()
            else:
                del ents[first - ents[0].index:]
        elif ents and first != ents[-1].index + 1:
            raise RaftStorageCorrupt(f"gap in raft log in {where} at offset {offset}: index {first} "
                                     f"after {ents[-1].index}", path=where, offset=offset)
        if ents and frame[0].term < ents[-1].term:
            raise RaftStorageCorrupt(f"raft log term goes backwards in {where} at offset {offset}",
                                     path=where, offset=offset)
        ents.extend(frame)


def read_log_bytes(buf: bytes) -> list[Entry]:
    """Whole-buffer reader used by the fuzzer: valid entries (torn tail dropped) or a typed error."""
    scan = scan_segment(buf, "<bytes>", is_last=True)
    replay = LogReplay()
    for off, ents in scan.frames:
        replay.add(ents, "<bytes>", off)
    return replay.entries


def encode_hard_state(hs: HardState) -> bytes:
    vote = (hs.vote or "").encode()
    if len(vote) > 1024:
        raise ValueError("node id too long")
    return seal(_HS.pack(HS_MAGIC, hs.term, hs.commit, len(vote)) + vote)


def decode_hard_state(buf: bytes, where: str, path: str | None = None, offset: int = 0) -> HardState:
    try:
        if len(buf) < _HS.size + 4 or sealed_body(buf) is None:
            raise ValueError("checksum mismatch or short file")
        magic, term, commit, vlen = _HS.unpack_from(buf, 0)
        if magic != HS_MAGIC or _HS.size + vlen + 4 != len(buf):
            raise ValueError("bad magic or length")
        vote = buf[_HS.size:_HS.size + vlen].decode() or None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise RaftStorageCorrupt(f"corrupt raft hard state {where}: {exc}", path=path or where,
                                 offset=offset) from exc
    return HardState(term, vote, commit)


def encode_snapshot(s: Snapshot) -> bytes:
    return _SNAP.pack(SNAP_MAGIC, s.index, s.term, len(s.data), zlib.crc32(s.data)) + s.data


def decode_snapshot(buf: bytes, where: str) -> Snapshot:
    if len(buf) < _SNAP.size:
        raise RaftStorageCorrupt(f"corrupt raft snapshot {where}: short file", path=where, offset=0)
    magic, index, term, ln, crc = _SNAP.unpack_from(buf, 0)
    data = buf[_SNAP.size:]
    if magic != SNAP_MAGIC or ln != len(data) or zlib.crc32(data) != crc:
        raise RaftStorageCorrupt(f"corrupt raft snapshot {where}: bad magic, length or CRC", path=where,
                                 offset=0)
    return Snapshot(index, term, data)
