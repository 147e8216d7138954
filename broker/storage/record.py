"""Commit-log record format: encode, validate, and walk raw bytes without per-record objects.

Layout (big-endian, 40-byte header)::

    0  u32 crc32      over bytes [4, total) -- the whole record minus this field
    4  u32 total_len  whole record, header included (>= 40; zero is invalid)
    8  u8  magic 0xA5, u8 version 1, u8 type (1 message, 2 padding), u8 flags (0)
    12 u32 epoch      MasterEpoch of the master that wrote it
    16 u64 queue_offset  per-topic consume-queue position (0 for padding)
    24 u64 born_ts_ms
    32 u8  topic_len, u8 msg_id_len, u16 reserved (0)
    36 u32 body_len
    40 topic, msg_id, body

A padding record (type 2, empty topic and msg id, zero body) fills a segment's end
when the next record does not fit; it is replicated like any record.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from typing import NamedTuple

from autoswitch.broker.storage.store_errors import BadMessage, LogCorrupt

from autoswitch.base.limits import MAX_MSG_ID_BYTES, MAX_TOPIC_BYTES

HEADER = struct.Struct(">IIBBBBIQQBBHI")
HEADER_SIZE = HEADER.size
assert HEADER_SIZE == 40
MAGIC = 0xA5
VERSION = 1
TYPE_MESSAGE = 1
TYPE_PADDING = 2
# Structural cap the reader enforces before trusting a length (the store's own cap,
# max_message_bytes, is tighter); keeps garbage lengths from driving huge reads.
HARD_MAX_RECORD = 256 * 1024 * 1024

_U32 = struct.Struct(">I")
_U32x2 = struct.Struct(">II")
_crc32 = zlib.crc32


class Message(NamedTuple):
    """A message to append. A NamedTuple for the reason ``StoredMessage`` is one: a producer's
    batch builds one per message on the master's event loop (0.30 us against 0.56 for the frozen
    dataclass it was)."""

    topic: str
    body: bytes
    msg_id: str
    born_ts_ms: int


class StoredMessage(NamedTuple):
    """A message as read back. A NamedTuple, not a frozen dataclass: built once per message on
    every read (store and consumers), it costs ~0.3 us instead of ~1.2 us (a consumer keeping up
    with 100k msg/s spent a tenth of a core on the dataclass __init__ alone)."""

    topic: str
    queue_offset: int
    phy_offset: int
    msg_id: str
    born_ts_ms: int
    body: bytes
    epoch: int
    size: int


@dataclass(frozen=True)
class RecordInfo:
    phy_offset: int
    size: int
    crc: int
    topic: str  # "" for padding
    queue_offset: int
    msg_id: str
    born_ts_ms: int
    epoch: int
    padding: bool = False


@dataclass(frozen=True)
class AppendResult:
    start_offset: int
    end_offset: int
    records: list[tuple[int, int, str]]  # (phy_offset, queue_offset, msg_id), input order


# check_record's reason for a whole record (its CRC holds) of a later record version: every
# version keeps the first 10 bytes (crc, total, magic, version), so an older reader can tell a
# newer record from a torn one and refuses instead of cutting it (docs/compatibility.md).
NEWER_RECORD = "record written by a newer release: version"


def newer_version(why: str | None) -> int | None:
    """The record version a walk stopped at, when it stopped at a newer release's record."""
    if why is None or not why.startswith(NEWER_RECORD):
        return None
    return int(why[len(NEWER_RECORD):])


def record_size(topic_b: bytes, msg_id_b: bytes, body_len: int) -> int:
    return HEADER_SIZE + len(topic_b) + len(msg_id_b) + body_len


def encode_message(
    topic_b: bytes, msg_id_b: bytes, body: bytes, queue_offset: int, born_ts_ms: int, epoch: int
) -> bytes:
    if not 1 <= len(topic_b) <= MAX_TOPIC_BYTES:
        raise BadMessage(f"topic must be 1..{MAX_TOPIC_BYTES} UTF-8 bytes, got {len(topic_b)}")
    if len(msg_id_b) > MAX_MSG_ID_BYTES:
        raise BadMessage(f"msg_id must be at most {MAX_MSG_ID_BYTES} UTF-8 bytes, got {len(msg_id_b)}")
    if not (0 <= born_ts_ms < 1 << 64) or not (0 <= queue_offset < 1 << 63) or not (0 <= epoch < 1 << 32):
        raise BadMessage("born_ts_ms / queue_offset / epoch out of range")
    total = HEADER_SIZE + len(topic_b) + len(msg_id_b) + len(body)
    tail = (
        HEADER.pack(
            0, total, MAGIC, VERSION, TYPE_MESSAGE, 0, epoch, queue_offset, born_ts_ms,
            len(topic_b), len(msg_id_b), 0, len(body),
        )[4:]
        + topic_b
        + msg_id_b
        + body
    )
    return _U32.pack(_crc32(tail)) + tail


def check_fields(topic_b: bytes, msg_id_b: bytes, queue_offset: int, born_ts_ms: int, epoch: int) -> None:
    if not 1 <= len(topic_b) <= MAX_TOPIC_BYTES:
        raise BadMessage(f"topic must be 1..{MAX_TOPIC_BYTES} UTF-8 bytes, got {len(topic_b)}")
    if len(msg_id_b) > MAX_MSG_ID_BYTES:
        raise BadMessage(f"msg_id must be at most {MAX_MSG_ID_BYTES} UTF-8 bytes, got {len(msg_id_b)}")
    if not (0 <= born_ts_ms < 1 << 64) or not (0 <= queue_offset < 1 << 63) or not (0 <= epoch < 1 << 32):
        raise BadMessage("born_ts_ms / queue_offset / epoch out of range")


def encode_padding(total: int, epoch: int) -> bytes:
    assert total >= HEADER_SIZE, total
    tail = HEADER.pack(0, total, MAGIC, VERSION, TYPE_PADDING, 0, epoch, 0, 0, 0, 0, 0, total - HEADER_SIZE)[4:]
    tail += bytes(total - HEADER_SIZE)
    return _U32.pack(_crc32(tail)) + tail


def check_record(buf, pos: int, end: int) -> str | None:
    """Why the record at ``pos`` (bounded by ``end``) is not whole and valid; None when it is."""
    if end - pos < HEADER_SIZE:
        return "short header"
    (crc, total, magic, version, rtype, flags, _epoch, _q, _ts, tl, ml, rsv, bl) = HEADER.unpack_from(buf, pos)
    if total < HEADER_SIZE or total > HARD_MAX_RECORD:
        return f"bad length {total}"
    if total > end - pos:
        return f"length {total} past end"
    if magic == MAGIC and version > VERSION and _crc32(memoryview(buf)[pos + 4 : pos + total]) == crc:
        return f"{NEWER_RECORD} {version}"
    if magic != MAGIC or version != VERSION:
        return "bad magic/version"
    if flags != 0 or rsv != 0:
        return "bad flags"
    if HEADER_SIZE + tl + ml + bl != total:
        return "lengths disagree"
    if rtype == TYPE_MESSAGE:
        if tl == 0:
            return "empty topic"
    elif rtype == TYPE_PADDING:
        if tl or ml:
            return "padding with topic"
    else:
        return f"bad type {rtype}"
    if _crc32(memoryview(buf)[pos + 4 : pos + total]) != crc:
        return "crc mismatch"
    return None


def walk(
    buf,
    pos: int,
    end: int,
    seg_end: int,
    base_phy: int,
    max_record: int = HARD_MAX_RECORD,
    collect: bool = False,
) -> tuple[int, str | None, dict[bytes, list] | None]:
    """Walk whole valid records in ``buf[pos:end]``; hot path of append_raw and recovery.

    ``seg_end`` is the segment end as a position in ``buf`` (a padding record must end
    exactly there; a message must leave 0 or >= HEADER_SIZE bytes so padding fits);
    ``base_phy`` is the log offset of ``buf[0]``. Returns (end of the last valid record,
    why the walk stopped or None at ``end``, per-topic index entries when ``collect``:
    topic bytes -> [first queue offset, [phy...], [size...]]). One unpack and one CRC per
    record; the only per-record allocations are the topic slice and two list appends.
    """
    mv = memoryview(buf)
    unpack = HEADER.unpack_from
    crc32 = _crc32
    topics: dict[bytes, list] | None = {} if collect else None
    while pos < end:
        if end - pos < HEADER_SIZE:
            return pos, "short header", topics
        (crc, total, magic, version, rtype, flags, _e, q, _t, tl, ml, rsv, bl) = unpack(mv, pos)
        nxt = pos + total
        if (
            total < HEADER_SIZE
            or nxt > end
            or magic != MAGIC
            or version != VERSION
            or flags
            or rsv
            or HEADER_SIZE + tl + ml + bl != total
            or crc32(mv[pos + 4 : nxt]) != crc
        ):
            return pos, check_record(buf, pos, end) or "invalid record", topics
        if rtype == TYPE_MESSAGE:
            if not tl or total > max_record:
                return pos, ("empty topic" if not tl else f"record of {total} bytes over the limit"), topics
            if 0 < seg_end - nxt < HEADER_SIZE:
                return pos, "no room left for segment padding", topics
            if topics is not None:
                tb = bytes(mv[pos + HEADER_SIZE : pos + HEADER_SIZE + tl])
                ent = topics.get(tb)
                if ent is None:
                    topics[tb] = [q, [base_phy + pos], [total]]
                elif q != ent[0] + len(ent[1]):
                    return pos, f"queue offset {q} out of sequence", topics
                else:
                    ent[1].append(base_phy + pos)
                    ent[2].append(total)
        elif rtype == TYPE_PADDING:
            if tl or ml or nxt != seg_end:
                return pos, "padding not ending at the segment end", topics
        else:
            return pos, f"bad type {rtype}", topics
        pos = nxt
    return pos, None, topics


def parse_record(buf, pos: int, end: int, phy_offset: int) -> tuple[RecordInfo, bytes]:
    """Decode one whole record (CRC-checked); LogCorrupt when it is not valid."""
    why = check_record(buf, pos, end)
    if why is not None:
        raise LogCorrupt(f"invalid record: {why}", offset=phy_offset)
    (crc, total, _m, _v, rtype, _f, epoch, q, ts, tl, ml, _r, bl) = HEADER.unpack_from(buf, pos)
    p = pos + HEADER_SIZE
    mv = memoryview(buf)
    try:
        topic = str(mv[p : p + tl], "utf-8")
        msg_id = str(mv[p + tl : p + tl + ml], "utf-8")
    except UnicodeDecodeError as e:
        raise LogCorrupt("record topic/msg_id is not UTF-8", offset=phy_offset) from e
    body = bytes(mv[p + tl + ml : pos + total])
    info = RecordInfo(phy_offset, total, crc, topic, q, msg_id, ts, epoch, rtype == TYPE_PADDING)
    return info, body


def record_info(buf, pos: int, phy_offset: int) -> RecordInfo:
    """Header fields of a record the caller already validated (no body copy, no CRC)."""
    (crc, total, _m, _v, rtype, _f, epoch, q, ts, tl, ml, _r, _bl) = HEADER.unpack_from(buf, pos)
    p = pos + HEADER_SIZE
    try:
        topic = bytes(buf[p : p + tl]).decode()
        msg_id = bytes(buf[p + tl : p + tl + ml]).decode()
    except UnicodeDecodeError as e:
        raise LogCorrupt("record topic/msg_id is not UTF-8", offset=phy_offset) from e
    return RecordInfo(phy_offset, total, crc, topic, q, msg_id, ts, epoch, rtype == TYPE_PADDING)


def peek_total(buf, pos: int) -> int:
    return _U32x2.unpack_from(buf, pos)[1]


# --- the C walker ------------------------------------------------------------------
import numpy as np  # noqa: E402

_HDR_DTYPE = np.dtype(
    [
        ("crc", ">u4"), ("total", ">u4"), ("magic", "u1"), ("version", "u1"), ("type", "u1"), ("flags", "u1"),
        ("epoch", ">u4"), ("q", ">u8"), ("ts", ">u8"), ("tl", "u1"), ("ml", "u1"), ("rsv", ">u2"), ("bl", ">u4"),
    ]
)
assert _HDR_DTYPE.itemsize == HEADER_SIZE
_AR40 = np.arange(HEADER_SIZE, dtype=np.int64)

# Optional C helper (native/fastrec.c, built as autoswitch._fastrec): every per-record rule and
# the CRC in one call (0.26 vs 0.48 us per 1 KiB record, CPU time, 2026-11-22). A stop before
# `end` re-runs `walk`, which finds the exact record and reason, so both always give the same
# answer (a fuzz property checks that). Without the build `walk` runs (tests exercise both).
# AUTOSWITCH_FASTREC=0 turns it off (benchmarks compare both in one run; a suspect build).
try:
    if os.environ.get("AUTOSWITCH_FASTREC", "1") == "0":
        raise ImportError("disabled by AUTOSWITCH_FASTREC=0")
    from autoswitch import _fastrec as native  # type: ignore[attr-defined]
except ImportError as _e:  # not built: pure Python, same results
    native = None
    from autoswitch.base.log import get_logger as _get_logger

    _get_logger("store.record").info("fastrec_unavailable", fallback="python", reason=str(_e))


def whole_prefix_end(buf, pos: int, end: int) -> int:
    """End of the chain of whole records (by length only, no CRC) in ``buf[pos:end]``; a
    length below the header size also stops it (the caller decides if that is corruption)."""
    if native is not None:
        return native.walk_len(buf, pos, end)
    peek = _U32x2.unpack_from
    p = pos
    while end - p >= HEADER_SIZE:
        total = peek(buf, p)[1]
        if total < HEADER_SIZE or total > end - p:
            break
        p += total
    return p


# Range digests (ha/digest.py): 64-bit FNV-1a over each record's first 8 bytes, its CRC32 (which
# covers every other byte of the record) and its length. A record with other content has another
# CRC; a flipped bit that leaves the stored CRC alone is found by the CRC check of the read.
FOLD_SEED = 0xCBF29CE484222325
_native_fold = getattr(native, "fold_records", None)    # None: not built, or a build older than it
_FNV_PRIME = 0x100000001B3
_M64 = (1 << 64) - 1


def fold_records(buf, pos: int, end: int, limit: int, h: int) -> tuple[int, int]:
    """Fold every whole record of ``buf[pos:end]`` that starts before ``limit`` into ``h``;
    returns (h, where it stopped). Lengths only, no CRC check (the reads that feed it check)."""
    if _native_fold is not None:
        return _native_fold(buf, pos, end, limit, h)
    peek = _U32x2.unpack_from
    p = pos
    while end - p >= HEADER_SIZE and p < limit:
        crc, total = peek(buf, p)
        if total < HEADER_SIZE or total > HARD_MAX_RECORD or total > end - p:
            break
        h = ((h ^ ((crc << 32) | total)) * _FNV_PRIME) & _M64
        p += total
    return h, p


def walk_fast(
    buf,
    pos: int,
    end: int,
    seg_end: int,
    base_phy: int,
    max_record: int = HARD_MAX_RECORD,
    collect: bool = False,
) -> tuple[int, str | None, dict[bytes, list] | None]:
    """Same contract and result as ``walk``, through the C helper when it is built (index entries
    then come as int64 arrays: ``topics_equal`` compares either form); ``walk`` otherwise. The one
    pure-Python walker is ``walk``: a vectorised numpy variant saved ~20 % of the pure-Python index
    collection, not worth a second implementation of every record rule beside the C one."""
    if native is not None:
        return _walk_native(buf, pos, end, seg_end, base_phy, max_record, collect)
    return walk(buf, pos, end, seg_end, base_phy, max_record, collect)


def topics_equal(a: dict[bytes, list] | None, b: dict[bytes, list] | None) -> bool:
    """Index entries collected by ``walk`` and ``walk_fast`` (lists or arrays) are the same."""
    if a is None or b is None:
        return a is b
    return a.keys() == b.keys() and all(
        int(a[k][0]) == int(b[k][0]) and list(map(int, a[k][1])) == list(map(int, b[k][1]))
        and list(map(int, a[k][2])) == list(map(int, b[k][2])) for k in a)


def _walk_native(buf, pos: int, end: int, seg_end: int, base_phy: int, max_record: int, collect: bool):
    """walk_fast with the C helper: every per-record rule in C; Python only builds the index
    entries (one dict entry when all messages share a topic, numpy grouping otherwise)."""
    assert native is not None
    mv = memoryview(buf)
    mraw, traw, p, uniform, q0 = native.walk_batch(mv, pos, end, seg_end, max_record)
    if p != end:
        if not collect:
            # Records before p passed every rule walk applies without collection (the queue
            # sequence is only checked when collecting): the reason is found from p on. This is
            # the common case of a read_raw buffer ending inside a record.
            return walk(buf, p, end, seg_end, base_phy, max_record, False)
        return walk(buf, pos, end, seg_end, base_phy, max_record, collect)
    if not collect:
        return end, None, None
    mo = np.frombuffer(mraw, dtype=np.int64)
    if len(mo) == 0:
        return end, None, {}
    mt = np.frombuffer(traw, dtype=np.int64)
    if uniform:
        k = int(mo[0])
        tl = mv[k + 32]
        name = bytes(mv[k + HEADER_SIZE : k + HEADER_SIZE + tl])
        return end, None, {name: [q0, mo + base_phy, mt]}
    u8 = np.frombuffer(mv, dtype=np.uint8)
    h = u8[mo[:, None] + _AR40].view(_HDR_DTYPE).reshape(len(mo))
    mtl = h["tl"].astype(np.int64)
    q = h["q"].astype(np.int64)
    width = int(mtl.max())
    tb = u8[np.minimum((mo + HEADER_SIZE)[:, None] + np.arange(width, dtype=np.int64), len(u8) - 1)]
    tb[np.arange(width)[None, :] >= mtl[:, None]] = 0
    keyed = np.concatenate([mtl.astype(np.uint8)[:, None], tb], axis=1)
    rows = np.ascontiguousarray(keyed).view(np.dtype((np.void, keyed.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    topics: dict[bytes, list] = {}
    for g in (np.flatnonzero(inverse == gi) for gi in np.argsort(first)):
        qs = q[g]
        if not (qs == qs[0] + np.arange(len(g))).all():
            return walk(buf, pos, end, seg_end, base_phy, max_record, collect)
        k = int(g[0])
        topics[bytes(tb[k, : int(mtl[k])])] = [int(qs[0]), mo[g] + base_phy, mt[g]]
    return end, None, topics
