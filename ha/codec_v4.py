"""The frames protocol version 4 adds to AutoSwitchHA: range digests (ha/digest.py).

Sent only on a connection whose slave handshake stated version 4 or more; layouts (big-endian,
docs/protocol.md):

  master -> slave digests (state 5):  i32 state=5, i32 bodySize, body = N x (i32 epoch, i64 start,
                                      i64 end, u64 digest), N <= 1024
  master -> slave repair (state 6):   i32 state=6, i32 epoch, i64 truncateTo            (16 B)
  slave -> master report (state 5):   i32 state=5, i32 verdict (0 verified, 1 mismatch), i32 epoch,
                                      i64 start, i64 end                                 (28 B)

ha/codec.py's decoders call the parsers here; each returns (frame, bytes consumed), or None
while bytes are missing, and raises FrameError on a frame no honest peer sends.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from autoswitch.ha.digest import MISMATCH, VERIFIED, RangeDigest, check_range
from autoswitch.ha.errors import FrameError, HAProtocolError

DIGEST_VERSION = 4              # the first version with range digests
DIGESTS, REPAIR = 5, 6          # master -> slave state codes
DIGEST_REPORT = 5               # slave -> master state code
MAX_DIGEST_ENTRIES = 1024

_HEAD = struct.Struct(">ii")
_ENTRY = struct.Struct(">iqqQ")      # 28
_REPAIR = struct.Struct(">iiq")      # 16
_REPORT = struct.Struct(">iiiqq")    # 28
_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Digests:
    entries: tuple[RangeDigest, ...]


@dataclass(frozen=True, slots=True)
class Repair:
    epoch: int
    offset: int      # truncate the log to here, then reconnect


@dataclass(frozen=True, slots=True)
class DigestReport:
    verdict: int     # digest.VERIFIED: every range of [start, end) matched; digest.MISMATCH: this range did not
    epoch: int
    start: int
    end: int


def _entry(r: RangeDigest) -> RangeDigest:
    try:
        check_range(r)
    except HAProtocolError as e:      # on the wire, a broken rule is a frame error
        raise FrameError("bad_digest_range", f"range {tuple(r)}") from e
    return r


def encode_digests(f: Digests) -> bytes:
    if len(f.entries) > MAX_DIGEST_ENTRIES:
        raise FrameError("too_many_digests", f"{len(f.entries)} ranges")
    return _HEAD.pack(DIGESTS, len(f.entries) * _ENTRY.size) + b"".join(_ENTRY.pack(*_entry(r)) for r in f.entries)


def encode_repair(f: Repair) -> bytes:
    if not 0 < f.epoch <= _I32_MAX or not 0 <= f.offset <= _I64_MAX:
        raise FrameError("bad_repair", f"repair to {f.offset} in epoch {f.epoch}")
    return _REPAIR.pack(REPAIR, f.epoch, f.offset)


def encode_digest_report(f: DigestReport) -> bytes:
    if f.verdict not in (VERIFIED, MISMATCH) or not 0 < f.epoch <= _I32_MAX or not 0 <= f.start < f.end <= _I64_MAX:
        raise FrameError("bad_digest_report", f"verdict {f.verdict} epoch {f.epoch} range [{f.start},{f.end})")
    return _REPORT.pack(DIGEST_REPORT, f.verdict, f.epoch, f.start, f.end)


def parse_digests(buf: bytearray, r: int, avail: int) -> tuple[Digests, int] | None:
    if avail < _HEAD.size:
        return None
    _, size = _HEAD.unpack_from(buf, r)
    if size < 0 or size % _ENTRY.size or size // _ENTRY.size > MAX_DIGEST_ENTRIES:
        raise FrameError("bad_digests_size", f"bodySize {size} is not 0..{MAX_DIGEST_ENTRIES} ranges")
    total = _HEAD.size + size
    if avail < total:
        return None
    body = bytes(buf[r + _HEAD.size : r + total])
    return Digests(tuple(_entry(RangeDigest(*e)) for e in _ENTRY.iter_unpack(body))), total


def parse_repair(buf: bytearray, r: int, avail: int) -> tuple[Repair, int] | None:
    if avail < _REPAIR.size:
        return None
    _, epoch, offset = _REPAIR.unpack_from(buf, r)
    if epoch <= 0 or offset < 0:
        raise FrameError("bad_repair", f"repair to {offset} in epoch {epoch}")
    return Repair(epoch, offset), _REPAIR.size


def parse_report(buf: bytearray, r: int, avail: int) -> tuple[DigestReport, int] | None:
    if avail < _REPORT.size:
        return None
    _, verdict, epoch, start, end = _REPORT.unpack_from(buf, r)
    if verdict not in (VERIFIED, MISMATCH) or epoch <= 0 or not 0 <= start < end:
        raise FrameError("bad_digest_report", f"verdict {verdict} epoch {epoch} range [{start},{end})")
    return DigestReport(verdict, epoch, start, end), _REPORT.size
