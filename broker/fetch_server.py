"""The fetch port (``fetch_listen``): consumers read stored-record runs over plain TCP or TLS, and
producers send over it without gRPC's per-call cost.

One connection: HELLO (an optional bearer token), then FETCH frames answered in order by
RECORDS frames (broker/fetch_codec.py), each served by the same ConsumeService as the gRPC
Consume, and PRODUCE frames answered by PRODUCED, each served by the gRPC Produce's own handler.
Who may fetch or produce is the gRPC port's rule for ``Consume`` or ``Produce`` (broker/authz.py:
reader, producer), with the caller named by its TLS certificate or its HELLO token. A peer that breaks the format, is
denied, or has not said HELLO within ``HELLO_TIMEOUT_S`` gets one ERROR frame and is closed; at
most ``max_fetch_connections`` connections are served at once (the next ones get ERROR busy).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from ssl import SSLContext
from typing import Any, Protocol, cast

from autoswitch.broker import fetch_codec as fc
from autoswitch.broker.clients import ClientTable
from autoswitch.broker.consume_serve import ConsumeService

from autoswitch.base.auth import Denied, Guard, Principal
from autoswitch.base.log import EventLogger, RateLimitedLog
from autoswitch.base.tls import ssl_peer_identity
from autoswitch.base.waits import cancel_and_wait
from autoswitch.proto import broker_pb2 as pb

HELLO_TIMEOUT_S = 10.0
READ_CHUNK = 65536


class FetchObserver(Protocol):
    """What the fetch port reports (broker/metrics.py when ``metrics_listen`` is on)."""

    def fetched(self, status: int, nbytes: int, seconds: float) -> None: ...

    def refused(self, code: int) -> None: ...


# Under TLS a reply is written in slices of this many bytes, each drained: the stdlib and uvloop
# TLS transports hand all the ciphertext of one write to their socket transport at once, and that
# buffer is not in get_write_buffer_size() (issue 59, item 3: 120 readers that never read grew a
# TLS broker to 2.45 GB while the 64 MiB budget saw almost nothing). So a connection holds at most
# its counted buffer plus one slice, and the budget counts the slice too.
TLS_SLICE = 64 * 1024


async def write_bounded(writer: asyncio.StreamWriter, parts: list[bytes], tls: bool, timeout_s: float) -> None:
    """Write ``parts`` and wait until the transport took them (``timeout_s`` for all of it); under
    TLS in TLS_SLICE pieces, each drained, so the uncounted ciphertext stays within one slice."""
    async with asyncio.timeout(timeout_s):
        if not tls:
            writer.writelines(parts)
            await writer.drain()
            return
        for part in parts:
            view = memoryview(part)
            for i in range(0, len(view), TLS_SLICE):
                writer.write(view[i:i + TLS_SLICE])
                await writer.drain()


class FetchServer:
    def __init__(self, consume: ConsumeService, guard: Guard | None, max_connections: int, log: EventLogger,
                 hello_timeout_s: float = HELLO_TIMEOUT_S, observer: FetchObserver | None = None,
                 max_inflight_bytes: int = 64 << 20, slow_reader_timeout_s: float = 10.0,
                 max_reply_bytes: int = 8 << 20,
                 produce: Callable[[pb.ProduceRequest, Any], Awaitable[pb.ProduceReply]] | None = None,
                 max_produce_bytes: int = 0, max_per_identity: int = 0, clients: ClientTable | None = None) -> None:
        """``produce``: the gRPC Produce handler (as instrumented), serving PRODUCE frames of at most
        ``max_produce_bytes`` (None: PRODUCE is a protocol error). ``max_per_identity``: the most
        connections one identity holds (0: a quarter of ``max_connections``)."""
        self.max_per_identity = max_per_identity or max(1, max_connections // 4)
        self._per_identity: dict[str, int] = {}
        # accepted connections: those past their TLS handshake (connection_made, until connection_lost)
        # and those in it (by accept time; a failed handshake is dropped after the HELLO timeout)
        self._connected = 0
        self._handshaking: dict[int, float] = {}
        self._next_id = 0
        self.consume = consume
        self.produce = produce
        self.max_produce_bytes = max_produce_bytes if produce is not None else 0
        # Bytes of replies not yet taken by their readers, over all connections (issue 29: 120
        # connections that never read grew a broker to 2.5 GB): a FETCH is served only while its
        # largest possible reply fits, and a reader that leaves a reply unread for
        # slow_reader_timeout_s is closed, its buffer dropped.
        self.max_inflight_bytes = max_inflight_bytes
        self.slow_reader_timeout_s = slow_reader_timeout_s
        self.max_reply_bytes = max_reply_bytes
        self._writers: set[asyncio.StreamWriter] = set()
        self._tls: set[asyncio.StreamWriter] = set()        # the TLS ones among them
        # PRODUCE frames being received (up to max_produce_bytes each) share the same budget: a
        # connection past the small frames reads on only while every connection's partial frames
        # fit in max_inflight_bytes, so 256 connections cannot each park a 32 MiB frame half-sent.
        self._decoders: set[fc.FrameDecoder] = set()
        self.observer = observer
        self.clients = clients            # who is connected (broker/clients.py); None: not recorded
        self.hello_timeout_s = hello_timeout_s
        self.guard = guard
        self.max_connections = max_connections
        self.log = log
        self._refused = RateLimitedLog(log)
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task] = set()

    @property
    def connections(self) -> int:
        return len(self._conns)

    def inflight_bytes(self) -> int:
        """Replies written and not yet taken by their readers: each transport's buffer, and under
        TLS the one slice its socket transport may hold beyond it (``write_bounded``)."""
        return sum(w.transport.get_write_buffer_size() + (TLS_SLICE if w in self._tls else 0)
                   for w in self._writers if not w.transport.is_closing())

    async def _room(self) -> None:
        """Wait until the largest reply fits the budget (at most slow_reader_timeout_s: by then the
        readers that fill it are closed); BUSY otherwise. Nothing is held during a long poll."""
        deadline = time.monotonic() + self.slow_reader_timeout_s
        while self.inflight_bytes() + self.max_reply_bytes > self.max_inflight_bytes:
            if time.monotonic() >= deadline:
                raise _Refuse(fc.ERR_BUSY, f"more than {self.max_inflight_bytes} bytes of replies in flight")
            await asyncio.sleep(0.05)

    async def start(self, host: str, port: int, ssl: SSLContext | None) -> int:
        # Each connection counts from the moment it is accepted, before its TLS handshake (issue 59:
        # handshakes in progress were counted against nothing): the protocol is made at accept,
        # and kept in a weak set until its connection is gone. A handshake may take at most the
        # HELLO timeout; one over max_connections is closed as soon as it completes.
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._accepted_protocol, host, port, ssl=ssl,
                                                ssl_handshake_timeout=self.hello_timeout_s if ssl else None)
        return self._server.sockets[0].getsockname()[1]

    def _accepted_protocol(self) -> asyncio.StreamReaderProtocol:
        self._handshaking[self._next_id] = time.monotonic()
        protocol = _Counted(asyncio.StreamReader(limit=READ_CHUNK), self._on_client, self, self._next_id)
        self._next_id += 1
        return protocol

    @property
    def accepted(self) -> int:
        """Connections accepted and not gone: those served, and the TLS handshakes in progress (a
        handshake that failed is never reported to the protocol: it counts until its timeout)."""
        limit = time.monotonic() - self.hello_timeout_s - 1.0
        for k in [k for k, t in self._handshaking.items() if t < limit]:
            del self._handshaking[k]
        return self._connected + len(self._handshaking)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        await cancel_and_wait(list(self._conns))

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str(writer.get_extra_info("peername"))
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            if writer.get_extra_info("ssl_object") is not None:
                self._tls.add(writer)
            self._writers.add(writer)
            await self._serve(reader, writer)
        except fc.FetchProtocolError as e:          # the codec's, or a frame out of order
            await self._refuse(writer, peer, _Refuse(fc.ERR_PROTOCOL, e.message))
        except _Refuse as e:
            await self._refuse(writer, peer, e)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError, OSError):
            pass                                    # the consumer went away
        finally:
            self._conns.discard(task)
            self._writers.discard(writer)
            self._tls.discard(writer)
            writer.close()

    def _claim(self, key: str) -> None:
        """One slot of ``key``'s quota (the caller releases it): BUSY past max_per_identity."""
        n = self._per_identity.get(key, 0)
        if n >= self.max_per_identity:
            raise _Refuse(fc.ERR_BUSY, f"{key[:64]} holds {n} fetch connections (limit {self.max_per_identity} "
                                       f"per identity)")
        self._per_identity[key] = n + 1

    def _release(self, key: str) -> None:
        n = self._per_identity.get(key, 0) - 1
        if n > 0:
            self._per_identity[key] = n
        else:
            self._per_identity.pop(key, None)

    async def _refuse(self, writer: asyncio.StreamWriter, peer: str, e: _Refuse) -> None:
        """One ERROR frame, then the caller closes the connection."""
        self._refused.warning((_host(peer), e.code), "fetch_refused", peer=peer, code=e.code, reason=str(e))
        if self.observer is not None:
            self.observer.refused(e.code)
        with contextlib.suppress(Exception):
            writer.write(fc.encode_error(e.code, str(e)))
            await asyncio.wait_for(writer.drain(), 1.0)

    async def _intake_room(self, dec: fc.FrameDecoder) -> None:
        deadline = time.monotonic() + self.slow_reader_timeout_s
        while dec.buffered > fc.MAX_CLIENT_PAYLOAD and sum(d.buffered for d in self._decoders) > self.max_inflight_bytes:
            if time.monotonic() >= deadline:
                raise _Refuse(fc.ERR_BUSY, f"more than {self.max_inflight_bytes} bytes of requests being received")
            await asyncio.sleep(0.05)

    async def _frames(self, reader: asyncio.StreamReader, dec: fc.FrameDecoder) -> list[fc.Frame]:
        while True:
            await self._intake_room(dec)
            data = await reader.read(READ_CHUNK)
            if not data:
                raise ConnectionError("closed")
            frames = dec.feed(data)
            if frames:
                return frames

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dec = fc.FrameDecoder(fc.MAX_CLIENT_PAYLOAD, self.max_produce_bytes)
        self._decoders.add(dec)
        try:
            await self._serve_frames(reader, writer, dec)
        finally:
            self._decoders.discard(dec)

    async def _serve_frames(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            dec: fc.FrameDecoder) -> None:
        try:
            frames = await asyncio.wait_for(self._frames(reader, dec), self.hello_timeout_s)
        except TimeoutError:
            raise fc.FetchProtocolError(f"no HELLO within {self.hello_timeout_s:g} s") from None
        hello, rest = frames[0], frames[1:]
        if hello.type != fc.HELLO:
            raise fc.FetchProtocolError("the first frame must be HELLO")
        token = fc.parse_hello(hello.payload)
        who: Principal | None = None
        cn = ssl_peer_identity(writer.get_extra_info("ssl_object"))
        creds = [("authorization", f"Bearer {token}")] if token else None
        if self.guard is not None:
            who = self.guard.authn.principal(cn, creds)
            self._check_open(who)                   # a reader or producer at all, before anything is read
        if who is None:         # no authorization: nobody is named, no quota (docs/fetch-protocol.md)
            await self._serve_claimed(reader, writer, dec, rest, who, cn, creds, token)
            return
        self._claim(who.name)
        try:
            await self._serve_claimed(reader, writer, dec, rest, who, cn, creds, token)
        finally:
            self._release(who.name)

    async def _serve_claimed(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             dec: fc.FrameDecoder, rest: list[fc.Frame], who: Principal | None, cn: str | None,
                             creds: list[tuple[str, str]] | None, token: str) -> None:
        writer.write(fc.encode_ready())
        while True:
            for f in rest:
                if f.type == fc.PRODUCE and self.produce is not None:
                    if self.guard is not None and token:
                        who = self.guard.authn.principal(cn, creds)
                    await self._produce(f.payload, who, writer)
                    continue
                if f.type != fc.FETCH:
                    raise fc.FetchProtocolError(f"unexpected frame type {f.type} after HELLO")
                req = fc.parse_fetch(f.payload)
                self._seen(writer, "consume", req.topic)
                if self.guard is not None:
                    if token:       # looked up again: a token revoked since HELLO reads no more
                        who = self.guard.authn.principal(cn, creds)
                    self._check(who, req.topic)
                t0 = time.monotonic()
                await self._room()
                reply = await self.consume.records(req)
                if self.guard is not None and token and req.max_wait_ms:
                    who = self.guard.authn.principal(cn, creds)     # revoked during the long poll
                    self._check(who, req.topic)
                try:
                    await write_bounded(writer, fc.encode_records(reply), writer in self._tls,
                                        self.slow_reader_timeout_s)
                except TimeoutError:
                    self._refused.warning((_host(str(writer.get_extra_info("peername"))), "slow"),
                                          "fetch_slow_reader_closed", buffered=writer.transport.get_write_buffer_size(),
                                          timeout_s=self.slow_reader_timeout_s)
                    _reset(writer)                  # frees the buffered reply now, ours and the kernel's
                    return
                if self.observer is not None:
                    self.observer.fetched(reply.status, sum(len(run) for _, run in reply.runs), time.monotonic() - t0)
            rest = await self._frames(reader, dec)

    async def _produce(self, payload: bytes, who: Principal | None, writer: asyncio.StreamWriter) -> None:
        """One PRODUCE: the same checks and handler as the gRPC Produce, the answer in order."""
        assert self.produce is not None
        req = pb.ProduceRequest()
        try:
            req.ParseFromString(payload)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError: the frame is not a ProduceRequest
            raise fc.FetchProtocolError("PRODUCE payload is not a ProduceRequest") from None
        if self.guard is not None:
            try:
                self.guard.check(who, "Produce", req)
            except Denied as e:
                raise _Refuse(fc.ERR_DENIED, str(e)) from None
        self._seen(writer, "produce", req.topic)
        reply = await self.produce(req, None)
        try:
            await write_bounded(writer, [fc.encode_message(fc.PRODUCED, reply.SerializeToString())],
                                writer in self._tls, self.slow_reader_timeout_s)
        except TimeoutError:
            # a PRODUCE reply nobody reads no longer holds its connection (and its budget) for ever
            self._refused.warning((_host(str(writer.get_extra_info("peername"))), "slow"),
                                  "fetch_slow_reader_closed", buffered=writer.transport.get_write_buffer_size(),
                                  timeout_s=self.slow_reader_timeout_s, frame="PRODUCED")
            _reset(writer)
            raise ConnectionError("a PRODUCE reply was not read in time") from None

    def _seen(self, writer: asyncio.StreamWriter, kind: str, topic: str) -> None:
        if self.clients is not None:
            peer = writer.get_extra_info("peername")
            addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
            self.clients.seen(address=addr, agent="fetch-port", kind=kind, via="port",
                              now_ms=int(time.time() * 1000), topic=topic)

    def _check_open(self, who: Principal | None) -> None:
        assert self.guard is not None
        try:
            self.guard.check_open(who, "Consume")
        except Denied as e:
            if self.produce is None:
                raise _Refuse(fc.ERR_DENIED, str(e)) from None
            try:
                self.guard.check_open(who, "Produce")
            except Denied:
                raise _Refuse(fc.ERR_DENIED, str(e)) from None

    def _check(self, who: Principal | None, topic: str) -> None:
        assert self.guard is not None
        try:
            self.guard.check(who, "Consume", pb.ConsumeRequest(topic=topic))
        except Denied as e:
            raise _Refuse(fc.ERR_DENIED, str(e)) from None


def _host(peer: str) -> str:
    """"('127.0.0.1', 5555)" -> "('127.0.0.1'": refusals are logged per host, not per connection."""
    return peer.split(",", 1)[0]


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a reset: a plain close would leave the unsent reply queued in the kernel behind a
    FIN the reader never takes (an orphaned socket holding megabytes until the kernel gives up)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Counted(asyncio.StreamReaderProtocol):
    """A fetch connection's protocol, made at accept (before a TLS handshake): the server counts it
    from then, and closes it at once when, its handshake done, the connections are over the limit."""

    def __init__(self, reader: asyncio.StreamReader, cb: Any, server: FetchServer, key: int) -> None:
        super().__init__(reader, cb)
        self._srv = server
        self._key = key
        self._counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        srv = self._srv
        srv._handshaking.pop(self._key, None)
        if srv.accepted >= srv.max_connections:
            peer = str(transport.get_extra_info("peername"))
            srv._refused.warning((_host(peer), fc.ERR_BUSY), "fetch_refused", peer=peer, code=fc.ERR_BUSY,
                                 reason=f"more than {srv.max_connections} fetch connections (handshakes included)",
                                 served=srv._connected, handshaking=len(srv._handshaking))
            if srv.observer is not None:
                srv.observer.refused(fc.ERR_BUSY)
            t = cast(asyncio.Transport, transport)
            t.write(fc.encode_error(fc.ERR_BUSY, f"more than {srv.max_connections} fetch connections"))
            t.close()
            return
        srv._connected += 1
        self._counted = True
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._counted:
            self._counted = False
            self._srv._connected -= 1
            super().connection_lost(exc)


class _Refuse(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
