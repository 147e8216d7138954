"""Concurrent sends to one broker share requests ("natural batching").

An application with many senders (threads in RocketMQ's Java producer, tasks here) pays the
broker's per-request cost once per message when each send is its own request: on a 2-core
machine three brokers spent ~1 ms of CPU per one-message gRPC Produce (bench/RESULTS.md, issue
63), while a request of 100 messages costs about as much as one of one. ``ProduceCoalescer`` sits
in front of one broker connection: a send joins the pending list of its topic; a flush scheduled
with ``call_soon`` sends everything that joined in the same event-loop pass, and everything that
joined while ``max_inflight`` requests were out, as one request. A lone sender pays one loop
pass; concurrent senders share requests without any timer (no linger: nothing waits for company).
The controller client batches its calls the same way (controller/client.py ``_Batcher``).

Per-send semantics do not change:
- each send gets a ``ProduceOutcome`` with exactly its own results, in its own order (the broker
  answers one result per message in request order; a reply of any other length fails every send
  of that request as a transport error would);
- the request's status, master hint and MasterEpoch are every member's, as they would be had
  each sent alone to the same broker at the same moment;
- a refusal that is not retryable (a message too large, a bad request) may be one member's
  fault or the merged request's own (the broker's batch limits): each member is then sent again
  alone, so nobody is refused for another's message;
- a transport error fails every member of that request, each member's retry loop decides;
- a member cancelled before its request left is not sent; one cancelled later may still be
  written (at least once, as with any call given up on).
A send larger than a request's share limits (``max_messages``, ``max_bytes``) goes alone.
Messages of one send stay in one request and in order; sends are merged in arrival order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from autoswitch.broker.client.client import RETRYABLE, BrokerUnavailable, ProduceOutcome

from autoswitch.proto import broker_pb2 as pb


class Sender(Protocol):
    async def produce(self, topic: str, bodies: Sequence[bytes], msg_ids: Sequence[str] | None = None,
                      expect_master_epoch: int = 0) -> ProduceOutcome: ...

    async def close(self) -> None: ...


@dataclass
class _Send:
    bodies: Sequence[bytes]
    ids: Sequence[str]
    nbytes: int
    future: asyncio.Future[ProduceOutcome]


@dataclass
class _Lane:
    """The pending sends and in-flight requests of one (topic, expected MasterEpoch)."""
    pending: list[_Send] = field(default_factory=list)
    inflight: int = 0
    scheduled: bool = False


class ProduceCoalescer:
    """Wraps one broker connection (gRPC ``ProducerClient`` or the fetch port's producer); see the
    module doc. ``max_inflight`` = 1 also makes a connection that takes one call at a time (the
    fetch port's) safe for concurrent senders."""

    def __init__(self, inner: Sender, *, max_inflight: int, max_messages: int, max_bytes: int) -> None:
        assert max_inflight >= 1 and max_messages >= 1 and max_bytes >= 1
        self.inner = inner
        self.max_inflight = max_inflight
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._lanes: dict[tuple[str, int], _Lane] = {}
        self.requests = 0           # requests sent (a test and the benchmark read it)

    async def produce(self, topic: str, bodies: Sequence[bytes], msg_ids: Sequence[str] | None = None,
                      expect_master_epoch: int = 0) -> ProduceOutcome:
        assert msg_ids is not None and len(msg_ids) == len(bodies)
        nbytes = sum(len(b) for b in bodies)
        loop = asyncio.get_running_loop()
        key = (topic, expect_master_epoch)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        fut: asyncio.Future[ProduceOutcome] = loop.create_future()
        big = len(bodies) >= self.max_messages or nbytes >= self.max_bytes
        # A big send goes alone, but through the lane: a connection that takes one call at a time
        # (max_inflight 1) must never see two.
        lane.pending.append(_Send(bodies, msg_ids, nbytes if not big else self.max_bytes, fut))
        self._schedule(lane, key)
        return await fut

    def _schedule(self, lane: _Lane, key: tuple[str, int]) -> None:
        if not lane.scheduled and lane.inflight < self.max_inflight:
            lane.scheduled = True
            asyncio.get_running_loop().call_soon(self._flush, lane, key)

    def _flush(self, lane: _Lane, key: tuple[str, int]) -> None:
        lane.scheduled = False
        while lane.pending and lane.inflight < self.max_inflight:
            batch: list[_Send] = []
            n = size = 0
            while lane.pending:
                s = lane.pending[0]
                if s.future.done():             # the sender gave up before its request left
                    lane.pending.pop(0)
                    continue
                if batch and (n + len(s.ids) > self.max_messages or size + s.nbytes > self.max_bytes):
                    break
                batch.append(lane.pending.pop(0))
                n += len(s.ids)
                size += s.nbytes
            if not batch:
                break
            lane.inflight += 1
            asyncio.ensure_future(self._send(lane, key, batch))
        if not lane.pending and lane.inflight == 0:
            self._lanes.pop(key, None)

    async def _send(self, lane: _Lane, key: tuple[str, int], batch: list[_Send]) -> None:
        topic, epoch = key
        try:
            self.requests += 1
            try:
                if len(batch) == 1:
                    out = await self.inner.produce(topic, batch[0].bodies, batch[0].ids, expect_master_epoch=epoch)
                else:
                    out = await self.inner.produce(topic, [b for s in batch for b in s.bodies],
                                                   [i for s in batch for i in s.ids], expect_master_epoch=epoch)
            except BaseException as e:  # noqa: BLE001 - delivered to every sender of the request
                err = e if isinstance(e, Exception) else BrokerUnavailable(f"produce request ended: {e!r}")
                for s in batch:
                    if not s.future.done():
                        s.future.set_exception(err)
                return
            total = sum(len(s.ids) for s in batch)
            if len(out.results) != total and out.results:
                err = BrokerUnavailable(f"a produce reply with {len(out.results)} results for {total} messages")
                for s in batch:
                    if not s.future.done():
                        s.future.set_exception(err)
                return
            if len(batch) == 1:
                if not batch[0].future.done():
                    batch[0].future.set_result(out)
                return
            if any(r.status != pb.OK and r.status not in RETRYABLE for r in out.results) or (
                    not out.results and out.status not in RETRYABLE and out.status != pb.OK):
                # whose fault? each member alone finds out (one call at a time on this connection)
                for s in batch:
                    if s.future.done():
                        continue
                    try:
                        self.requests += 1
                        alone = await self.inner.produce(topic, s.bodies, s.ids, expect_master_epoch=epoch)
                    except BaseException as e:  # noqa: BLE001 - that member's transport error
                        if not s.future.done():
                            s.future.set_exception(e if isinstance(e, Exception) else BrokerUnavailable(repr(e)))
                        continue
                    if not s.future.done():
                        s.future.set_result(alone)
                return
            at = 0
            for s in batch:
                part = list(out.results[at: at + len(s.ids)])
                at += len(s.ids)
                if s.future.done():
                    continue
                every_ok = bool(part) and all(r.status == pb.OK for r in part)
                s.future.set_result(ProduceOutcome(
                    status=pb.OK if every_ok else out.status, error_message="" if every_ok else out.error_message,
                    master_addr=out.master_addr, group=out.group, broker_id=out.broker_id, results=part,
                    master_epoch=out.master_epoch))
        finally:
            lane.inflight -= 1
            if lane.pending:            # (a lane with requests out stays in _lanes)
                self._schedule(lane, key)
            elif lane.inflight == 0 and self._lanes.get(key) is lane:
                self._lanes.pop(key, None)

    async def close(self) -> None:
        await self.inner.close()
