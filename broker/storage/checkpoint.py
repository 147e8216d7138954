"""The store checkpoint: what recovery may trust, written crash-safely.

Layout (big-endian)::

    magic 4s b"ASCK", version u16 (1), intent u8, reserved u8
    log_synced u64     every log byte below is fsynced (a record boundary)
    verify_from u64    record boundary <= log_synced where recovery starts verifying CRCs
    confirm u64        confirmOffset
    min_offset u64     first retained offset (retention / reset)
    intent_offset u64, intent_epoch i64 (-1 = none)   an unfinished truncate/reset
    topic_count u32
    topic_count x (name_len u8, name, min_queue_offset u64, next_queue_offset u64)
    crc32 u32 over every byte before it

Written with temp + fsync + rename + fsync(dir) (autoswitch.base.fsutil.write_atomic).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from autoswitch.broker.storage.store_errors import LogCorrupt

from autoswitch.base.crcfile import TRAILER, seal, sealed_body
from autoswitch.base.errors import too_new
from autoswitch.base.fsutil import write_atomic

MAGIC = b"ASCK"
VERSION = 1
INTENT_NONE = 0
INTENT_TRUNCATE = 1
INTENT_RESET = 2
MAX_TOPICS = 100_000
_HEAD = struct.Struct(">4sHBBQQQQQqI")
_TOPIC_TAIL = struct.Struct(">QQ")
_CRC = TRAILER
MAX_BYTES = _HEAD.size + MAX_TOPICS * (1 + 255 + _TOPIC_TAIL.size) + _CRC.size


@dataclass
class Checkpoint:
    log_synced: int = 0
    verify_from: int = 0
    confirm: int = 0
    min_offset: int = 0
    intent: int = INTENT_NONE
    intent_offset: int = 0
    intent_epoch: int | None = None
    # topic -> (min_queue_offset, next_queue_offset) of its synced consume index
    topics: dict[str, tuple[int, int]] = field(default_factory=dict)

    def check(self) -> None:
        assert self.min_offset <= self.verify_from <= self.log_synced, self
        assert self.intent in (INTENT_NONE, INTENT_TRUNCATE, INTENT_RESET), self.intent
        for mn, nx in self.topics.values():
            assert 0 <= mn <= nx, self


def encode(cp: Checkpoint) -> bytes:
    cp.check()
    if len(cp.topics) > MAX_TOPICS:
        raise ValueError(f"{len(cp.topics)} topics, limit {MAX_TOPICS}")
    parts = [
        _HEAD.pack(
            MAGIC, VERSION, cp.intent, 0, cp.log_synced, cp.verify_from, cp.confirm, cp.min_offset,
            cp.intent_offset, -1 if cp.intent_epoch is None else cp.intent_epoch, len(cp.topics),
        )
    ]
    for name in sorted(cp.topics):
        nb = name.encode()
        mn, nx = cp.topics[name]
        parts.append(bytes([len(nb)]) + nb + _TOPIC_TAIL.pack(mn, nx))
    return seal(b"".join(parts))


def decode(data: bytes, path: str = "<bytes>") -> Checkpoint:
    n = len(data)
    if n < _HEAD.size + _CRC.size or n > MAX_BYTES:
        raise LogCorrupt(f"checkpoint has impossible size {n}", path=path)
    if sealed_body(data) is None:
        raise LogCorrupt("checkpoint crc mismatch", path=path)
    (magic, version, intent, rsv, synced, vfrom, confirm, min_off, i_off, i_epoch, count) = _HEAD.unpack_from(data, 0)
    if magic == MAGIC and version > VERSION:
        raise too_new(f"checkpoint {path}", version, VERSION, path=path)
    if magic != MAGIC or version != VERSION or rsv != 0 or intent > INTENT_RESET or count > MAX_TOPICS:
        raise LogCorrupt("checkpoint header invalid", path=path)
    cp = Checkpoint(synced, vfrom, confirm, min_off, intent, i_off, None if i_epoch < 0 else i_epoch)
    pos = _HEAD.size
    end = n - _CRC.size
    try:
        for _ in range(count):
            ln = data[pos]
            name = data[pos + 1 : pos + 1 + ln].decode()
            pos += 1 + ln
            if pos + _TOPIC_TAIL.size > end:
                raise LogCorrupt("checkpoint topic table truncated", path=path)
            cp.topics[name] = _TOPIC_TAIL.unpack_from(data, pos)
            pos += _TOPIC_TAIL.size
        if pos != end:
            raise LogCorrupt("checkpoint has trailing bytes", path=path)
        cp.check()
    except (IndexError, UnicodeDecodeError, AssertionError, struct.error) as e:
        raise LogCorrupt(f"checkpoint body invalid ({e!r})", path=path) from e
    return cp


def load(path: Path) -> Checkpoint | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode(data, str(path))


def save(path: Path, cp: Checkpoint) -> None:
    write_atomic(path, encode(cp))
