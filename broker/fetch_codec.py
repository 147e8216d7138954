"""The fetch port's wire format, sans-IO: bytes in, frames out (docs/fetch-protocol.md).

Consumers that read a lot use a plain TCP (or TLS) connection instead of the gRPC Consume: the
broker writes the commit log's bytes straight to the socket, one frame per fetch, with no
protobuf message around them and no HTTP/2 flow control in Python (Kafka's fetch and
RocketMQ's pull over its remoting protocol do the same). ``make bench-fetch`` measured why: the
broker's CPU per message served fell from ~1.3 us (gRPC, record runs) to ~0.2 us.

Every frame is ``magic "AF" | version u8 | type u8 | length u32 | payload`` (big-endian). The
client speaks first: HELLO (an optional bearer token), then FETCH or PRODUCE frames, one answer
each, in order. Lengths are bounded before anything is buffered: a client frame's payload by
``MAX_CLIENT_PAYLOAD`` (a PRODUCE's by the broker's ``max_request_bytes``), a reply by what the
client allows (its own ``max_reply_bytes``).

PRODUCE carries a ProduceRequest and PRODUCED a ProduceReply (autoswitch/proto/broker.proto) as
their protobuf bytes: the producer skips gRPC's per-call HTTP/2 work (the cost of a
one-message request, issue 36) and the broker serves it with the gRPC Produce's own code, so
both ports answer alike.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.limits import MAX_TOPIC_BYTES

MAGIC = b"AF"
VERSION = 1
FRAME = struct.Struct(">2sBBI")          # magic, version, type, payload length
HELLO, READY, FETCH, RECORDS, ERROR, PRODUCE, PRODUCED = 1, 2, 3, 4, 5, 6, 7
TYPES = {HELLO, READY, FETCH, RECORDS, ERROR, PRODUCE, PRODUCED}
MAX_CLIENT_PAYLOAD = 8192                # a token or a topic name: never more
MAX_TOKEN_BYTES = 4096
MAX_TEXT_BYTES = 1024                    # error messages and addresses in replies
MAX_RUNS = 100_000

_FETCH = struct.Struct(">qIIIH")        # queue offset, max count, min count, max wait ms, topic length
_RECORDS = struct.Struct(">iqqIHH")     # status, confirmOffset, next queue offset, runs, error len, master len
_RUN = struct.Struct(">qI")             # phy offset, length
_ERROR = struct.Struct(">HH")           # code, message length


class FetchProtocolError(AutoswitchError):
    """A frame that breaks the format: the connection is closed after an ERROR frame."""

    code = "FETCH_PROTOCOL"


# Codes of ERROR frames (the connection closes after one).
ERR_PROTOCOL, ERR_DENIED, ERR_BUSY = 1, 2, 3


@dataclass(frozen=True)
class Frame:
    type: int
    payload: bytes


@dataclass(frozen=True)
class FetchRequest:
    topic: str
    queue_offset: int
    max_count: int
    min_count: int
    max_wait_ms: int


@dataclass(frozen=True)
class RecordsReply:
    """A FETCH's answer: ``status`` is the broker's reply status (autoswitch.proto broker
    ``Status``: 0 OK), ``runs`` the records exactly as the commit log stores them."""

    status: int
    confirm_offset: int
    next_queue_offset: int
    runs: list[tuple[int, bytes]]
    error_message: str = ""
    master_addr: str = ""


class FrameDecoder:
    """Feed bytes, get whole frames. ``max_payload`` bounds every frame before it is buffered;
    ``max_produce`` a PRODUCE frame's (0: PRODUCE frames are as small as the others)."""

    def __init__(self, max_payload: int, max_produce: int = 0) -> None:
        self.max_payload = max_payload
        self.max_produce = max(max_produce, max_payload)
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes received and not yet a whole frame (or not yet taken)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        out: list[Frame] = []
        while len(self._buf) >= FRAME.size:
            ftype, length = parse_header(self._buf, self.max_payload, self.max_produce)
            if len(self._buf) < FRAME.size + length:
                break
            out.append(Frame(ftype, bytes(self._buf[FRAME.size:FRAME.size + length])))
            del self._buf[:FRAME.size + length]
        return out


def parse_header(head: bytes | bytearray, max_payload: int, max_produce: int = 0) -> tuple[int, int]:
    """(type, payload length) of the frame header at the start of ``head``, checked; a PRODUCE
    frame may be as long as ``max_produce``."""
    magic, version, ftype, length = FRAME.unpack_from(head)
    if magic != MAGIC or version != VERSION:
        # a later version is named as such (docs/compatibility.md); anything else is not ours
        newer = " from a newer release" if magic == MAGIC and version > VERSION else ""
        raise FetchProtocolError(f"not a fetch frame{newer} (magic {bytes(magic)!r}, version {version}; "
                                 f"this release speaks version {VERSION})")
    if ftype not in TYPES:
        raise FetchProtocolError(f"unknown frame type {ftype}")
    limit = max(max_payload, max_produce) if ftype == PRODUCE else max_payload
    if length > limit:
        raise FetchProtocolError(f"frame of {length} bytes, more than {limit}")
    return ftype, length


def _frame(ftype: int, payload_len: int) -> bytes:
    return FRAME.pack(MAGIC, VERSION, ftype, payload_len)


def encode_hello(token: str = "") -> bytes:
    t = token.encode()
    if len(t) > MAX_TOKEN_BYTES:
        raise ValueError(f"token longer than {MAX_TOKEN_BYTES} bytes")
    return _frame(HELLO, len(t)) + t


def parse_hello(payload: bytes) -> str:
    if len(payload) > MAX_TOKEN_BYTES:
        raise FetchProtocolError(f"HELLO token longer than {MAX_TOKEN_BYTES} bytes")
    try:
        return payload.decode()
    except UnicodeDecodeError:
        raise FetchProtocolError("HELLO token is not UTF-8") from None


def encode_ready() -> bytes:
    return _frame(READY, 0)


def encode_fetch(req: FetchRequest) -> bytes:
    t = req.topic.encode()
    if not 1 <= len(t) <= MAX_TOPIC_BYTES:
        raise ValueError(f"topic must be 1..{MAX_TOPIC_BYTES} bytes")
    return _frame(FETCH, _FETCH.size + len(t)) + _FETCH.pack(req.queue_offset, req.max_count, req.min_count,
                                                            req.max_wait_ms, len(t)) + t


def parse_fetch(payload: bytes) -> FetchRequest:
    if len(payload) < _FETCH.size:
        raise FetchProtocolError("FETCH frame too short")
    q, max_count, min_count, wait, tl = _FETCH.unpack_from(payload)
    if not 1 <= tl <= MAX_TOPIC_BYTES or len(payload) != _FETCH.size + tl:
        raise FetchProtocolError("FETCH topic length does not match the frame")
    try:
        topic = payload[_FETCH.size:].decode()
    except UnicodeDecodeError:
        raise FetchProtocolError("FETCH topic is not UTF-8") from None
    return FetchRequest(topic, q, max_count, min_count, wait)


def encode_records(reply: RecordsReply) -> list[bytes]:
    """The RECORDS frame as buffers for ``writelines``: the runs are not copied."""
    err = reply.error_message.encode()[:MAX_TEXT_BYTES]
    master = reply.master_addr.encode()[:MAX_TEXT_BYTES]
    head = _RECORDS.pack(reply.status, reply.confirm_offset, reply.next_queue_offset, len(reply.runs),
                         len(err), len(master)) + err + master
    parts: list[bytes] = [b"", head]
    total = len(head)
    for phy, run in reply.runs:
        parts.append(_RUN.pack(phy, len(run)))
        parts.append(run)
        total += _RUN.size + len(run)
    parts[0] = _frame(RECORDS, total)
    return parts


def parse_records(payload: bytes) -> RecordsReply:
    if len(payload) < _RECORDS.size:
        raise FetchProtocolError("RECORDS frame too short")
    status, confirm, nxt, nruns, el, ml = _RECORDS.unpack_from(payload)
    if nruns > MAX_RUNS or el > MAX_TEXT_BYTES or ml > MAX_TEXT_BYTES:
        raise FetchProtocolError("RECORDS frame counts out of bounds")
    pos = _RECORDS.size
    texts = payload[pos:pos + el + ml]
    if len(texts) != el + ml:
        raise FetchProtocolError("RECORDS frame cut in its texts")
    pos += el + ml
    runs: list[tuple[int, bytes]] = []
    view = memoryview(payload)
    for _ in range(nruns):
        if pos + _RUN.size > len(payload):
            raise FetchProtocolError("RECORDS frame cut in a run header")
        phy, n = _RUN.unpack_from(payload, pos)
        pos += _RUN.size
        if pos + n > len(payload):
            raise FetchProtocolError("RECORDS run longer than its frame")
        runs.append((phy, bytes(view[pos:pos + n])))
        pos += n
    if pos != len(payload):
        raise FetchProtocolError("RECORDS frame has trailing bytes")
    return RecordsReply(status, confirm, nxt, runs, texts[:el].decode(errors="replace"),
                        texts[el:].decode(errors="replace"))


def encode_message(ftype: int, payload: bytes) -> bytes:
    """A PRODUCE or PRODUCED frame around its protobuf bytes."""
    assert ftype in (PRODUCE, PRODUCED)
    return _frame(ftype, len(payload)) + payload


def encode_error(code: int, message: str) -> bytes:
    m = message.encode()[:MAX_TEXT_BYTES]
    return _frame(ERROR, _ERROR.size + len(m)) + _ERROR.pack(code, len(m)) + m


def parse_error(payload: bytes) -> tuple[int, str]:
    if len(payload) < _ERROR.size:
        raise FetchProtocolError("ERROR frame too short")
    code, n = _ERROR.unpack_from(payload)
    return code, payload[_ERROR.size:_ERROR.size + n].decode(errors="replace")
