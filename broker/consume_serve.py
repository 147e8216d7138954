"""Serving Consume: one owner for the checks, the long poll and the reads, whichever port asks.

The gRPC ``Consume`` (broker/service.py) and the fetch port (broker/fetch_server.py) both come
here: the same validation, the same "past the master's log end" answer, the same long poll
(long_poll.py), the same confirmOffset bound on what is served.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from autoswitch.broker.fetch_codec import FetchRequest, RecordsReply
from autoswitch.broker.replies import status_of
from autoswitch.broker.server import Broker

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.log import EventLogger, RateLimitedLog
from autoswitch.base.write_errors import BadRequest, WriteError
from autoswitch.proto import broker_pb2 as pb

T = TypeVar("T")


class _PastLogEnd(Exception):
    def __init__(self, end: int, message: str) -> None:
        super().__init__(message)
        self.end = end


class ConsumeService:
    def __init__(self, broker: Broker, log: EventLogger, floor: Callable[[str], int] | None = None) -> None:
        """``floor(topic)``: the first queue offset still served (a topic's own retention,
        broker/topic_registry.py); a read below it starts there."""
        self.b = broker
        self.log = log
        self._floor = floor
        self._out_of_range = RateLimitedLog(log, interval_s=60.0)

    def master_addr_hint(self) -> str:
        return self.b.master_addr or ""

    async def _admit(self, req: FetchRequest) -> tuple[int, int]:
        """Check the request and hold it for its long poll: (how many messages it may get, the
        queue offset to read from: the request's, or the topic's retention floor above it)."""
        b = self.b
        b.require_readable()
        if not req.topic or req.queue_offset < 0 or req.max_count < 0:
            raise BadRequest("consume needs a topic, queue_offset >= 0 and max_count >= 0")
        if req.min_count < 0 or req.max_wait_ms < 0:
            raise BadRequest("consume needs min_count >= 0 and max_wait_ms >= 0")
        count = min(req.max_count or b.cfg.max_consume_count, b.cfg.max_consume_count)
        end = b.store.max_queue_offset(req.topic)
        if req.queue_offset > end and b.role == "master":
            # Past the master's log end: only an unclean election takes back messages a
            # consumer already read (a clean one elects from the SyncStateSet, which holds
            # everything up to confirmOffset). Said, not served as "no new messages".
            self._out_of_range.warning(req.topic, "consume_offset_out_of_range", topic=req.topic,
                                       queueOffset=req.queue_offset, logEnd=end, epoch=b.master_epoch)
            raise _PastLogEnd(end, f"queue offset {req.queue_offset} of {req.topic!r} is past the log end "
                                   f"{end} (an unclean election lost messages)")
        start = req.queue_offset
        if self._floor is not None:
            start = max(start, min(self._floor(req.topic), end))
        if req.max_wait_ms and req.min_count:
            await self._long_poll(req, start, min(req.min_count, count))
            b.require_readable()
        return count, start

    async def _long_poll(self, req: FetchRequest, start: int, want: int) -> None:
        """Hold the Consume until ``want`` confirmed messages are there (long_poll.py), the wait
        runs out, or the role changes."""
        b = self.b
        role, epoch = b.role, b.master_epoch

        def ready() -> bool:
            return (b.role != role or b.master_epoch != epoch
                    or b.store.has_confirmed(req.topic, start, want, b.confirm_offset))

        await b.confirm_signal.wait_until(ready, min(req.max_wait_ms, b.cfg.max_consume_wait_ms) / 1000)

    async def _serve(self, req: FetchRequest,
                     read: Callable[[int, int, int], T]) -> tuple[int, int, T] | RecordsReply:
        """(confirmOffset, the start, ``read(start, count, confirmOffset)``) for an admitted
        request, or why not as a RecordsReply (the same failure answers on both ports)."""
        b = self.b
        try:
            count, start = await self._admit(req)
            confirm = b.confirm_offset
            return confirm, start, read(start, count, confirm)
        except _PastLogEnd as e:
            return RecordsReply(pb.OFFSET_OUT_OF_RANGE, 0, e.end, [], str(e))
        except WriteError as e:
            return RecordsReply(status_of(e), 0, 0, [], str(e), self.master_addr_hint())
        except AutoswitchError as e:
            self.log.error("consume_failed", code=e.code, error=str(e))
            return RecordsReply(pb.INTERNAL, 0, 0, [], f"{e.code}: {e}")

    async def records(self, req: FetchRequest) -> RecordsReply:
        """The stored-record-runs answer (record_runs.py), as both ports send it."""
        b = self.b
        out = await self._serve(req, lambda start, count, confirm: b.store.read_record_runs(
            req.topic, start, count, confirm, b.cfg.max_consume_bytes))
        if isinstance(out, RecordsReply):
            return out
        confirm, _start, served = out
        b.count_consumed(served.count, req.topic)
        return RecordsReply(pb.OK, confirm, served.next_q, served.runs)

    async def grpc_consume(self, request: pb.ConsumeRequest) -> pb.ConsumeReply:
        req = FetchRequest(request.topic, request.queue_offset, request.max_count, request.min_count,
                           request.max_wait_ms)
        if request.record_runs:
            r = await self.records(req)
            return pb.ConsumeReply(status=_status(r.status), confirm_offset=r.confirm_offset, next_queue_offset=r.next_queue_offset,
                                   error_message=r.error_message, master_addr=r.master_addr,
                                   runs=[pb.RecordRun(phy_offset=p, records=run) for p, run in r.runs])
        b = self.b
        out = await self._serve(req, lambda start, count, confirm: b.store.read_messages(
            request.topic, start, count, max_phy=confirm))
        if isinstance(out, RecordsReply):
            return pb.ConsumeReply(status=_status(out.status), next_queue_offset=out.next_queue_offset,
                                   error_message=out.error_message, master_addr=out.master_addr)
        confirm, start, stored = out
        reply = pb.ConsumeReply(status=pb.OK, confirm_offset=confirm)
        total = 0
        nxt = start
        for m in stored:
            body = bytes(m.body)
            if reply.messages and total + len(body) > b.cfg.max_consume_bytes:
                break
            total += len(body)
            reply.messages.append(
                pb.ConsumedMessage(
                    msg_id=m.msg_id, body=body, queue_offset=m.queue_offset, phy_offset=m.phy_offset,
                    born_ts_ms=m.born_ts_ms, topic=request.topic,
                )
            )
            nxt = m.queue_offset + 1
        reply.next_queue_offset = nxt
        b.count_consumed(len(reply.messages), request.topic)
        return reply


def _status(code: int) -> pb.Status:
    """A RecordsReply's status (an int off the FETCH wire codec) as the protobuf enum it is."""
    return cast(pb.Status, code)
