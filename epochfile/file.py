"""Crash-safe persistence of the epoch cache.

Layout (big-endian)::

    magic  4s  b"ASEP"
    version u16 (1)
    flags   u16 (0, reserved)
    count   u32
    count x (epoch u32, start_offset u64)
    crc32   u32 over every byte before it

Save writes a temp file, fsyncs it, renames it over the old one and fsyncs the
directory, so a crash leaves either the old or the new file. Load refuses
anything that does not check out (``EpochFileCorrupt`` naming the file): an
empty cache where there was history would make the slave guess its truncation.
"""

from __future__ import annotations

import struct
from pathlib import Path

from autoswitch.epochfile.cache import MAX_ENTRIES, EpochCache
from autoswitch.epochfile.errors import EpochFileCorrupt, EpochRuleError

from autoswitch.base.crcfile import TRAILER, seal, sealed_body
from autoswitch.base.errors import too_new
from autoswitch.base.fsutil import write_atomic
from autoswitch.base.log import get_logger

MAGIC = b"ASEP"
VERSION = 1
_HEADER = struct.Struct(">4sHHI")
_ENTRY = struct.Struct(">IQ")
_CRC = TRAILER
MAX_FILE_BYTES = _HEADER.size + MAX_ENTRIES * _ENTRY.size + _CRC.size

_log = get_logger("epochfile")


def encode(cache: EpochCache) -> bytes:
    entries = cache.entries()
    parts = [_HEADER.pack(MAGIC, VERSION, 0, len(entries))]
    parts.extend(_ENTRY.pack(e.epoch, e.start_offset) for e in entries)
    return seal(b"".join(parts))


def decode(data: bytes, path: str = "<bytes>") -> EpochCache:
    """Parse a whole file image; any defect raises EpochFileCorrupt."""
    n = len(data)
    if n < _HEADER.size + _CRC.size:
        raise EpochFileCorrupt(f"file too short ({n} bytes)", path)
    if n > MAX_FILE_BYTES:
        raise EpochFileCorrupt(f"file too large ({n} bytes)", path)
    magic, version, flags, count = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise EpochFileCorrupt(f"bad magic {magic!r}", path)
    if sealed_body(data) is None:
        raise EpochFileCorrupt("crc mismatch", path)
    if version > VERSION:
        raise too_new(f"EpochFile {path}", version, VERSION, path=path)
    if version != VERSION:
        raise EpochFileCorrupt(f"unsupported version {version}", path)
    if flags != 0:
        raise EpochFileCorrupt(f"unknown flags {flags:#x}", path)
    if count > MAX_ENTRIES or n != _HEADER.size + count * _ENTRY.size + _CRC.size:
        raise EpochFileCorrupt(f"entry count {count} does not match size {n}", path)
    cache = EpochCache()
    try:
        for epoch, start in _ENTRY.iter_unpack(memoryview(data)[_HEADER.size : n - _CRC.size]):
            cache.append(epoch, start)
    except EpochRuleError as e:
        raise EpochFileCorrupt(f"entries break the epoch rules ({e.message})", path) from e
    return cache


class EpochFile:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def load(self) -> EpochCache:
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return EpochCache()
        try:
            cache = decode(data, str(self.path))
        except EpochFileCorrupt as e:
            _log.error("epoch_file_corrupt", path=str(self.path), reason=e.message)
            raise
        return cache

    def save(self, cache: EpochCache) -> None:
        write_atomic(self.path, encode(cache))
        last = cache.last()
        _log.debug(
            "epoch_file_saved",
            path=str(self.path),
            entries=len(cache),
            last_epoch=last.epoch if last else None,
        )
