"""RocketMQ's remoting protocol, sans-IO: bytes in, commands out (docs/rocketmq.md "The wire").

Unmodified RocketMQ 5 brokers, mqadmin and clients speak it to a controller and a name server.
A frame is ``length i32 | header-length i32 | header | body`` (big-endian), where ``length``
counts everything after itself and the header-length word carries the serialize type in its top
byte (0 = JSON, 1 = ROCKETMQ binary). Both header types are read; replies are written in JSON,
as every Java process answers by default (a compatible server may always answer in JSON).

The header's ``extFields`` carry a request's custom header as strings keyed by the Java field
names; :func:`field` reads one by its declared type and raises :class:`RemotingError` (a typed
refusal, never a traceback) when it is missing or malformed. Bodies are fastjson text, which
writes ``Map<Long, ...>`` keys unquoted (``{0:"a"}``); :func:`loads_fastjson` reads that too.

A frame is bounded before anything is buffered (``MAX_FRAME_BYTES``, RocketMQ's own 16 MiB
default ``com.rocketmq.remoting.frameMaxLength``) and a header by ``MAX_HEADER_BYTES``.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

from autoswitch.base.errors import AutoswitchError

MAX_FRAME_BYTES = 16 * 1024 * 1024       # RocketMQ's frameMaxLength default
MAX_HEADER_BYTES = 64 * 1024             # a controller's or name server's header is a few hundred bytes
MAX_EXT_FIELDS = 256
MAX_REMARK_BYTES = 4096                  # a longer remark is cut when written

JSON_TYPE, ROCKETMQ_TYPE = 0, 1
FLAG_RESPONSE, FLAG_ONEWAY = 1, 2
LANGUAGE_PYTHON = "PYTHON"
# MQVersion ordinal of 5.2.0 (what a peer logs; nothing decides on it).
VERSION = 453

_LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
              "OMS", "RUST")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


class RemotingError(AutoswitchError):
    """A frame or a field that breaks the protocol. ``fatal``: the stream cannot be resynchronised
    (a bad length or header), so the connection is closed; otherwise only the request is refused."""

    code = "REMOTING_PROTOCOL"

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


@dataclass
class Command:
    """One RemotingCommand: a request (flag bit 0 clear) or a response (set)."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext: dict[str, str] = dc_field(default_factory=dict)
    body: bytes | None = None
    language: str = "JAVA"
    version: int = 0

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


def response_to(request: Command, code: int, remark: str | None = None, ext: dict[str, Any] | None = None,
                body: bytes | None = None) -> Command:
    """The answer to ``request``: its opaque, the response flag, fields written as Java's
    ``toString`` would (booleans "true"/"false"; None left out)."""
    return Command(code=code, opaque=request.opaque, flag=FLAG_RESPONSE, remark=remark,
                   ext=to_ext(ext or {}), body=body, language=LANGUAGE_PYTHON, version=VERSION)


def request(code: int, opaque: int, ext: dict[str, Any] | None = None, body: bytes | None = None, *,
            oneway: bool = False) -> Command:
    return Command(code=code, opaque=opaque, flag=FLAG_ONEWAY if oneway else 0, ext=to_ext(ext or {}),
                   body=body, language=LANGUAGE_PYTHON, version=VERSION)


def to_ext(values: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in values.items():
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


# ---- reading a request's custom header by declared type ----

def field(cmd: Command, name: str, kind: type, *, required: bool = True, default: Any = None) -> Any:
    """The extField ``name`` parsed as ``kind`` (str, int as Java Long, bool); a missing required
    field or a value that is not of its type raises RemotingError (answered, not fatal)."""
    raw = cmd.ext.get(name)
    if raw is None:
        if required:
            raise RemotingError(f"the request lacks {name}")
        return default
    if kind is str:
        return raw
    if kind is bool:
        # Java's Boolean.parseBoolean: "true" in any case is true, anything else false
        return raw.strip().lower() == "true"
    if kind is int:
        try:
            v = int(raw.strip())
        except ValueError:
            raise RemotingError(f"{name} is not a number: {raw[:40]!r}") from None
        if not _INT64[0] <= v <= _INT64[1]:
            raise RemotingError(f"{name} is out of range")
        return v
    raise TypeError(kind)


def int32_field(cmd: Command, name: str, *, required: bool = True, default: int | None = None) -> int | None:
    """A Java ``Integer`` field (epochs are ints on the broker side)."""
    v = field(cmd, name, int, required=required, default=default)
    if v is not None and not _INT32[0] <= v <= _INT32[1]:
        raise RemotingError(f"{name} is out of the 32-bit range")
    return v


# ---- bodies ----

# fastjson writes Map<Long, V> keys as bare integers: {0:"a",12:"b"}. Quote a bare integer that
# stands where a key does (after "{" or ","), outside strings. The scan is linear and bounded by
# the frame's size.
_BARE_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')


def loads_fastjson(body: bytes | None) -> Any:
    """A body as JSON, accepting fastjson's unquoted integer map keys. RemotingError if it is not."""
    if body is None:
        raise RemotingError("the request has no body")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise RemotingError("the body is not UTF-8") from None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return json.loads(_quote_bare_keys(text))
    except json.JSONDecodeError as e:
        raise RemotingError(f"the body is not JSON: {e.msg} at {e.pos}") from None


def _quote_bare_keys(text: str) -> str:
    out: list[str] = []
    i, n, start = 0, len(text), 0
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                out.append(text[start:i + 1])      # the string, as it is
                in_str = False
                start = i + 1
        elif c == '"':
            out.append(_BARE_KEY.sub(r'\1"\2"\3', text[start:i]))
            start = i
            in_str = True
        i += 1
    out.append(text[start:] if in_str else _BARE_KEY.sub(r'\1"\2"\3', text[start:]))
    return "".join(out)


def dumps(obj: Any) -> bytes:
    """A reply body: standard JSON (quoted keys decode into Java's Map<Long, ...> with Long keys)."""
    return json.dumps(obj, separators=(",", ":")).encode()


# ---- frames ----

_HDR = struct.Struct(">ii")
_BIN_FIXED = struct.Struct(">hbhii")      # code, language, version, opaque, flag


def encode(cmd: Command) -> bytes:
    """A frame with a JSON header."""
    head: dict[str, Any] = {"code": cmd.code, "language": cmd.language, "version": cmd.version,
                            "opaque": cmd.opaque, "flag": cmd.flag}
    if cmd.remark is not None:
        head["remark"] = cmd.remark[:MAX_REMARK_BYTES]
    if cmd.ext:
        head["extFields"] = cmd.ext
    head["serializeTypeCurrentRPC"] = "JSON"
    header = json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode()
    body = cmd.body or b""
    return _HDR.pack(4 + len(header) + len(body), (JSON_TYPE << 24) | len(header)) + header + body


def encode_binary(cmd: Command) -> bytes:
    """A frame with a ROCKETMQ (binary) header: what a client configured for it sends (tests)."""
    remark = (cmd.remark or "").encode()
    parts = [_BIN_FIXED.pack(cmd.code, _LANGUAGES.index(cmd.language) if cmd.language in _LANGUAGES else 7,
                             cmd.version, cmd.opaque, cmd.flag), struct.pack(">i", len(remark)), remark]
    ext = b"".join(struct.pack(">h", len(kb := k.encode())) + kb + struct.pack(">i", len(vb := v.encode())) + vb
                   for k, v in cmd.ext.items())
    parts += [struct.pack(">i", len(ext)), ext]
    header = b"".join(parts)
    body = cmd.body or b""
    return _HDR.pack(4 + len(header) + len(body), (ROCKETMQ_TYPE << 24) | len(header)) + header + body


class Decoder:
    """Feed bytes, take whole commands. A frame's length is checked before its bytes are kept."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[Command]:
        self._buf += data
        out: list[Command] = []
        while len(self._buf) >= 4:
            (length,) = struct.unpack_from(">i", self._buf, 0)
            if length < 4 or length > self.max_frame_bytes:
                raise RemotingError(f"a frame of {length} bytes (at most {self.max_frame_bytes})", fatal=True)
            if len(self._buf) < 4 + length:
                break
            frame = bytes(self._buf[4:4 + length])
            del self._buf[:4 + length]
            out.append(decode_frame(frame))
        return out


def decode_frame(frame: bytes) -> Command:
    """One frame without its length word."""
    (word,) = struct.unpack_from(">i", frame, 0)
    kind, hlen = (word >> 24) & 0xFF, word & 0xFFFFFF
    if hlen > MAX_HEADER_BYTES or 4 + hlen > len(frame):
        raise RemotingError(f"a header of {hlen} bytes in a frame of {len(frame)}", fatal=True)
    header, body = frame[4:4 + hlen], frame[4 + hlen:] or None
    if kind == JSON_TYPE:
        cmd = _json_header(header)
    elif kind == ROCKETMQ_TYPE:
        cmd = _binary_header(header)
    else:
        raise RemotingError(f"unknown serialize type {kind}", fatal=True)
    cmd.body = body
    return cmd


def _json_header(header: bytes) -> Command:
    try:
        h = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise RemotingError("the JSON header does not parse", fatal=True) from None
    if not isinstance(h, dict):
        raise RemotingError("the JSON header is not an object", fatal=True)
    code, opaque, flag, version = h.get("code"), h.get("opaque", 0), h.get("flag", 0), h.get("version", 0)
    for name, v, (lo, hi) in (("code", code, _INT32), ("opaque", opaque, _INT32), ("flag", flag, _INT32),
                              ("version", version, _INT32)):
        if type(v) is not int or not lo <= v <= hi:
            raise RemotingError(f"the header's {name} is not a 32-bit integer", fatal=True)
    remark = h.get("remark")
    ext = h.get("extFields") or {}
    if not isinstance(ext, dict) or len(ext) > MAX_EXT_FIELDS:
        raise RemotingError("extFields is not a small object", fatal=True)
    clean: dict[str, str] = {}
    for k, v in ext.items():
        if v is None:
            continue
        if not isinstance(v, (str, int, float, bool)):
            raise RemotingError(f"extFields[{k[:40]!r}] is not a scalar", fatal=True)
        clean[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    lang = h.get("language", "JAVA")
    assert isinstance(code, int)
    return Command(code=code, opaque=opaque, flag=flag, remark=remark if isinstance(remark, str) else None,
                   ext=clean, language=lang if isinstance(lang, str) else "OTHER", version=version)


def _binary_header(header: bytes) -> Command:
    try:
        code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(header, 0)
        pos = _BIN_FIXED.size
        (rlen,) = struct.unpack_from(">i", header, pos)
        pos += 4
        if rlen < 0 or pos + rlen > len(header):
            raise RemotingError("the remark overruns the header", fatal=True)
        remark = header[pos:pos + rlen].decode("utf-8") if rlen else None
        pos += rlen
        (elen,) = struct.unpack_from(">i", header, pos)
        pos += 4
        if elen < 0 or pos + elen > len(header):
            raise RemotingError("extFields overrun the header", fatal=True)
        end, ext = pos + elen, {}
        while pos < end:
            (klen,) = struct.unpack_from(">h", header, pos)
            pos += 2
            k = header[pos:pos + klen].decode("utf-8")
            pos += klen
            (vlen,) = struct.unpack_from(">i", header, pos)
            pos += 4
            if klen < 0 or vlen < 0 or pos + vlen > end:
                raise RemotingError("an extField overruns the header", fatal=True)
            ext[k] = header[pos:pos + vlen].decode("utf-8")
            pos += vlen
            if len(ext) > MAX_EXT_FIELDS:
                raise RemotingError("too many extFields", fatal=True)
    except (struct.error, UnicodeDecodeError):
        raise RemotingError("the binary header does not parse", fatal=True) from None
    language = _LANGUAGES[lang] if 0 <= lang < len(_LANGUAGES) else "OTHER"
    return Command(code=code, opaque=opaque, flag=flag, remark=remark, ext=ext, language=language, version=version)
