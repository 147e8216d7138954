"""AutoSwitchHA frame codec (sans-IO, like h11: bytes in -> frames out, frames -> bytes).

Layouts are RocketMQ's AutoSwitchHA ones, big-endian (docs/protocol.md):

  slave -> master handshake (16 B): i32 state=1, i16 isSyncFromLastFile, i16 isAsyncLearner, i64 slaveBrokerId
  master -> slave handshake:        i32 state=1, i32 bodySize, i64 masterMaxOffset, i32 lastEpoch,
                                    body = N x (i32 epoch, i64 startOffset)
  master -> slave transfer:         i32 state=2, i32 bodySize, i64 batchStartOffset, i32 epoch,
                                    i64 epochStartOffset, i64 confirmOffset, body = raw log bytes
  slave -> master ack (12 B):       i32 state=2, i64 slaveMaxOffset

Protocol version: the high byte of the i16 isSyncFromLastFile field (bit 0 is the flag, bits 1-7
are reserved and must be zero). Version 0 is the plain RocketMQ encoding; version 1 has the same
layout. Version 2 (a slave that says 2 gets it): the master's handshake body ends with an i64
masterMinOffset (the first offset its retention kept) after the N epoch entries, so bodySize =
N x 12 + 8; a slave whose whole log is older than the master's retained history resyncs from there
instead of failing with no consistent point. A later version may add fields only when both sides
said they speak it. Version 3 (a slave handshake that says 3): the 16 bytes are followed by an
i16 incarnationLength (0..64) and that many printable ASCII bytes, the slave process's incarnation,
so a master counts acks only from the process the controller registered for that brokerId (a cloned
data directory's second process is refused). A master knows the version from the first 16 bytes.
Version 4 (a slave handshake that says 4) adds the range-digest frames of ha/codec_v4.py.

The decoders are direction-specific: the master decodes only what a slave may send and the
other way round, so a confused peer is rejected by the first header it sends.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Generic, TypeVar

from autoswitch.ha.codec_v4 import (
    DIGEST_REPORT,
    DIGESTS,
    REPAIR,
    DigestReport,
    Digests,
    Repair,
    encode_digest_report,
    encode_digests,
    encode_repair,
    parse_digests,
    parse_repair,
    parse_report,
)
from autoswitch.ha.config import HARD_MAX_BODY_SIZE, HARD_MAX_EPOCH_ENTRIES
from autoswitch.ha.errors import FrameError

from autoswitch.base.limits import MAX_INCARNATION_LEN

READY, HANDSHAKE, TRANSFER, SUSPEND, SHUTDOWN = 0, 1, 2, 3, 4
STATE_NAMES = {READY: "READY", HANDSHAKE: "HANDSHAKE", TRANSFER: "TRANSFER",
               SUSPEND: "SUSPEND", SHUTDOWN: "SHUTDOWN"}

PROTOCOL_VERSION = 4
MAX_KNOWN_VERSION = 4
MIN_OFFSET_VERSION = 2          # the first version whose master handshake carries masterMinOffset
INCARNATION_VERSION = 3         # the first version whose slave handshake carries the incarnation
_I64 = struct.Struct(">q")

_STATE = struct.Struct(">i")
_STATE_SIZE = struct.Struct(">ii")        # every frame but the 12/16-byte slave ones starts so
_SLAVE_HS = struct.Struct(">ihhq")          # 16
_I16 = struct.Struct(">h")
_ACK = struct.Struct(">iq")                 # 12
_MASTER_HS = struct.Struct(">iiqi")         # 20
_EPOCH_ENTRY = struct.Struct(">iq")         # 12
_TRANSFER = struct.Struct(">iiqiqq")        # 36

SLAVE_HANDSHAKE_SIZE = _SLAVE_HS.size
ACK_SIZE = _ACK.size
MASTER_HANDSHAKE_HEADER_SIZE = _MASTER_HS.size
EPOCH_ENTRY_SIZE = _EPOCH_ENTRY.size
TRANSFER_HEADER_SIZE = _TRANSFER.size

_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class SlaveHandshake:
    broker_id: int
    sync_from_last_file: bool = False
    async_learner: bool = False
    version: int = PROTOCOL_VERSION
    incarnation: str = ""           # version 3: the slave process ("" = not stated)


@dataclass(frozen=True, slots=True)
class Ack:
    slave_max_offset: int


@dataclass(frozen=True, slots=True)
class MasterHandshake:
    master_max_offset: int
    last_epoch: int
    entries: tuple[tuple[int, int], ...]   # (epoch, startOffset), oldest first
    master_min_offset: int | None = None   # version 2: the first offset the master's retention kept


@dataclass(frozen=True, slots=True)
class Transfer:
    batch_start_offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int
    body: bytes | memoryview = b""     # a view into the decoder's buffer when it decodes zero-copy

    @property
    def is_heartbeat(self) -> bool:
        return not self.body


Frame = SlaveHandshake | Ack | MasterHandshake | Transfer | Digests | Repair | DigestReport
SlaveFrame = SlaveHandshake | Ack | DigestReport     # what a master receives
MasterFrame = MasterHandshake | Transfer | Digests | Repair     # what a slave receives
F = TypeVar("F", SlaveFrame, MasterFrame)
V = TypeVar("V")


# ----------------------------------------------------------------------------- encoding

def _check_i64(v: int, what: str) -> None:
    if not 0 <= v <= _I64_MAX:
        raise FrameError("offset_out_of_range", f"{what}={v} is not a non-negative i64")


def _check_i32(v: int, what: str) -> None:
    if not 0 <= v <= _I32_MAX:
        raise FrameError("value_out_of_range", f"{what}={v} is not a non-negative i32")


def encode_slave_handshake(f: SlaveHandshake) -> bytes:
    if not 0 <= f.version <= 127:
        raise FrameError("unsupported_version", f"version {f.version}")
    _check_i64(f.broker_id, "broker_id")
    flags1 = (f.version << 8) | int(bool(f.sync_from_last_file))
    head = _SLAVE_HS.pack(HANDSHAKE, flags1, int(bool(f.async_learner)), f.broker_id)
    if f.version < INCARNATION_VERSION:
        if f.incarnation:
            raise FrameError("unsupported_field", f"version {f.version} cannot carry an incarnation")
        return head
    inc = _check_incarnation(f.incarnation.encode("ascii", "replace"))
    return head + _I16.pack(len(inc)) + inc


def _check_incarnation(raw: bytes) -> bytes:
    if len(raw) > MAX_INCARNATION_LEN or not all(0x21 <= b <= 0x7E for b in raw):
        raise FrameError("bad_incarnation", f"incarnation of {len(raw)} bytes is not 0..{MAX_INCARNATION_LEN} "
                                            "printable ASCII characters")
    return raw


def encode_ack(f: Ack) -> bytes:
    _check_i64(f.slave_max_offset, "slave_max_offset")
    return _ACK.pack(TRANSFER, f.slave_max_offset)


def encode_master_handshake(f: MasterHandshake) -> bytes:
    _check_i64(f.master_max_offset, "master_max_offset")
    _check_i32(f.last_epoch, "last_epoch")
    if len(f.entries) > HARD_MAX_EPOCH_ENTRIES:
        raise FrameError("too_many_epoch_entries", f"{len(f.entries)} entries")
    extra = 0 if f.master_min_offset is None else _I64.size
    parts = [_MASTER_HS.pack(HANDSHAKE, len(f.entries) * EPOCH_ENTRY_SIZE + extra, f.master_max_offset, f.last_epoch)]
    for epoch, start in f.entries:
        _check_i32(epoch, "epoch")
        _check_i64(start, "start_offset")
        parts.append(_EPOCH_ENTRY.pack(epoch, start))
    if f.master_min_offset is not None:
        _check_i64(f.master_min_offset, "master_min_offset")
        parts.append(_I64.pack(f.master_min_offset))
    return b"".join(parts)


def encode_transfer_header(f: Transfer) -> bytes:
    """Header only, so a large body can go to the socket without being copied into one buffer."""
    if len(f.body) > HARD_MAX_BODY_SIZE:
        raise FrameError("body_too_large", f"body of {len(f.body)} bytes")
    _check_i64(f.batch_start_offset, "batch_start_offset")
    _check_i32(f.epoch, "epoch")
    _check_i64(f.epoch_start_offset, "epoch_start_offset")
    _check_i64(f.confirm_offset, "confirm_offset")
    return _TRANSFER.pack(TRANSFER, len(f.body), f.batch_start_offset, f.epoch,
                          f.epoch_start_offset, f.confirm_offset)


def encode(f: Frame) -> bytes:
    if isinstance(f, SlaveHandshake):
        return encode_slave_handshake(f)
    if isinstance(f, Ack):
        return encode_ack(f)
    if isinstance(f, MasterHandshake):
        return encode_master_handshake(f)
    if isinstance(f, Transfer):
        return encode_transfer_header(f) + bytes(f.body)
    if isinstance(f, Digests):
        return encode_digests(f)
    if isinstance(f, Repair):
        return encode_repair(f)
    if isinstance(f, DigestReport):
        return encode_digest_report(f)
    raise TypeError(f"not an HA frame: {type(f).__name__}")


# ----------------------------------------------------------------------------- decoding

class _Decoder(Generic[F]):
    """Accumulates bytes and yields whole frames; after a FrameError it stays broken.

    The buffer is allocated once and reused (read/write positions, compaction by memmove):
    a fresh multi-MiB allocation per frame costs more than the copy itself (page faults).
    """

    # The caller drains frames after every feed; this bounds what one feed may add on top of a frame.
    MAX_FEED = 16 * 1024 * 1024

    def __init__(self) -> None:
        self._mem = bytearray(64 * 1024)
        self._r = 0        # first unconsumed byte
        self._w = 0        # end of the received bytes
        self._error: FrameError | None = None
        self._max_buffer = self.MAX_FEED + 64

    @property
    def buffered(self) -> int:
        return self._w - self._r

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None:
            raise self._error
        n = len(data)
        if not n:
            return
        self._make_room(n)
        with memoryview(self._mem) as mv:
            mv[self._w : self._w + n] = data
        self._w += n

    def recv_buffer(self, size: int) -> memoryview:
        """Writable room for up to ``size`` bytes after the buffered ones, for
        ``socket.recv_into``: received bytes land where feed() would have copied them (one
        copy fewer per byte). Report the count with ``received(n)``; the view is only valid
        until then."""
        if self._error is not None:
            raise self._error
        have = self._w - self._r
        rest = self._frame_rest(have)
        if rest:
            # Stop at the end of the frame in progress: once it is handled the buffer is empty
            # and the next frame starts at its front, so no received byte is ever moved.
            size = min(size, rest)
        size = min(size, self._max_buffer - have)
        if size <= 0:
            self._fail(FrameError("buffer_overflow", f"{self._w - self._r} bytes buffered without a whole frame"))
        self._make_room(size)
        return memoryview(self._mem)[self._w : self._w + size]

    def received(self, n: int) -> None:
        assert 0 <= n <= len(self._mem) - self._w, n
        self._w += n

    def _make_room(self, n: int) -> None:
        have = self._w - self._r
        if have + n > self._max_buffer:
            self._fail(FrameError("buffer_overflow", f"{have + n} bytes buffered without a whole frame"))
        mem = self._mem
        if self._w + n > len(mem):
            if have + n <= len(mem):
                # Compact: move the unconsumed tail to the front (memoryview copies handle overlap).
                with memoryview(mem) as mv:
                    mv[0:have] = mv[self._r : self._w]
            else:
                grown = bytearray(max(2 * len(mem), have + n))
                grown[0:have] = memoryview(mem)[self._r : self._w]
                self._mem = grown
            self._r, self._w = 0, have

    def next_frame(self) -> F | None:
        """The next whole frame, or None when more bytes are needed."""
        if self._error is not None:
            raise self._error
        if self._w - self._r < 4:
            if self._r == self._w:
                self._r = self._w = 0
            return None
        try:
            return self._parse(self._mem, self._r, self._w - self._r)
        except FrameError as e:
            self._error = e
            self._r = self._w = 0
            raise

    def frames(self) -> list[F]:
        out: list[F] = []
        while (f := self.next_frame()) is not None:
            out.append(f)
        return out

    def _fail(self, err: FrameError) -> None:
        self._error = err
        self._r = self._w = 0
        raise err

    def _take(self, parsed: tuple[V, int] | None) -> V | None:
        """A frame parsed by a helper that reports its size (codec_v4): consume it."""
        if parsed is None:
            return None
        self._r += parsed[1]
        return parsed[0]

    def _parse(self, buf: bytearray, r: int, avail: int) -> F | None:  # pragma: no cover
        raise NotImplementedError

    def _frame_rest(self, have: int) -> int:
        """Bytes still missing from the frame being received, when its header tells (0: unknown)."""
        return 0


class MasterSideDecoder(_Decoder[SlaveFrame]):
    """Decodes what a master receives from a slave: SlaveHandshake and Ack."""

    def _parse(self, buf: bytearray, r: int, avail: int) -> SlaveFrame | None:
        (state,) = _STATE.unpack_from(buf, r)
        if state == HANDSHAKE:
            if avail < SLAVE_HANDSHAKE_SIZE:
                return None
            _, flags1, flags2, broker_id = _SLAVE_HS.unpack_from(buf, r)
            if flags1 < 0 or flags2 < 0 or flags1 & 0xFE or flags2 & ~1:
                raise FrameError("reserved_flag_bits", f"flags {flags1:#x}/{flags2:#x}")
            version = flags1 >> 8
            if version > MAX_KNOWN_VERSION:
                raise FrameError("unsupported_version", f"slave speaks version {version}; this master speaks "
                                 f"up to {MAX_KNOWN_VERSION} (docs/compatibility.md)")
            if broker_id <= 0:
                raise FrameError("bad_broker_id", f"slaveBrokerId {broker_id}")
            incarnation = ""
            size = SLAVE_HANDSHAKE_SIZE
            if version >= INCARNATION_VERSION:
                if avail < size + _I16.size:
                    return None
                (n,) = _I16.unpack_from(buf, r + size)
                if not 0 <= n <= MAX_INCARNATION_LEN:
                    raise FrameError("bad_incarnation", f"incarnationLength {n}")
                if avail < size + _I16.size + n:
                    return None
                raw = bytes(buf[r + size + _I16.size : r + size + _I16.size + n])
                incarnation = _check_incarnation(raw).decode("ascii")
                size += _I16.size + n
            self._r += size
            return SlaveHandshake(broker_id, bool(flags1 & 1), bool(flags2 & 1), version, incarnation)
        if state == TRANSFER:
            if avail < ACK_SIZE:
                return None
            _, off = _ACK.unpack_from(buf, r)
            self._r += ACK_SIZE
            if off < 0:
                raise FrameError("negative_offset", f"slaveMaxOffset {off}")
            return Ack(off)
        if state == DIGEST_REPORT:
            return self._take(parse_report(buf, r, avail))
        raise FrameError("bad_state", f"state code {state} from a slave")


class SlaveSideDecoder(_Decoder[MasterFrame]):
    """Decodes what a slave receives from its master: MasterHandshake and Transfer.

    ``zero_copy=True``: a Transfer body is a memoryview into the decoder's buffer, valid only
    until the next feed() (the slave adapter appends it to the log before reading more).
    """

    def __init__(self, max_body_size: int = 32 * 1024 * 1024, max_epoch_entries: int = 65536,
                 zero_copy: bool = False) -> None:
        super().__init__()
        if not 0 < max_body_size <= HARD_MAX_BODY_SIZE:
            raise ValueError("max_body_size")
        if not 0 < max_epoch_entries <= HARD_MAX_EPOCH_ENTRIES:
            raise ValueError("max_epoch_entries")
        self.max_body_size = max_body_size
        self.max_epoch_entries = max_epoch_entries
        self.zero_copy = zero_copy
        self._max_buffer = max(max_body_size, max_epoch_entries * EPOCH_ENTRY_SIZE) + self.MAX_FEED + 64

    def _parse(self, buf: bytearray, r: int, avail: int) -> MasterFrame | None:
        (state,) = _STATE.unpack_from(buf, r)
        if state == TRANSFER:
            return self._parse_transfer(buf, r, avail)
        if state == HANDSHAKE:
            return self._parse_handshake(buf, r, avail)
        if state == DIGESTS:
            return self._take(parse_digests(buf, r, avail))
        if state == REPAIR:
            return self._take(parse_repair(buf, r, avail))
        raise FrameError("bad_state", f"state code {state} from a master")

    def _parse_transfer(self, buf: bytearray, r: int, avail: int) -> MasterFrame | None:
        if avail < TRANSFER_HEADER_SIZE:
            # The size is known after 8 bytes: reject a hostile size before waiting for more.
            if avail >= 8:
                self._check_body_size(_STATE.unpack_from(buf, r + 4)[0])
            return None
        _, size, start, epoch, epoch_start, confirm = _TRANSFER.unpack_from(buf, r)
        self._check_body_size(size)
        if start < 0 or epoch_start < 0 or confirm < 0:
            raise FrameError("negative_offset", f"offsets start={start} epochStart={epoch_start} confirm={confirm}")
        if epoch < 0:
            raise FrameError("negative_epoch", f"epoch {epoch}")
        if epoch_start > start:
            raise FrameError("epoch_start_after_batch", f"epochStartOffset {epoch_start} > batchStartOffset {start}")
        total = TRANSFER_HEADER_SIZE + size
        if avail < total:
            return None
        body: bytes | memoryview
        if self.zero_copy:
            body = memoryview(buf)[r + TRANSFER_HEADER_SIZE : r + total]
        else:
            with memoryview(buf) as mv:
                body = bytes(mv[r + TRANSFER_HEADER_SIZE : r + total])
        self._r += total
        return Transfer(start, epoch, epoch_start, confirm, body)

    def _frame_rest(self, have: int) -> int:
        if have < 8:
            return 0
        state, size = _STATE_SIZE.unpack_from(self._mem, self._r)
        if state == TRANSFER and 0 <= size <= self.max_body_size:
            return max(TRANSFER_HEADER_SIZE + int(size) - have, 0)
        return 0

    def _check_body_size(self, size: int) -> None:
        if size < 0:
            raise FrameError("negative_body_size", f"bodySize {size}")
        if size > self.max_body_size:
            raise FrameError("body_too_large", f"bodySize {size} > limit {self.max_body_size}")

    def _parse_handshake(self, buf: bytearray, r: int, avail: int) -> MasterFrame | None:
        if avail < 8:
            return None
        (size,) = _STATE.unpack_from(buf, r + 4)
        if size < 0:
            raise FrameError("negative_body_size", f"bodySize {size}")
        extra = size % EPOCH_ENTRY_SIZE
        if extra not in (0, _I64.size):
            raise FrameError("body_not_entry_multiple",
                             f"bodySize {size} is not a multiple of {EPOCH_ENTRY_SIZE} (+ 8 for masterMinOffset)")
        n = size // EPOCH_ENTRY_SIZE
        if n > self.max_epoch_entries:
            raise FrameError("too_many_epoch_entries", f"{n} entries > limit {self.max_epoch_entries}")
        total = MASTER_HANDSHAKE_HEADER_SIZE + size
        if avail < total:
            return None
        _, _, max_off, last_epoch = _MASTER_HS.unpack_from(buf, r)
        end = r + total - extra
        entries = tuple(_EPOCH_ENTRY.iter_unpack(bytes(buf[r + MASTER_HANDSHAKE_HEADER_SIZE : end])))
        min_off = _I64.unpack_from(buf, end)[0] if extra else None
        self._r += total
        if min_off is not None and not 0 <= min_off <= max_off:
            raise FrameError("bad_min_offset", f"masterMinOffset {min_off} outside [0, masterMaxOffset {max_off}]")
        if min_off is not None and entries and entries[0][1] < min_off:
            raise FrameError("bad_min_offset", f"first epoch entry starts at {entries[0][1]} < masterMinOffset {min_off}")
        if max_off < 0:
            raise FrameError("negative_offset", f"masterMaxOffset {max_off}")
        if last_epoch < 0:
            raise FrameError("negative_epoch", f"lastEpoch {last_epoch}")
        prev_epoch, prev_start = 0, 0
        for epoch, start in entries:
            if epoch <= prev_epoch or start < prev_start or start > max_off:
                raise FrameError("bad_epoch_entries",
                                 f"entry ({epoch},{start}) after ({prev_epoch},{prev_start}), max {max_off}")
            prev_epoch, prev_start = epoch, start
        if entries and entries[-1][0] != last_epoch:
            raise FrameError("last_epoch_mismatch", f"lastEpoch {last_epoch} != last entry {entries[-1][0]}")
        return MasterHandshake(max_off, last_epoch, entries, min_off)
