"""A consumer's connection to a broker's fetch port (broker/fetch_server.py, fetch_codec.py).

    async with FetchClient("127.0.0.1:10913") as f:
        reply = await f.fetch("orders", queue_offset, max_count=1000, min_count=500, max_wait_ms=100)
        for m in fetched_messages(reply):     # CRC-checked again here (end to end)
            ...

    async with FetchClient("127.0.0.1:10913") as p:
        out = await p.produce("orders", [b"one message"])    # a ProduceOutcome, as ProducerClient's

One call at a time per client (the port answers in order): a producer that sends one message per
request opens one client per concurrent sender. Every wait is bounded by ``timeout_s`` plus the
fetch's own ``max_wait_ms``; a reply larger than ``max_reply_bytes`` is a protocol error, never a
buffer that grows without bound.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator, Sequence

from autoswitch.broker import fetch_codec as fc
from autoswitch.broker.client.client import ProduceOutcome
from autoswitch.broker.config import parse_hostport
from autoswitch.broker.storage.record import StoredMessage
from autoswitch.broker.storage.record_runs import iter_run

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.tls import TLSConfig, client_ssl_context
from autoswitch.proto import broker_pb2 as pb


class FetchRefused(AutoswitchError):
    """The broker answered with an ERROR frame (denied, busy, a protocol error) and closed."""

    code = "FETCH_REFUSED"

    def __init__(self, message: str, fetch_error: int) -> None:
        super().__init__(message, fetch_error=fetch_error)
        self.fetch_error = fetch_error       # fetch_codec.ERR_*


class FetchClient:
    def __init__(self, addr: str, *, tls: TLSConfig | None = None, token: str = "", timeout_s: float = 30.0,
                 max_reply_bytes: int = 64 << 20) -> None:
        self.host, self.port = parse_hostport(addr, "fetch address")
        self.tls = tls or TLSConfig.off()
        self.token = token or self.tls.token    # as the gRPC clients present it
        self.timeout_s = timeout_s
        self.max_reply_bytes = max_reply_bytes
        self._r: asyncio.StreamReader | None = None
        self._w: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> FetchClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def connect(self) -> None:
        ssl = client_ssl_context(self.tls) if self.tls.dials_tls else None
        self._r, w = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=ssl, limit=1 << 20), self.timeout_s)
        self._w = w
        w.write(fc.encode_hello(self.token))
        await self._expect(fc.READY, self.timeout_s)

    async def close(self) -> None:
        if self._w is not None:
            self._w.close()
            self._r = self._w = None

    async def _expect(self, ftype: int, timeout_s: float) -> fc.Frame:
        assert self._r is not None

        try:
            # header, checked, then exactly the payload: a reply is read once, not re-buffered.
            # asyncio.timeout, not wait_for: no task per call (a one-message producer makes
            # thousands of calls a second)
            async with asyncio.timeout(timeout_s):
                got, length = fc.parse_header(await self._r.readexactly(fc.FRAME.size), self.max_reply_bytes)
                f = fc.Frame(got, await self._r.readexactly(length) if length else b"")
        except BaseException:
            await self.close()      # the stream is out of step now: a new fetch needs a new connection
            raise
        if f.type == fc.ERROR:
            code, msg = fc.parse_error(f.payload)
            await self.close()
            raise FetchRefused(msg, fetch_error=code)
        if f.type != ftype:
            await self.close()
            raise fc.FetchProtocolError(f"expected frame type {ftype}, got {f.type}")
        return f

    async def fetch(self, topic: str, queue_offset: int, max_count: int = 1000, min_count: int = 0,
                    max_wait_ms: int = 0) -> fc.RecordsReply:
        """One FETCH; reconnects first when the last one failed."""
        if self._w is None:
            await self.connect()
        assert self._w is not None
        self._w.write(fc.encode_fetch(fc.FetchRequest(topic, queue_offset, max_count, min_count, max_wait_ms)))
        f = await self._expect(fc.RECORDS, self.timeout_s + max_wait_ms / 1000)
        return fc.parse_records(f.payload)


    async def produce(self, topic: str, bodies: Sequence[bytes], msg_ids: Sequence[str] | None = None,
                      expect_master_epoch: int = 0) -> ProduceOutcome:
        """One PRODUCE (the gRPC Produce's request and answer over this port); reconnects first
        when the last call failed. ``expect_master_epoch``: as ``ProducerClient.produce``."""
        if self._w is None:
            await self.connect()
        assert self._w is not None
        ids = list(msg_ids) if msg_ids is not None else [uuid.uuid4().hex for _ in bodies]
        now = int(time.time() * 1000)
        req = pb.ProduceRequest(topic=topic, messages=[pb.ProduceMessage(body=b, msg_id=m, born_ts_ms=now)
                                                       for b, m in zip(bodies, ids, strict=True)],
                                expect_master_epoch=expect_master_epoch)
        self._w.write(fc.encode_message(fc.PRODUCE, req.SerializeToString()))
        f = await self._expect(fc.PRODUCED, self.timeout_s)
        reply = pb.ProduceReply()
        try:
            reply.ParseFromString(f.payload)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError
            await self.close()
            raise fc.FetchProtocolError("PRODUCED payload is not a ProduceReply") from None
        return ProduceOutcome.of(reply)


def fetched_messages(reply: fc.RecordsReply) -> Iterator[StoredMessage]:
    """The messages of a RECORDS reply, every record CRC-checked (LogCorrupt on a bad one)."""
    for phy, run in reply.runs:
        yield from iter_run(run, phy)
