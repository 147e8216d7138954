"""Python clients for BrokerService: producer, consumer, admin (asyncio + small sync wrappers).

Retries: only transport failures that say "not delivered or unknown" (gRPC UNAVAILABLE)
are retried, a bounded number of times with exponential backoff. A retried produce
keeps its msg_id, so a duplicate created by a retry can be told apart downstream.
Typed broker statuses (NOT_MASTER, FLUSH_SLAVE_TIMEOUT, ...) are returned to the caller,
never retried here: whether to retry them is the application's decision.

The producer ack log (one JSON line per ACKED message) is the contract with the data
pipeline; its field set is fixed:
{"msg_id", "group", "broker_id", "topic", "queue_offset", "phy_offset", "epoch", "ack_ts_ms"}.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from autoswitch.broker.storage.record import StoredMessage
from autoswitch.broker.storage.record_runs import iter_run

from autoswitch.base.backoff import Backoff
from autoswitch.base.errors import AutoswitchError, PermissionDenied
from autoswitch.base.log import get_logger
from autoswitch.base.tls import TLSConfig, grpc_channel, transport_problem
from autoswitch.base.version import VERSION
from autoswitch.proto import broker_pb2 as pb
from autoswitch.proto import broker_pb2_grpc as pbg

DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024
MAX_RETRIES_CEILING = 20

_log = get_logger("broker.client")


class BrokerUnavailable(AutoswitchError):
    code = "BROKER_UNAVAILABLE"


class BrokerStatusError(AutoswitchError):
    """A typed, non-OK status from the broker; ``code`` is the status name."""

    def __init__(self, status: int, message: str, **details: Any) -> None:
        super().__init__(message or pb.Status.Name(status), **details)
        self.status = status
        self.code = pb.Status.Name(status)


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        # A broker that was killed and restarted may be the next master: gRPC's default reconnect
        # backoff (1 s, growing) would hide it from a producer for seconds after a failover.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 500),
    ]


# What this client says it is (a broker lists it in `admin client-connections`): the library and
# its version, and which process (RocketMQ's clientId is ip@pid too). gRPC appends its own.
USER_AGENT = f"autoswitch-py/{VERSION} ({socket.gethostname()}@{os.getpid()})"


def status_name(status: int) -> str:
    return pb.Status.Name(status)


# Statuses after which the same messages may be sent again to the (possibly new) master.
RETRYABLE = frozenset({pb.NOT_MASTER, pb.FENCED, pb.FLUSH_SLAVE_TIMEOUT, pb.IN_SYNC_REPLICAS_NOT_ENOUGH})


@dataclass(frozen=True)
class ProduceOutcome:
    status: int                     # batch status (OK only if all OK)
    error_message: str
    master_addr: str
    group: str
    broker_id: int
    results: list[pb.ProduceResult]
    master_epoch: int = 0           # with NOT_MASTER / FENCED: the MasterEpoch the broker knows

    @classmethod
    def of(cls, reply: pb.ProduceReply) -> ProduceOutcome:
        return cls(status=reply.status, error_message=reply.error_message, master_addr=reply.master_addr,
                   group=reply.group, broker_id=reply.broker_id, results=list(reply.results),
                   master_epoch=reply.master_epoch)

    @property
    def ok(self) -> bool:
        return self.status == pb.OK

    def acked(self) -> list[pb.ProduceResult]:
        return [r for r in self.results if r.status == pb.OK]


class AckLog:
    """Append-only JSON lines; flushed per batch so a killed producer leaves whole lines."""

    def __init__(self, path: str | Path) -> None:
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - owned for the client's life

    def write(self, outcome: ProduceOutcome, topic: str, ack_ts_ms: int) -> None:
        lines = []
        for r in outcome.acked():
            lines.append(
                json.dumps(
                    {
                        "msg_id": r.msg_id,
                        "group": outcome.group,
                        "broker_id": outcome.broker_id,
                        "topic": topic,
                        "queue_offset": r.queue_offset,
                        "phy_offset": r.phy_offset,
                        "epoch": r.epoch,
                        "ack_ts_ms": ack_ts_ms,
                    },
                    separators=(",", ":"),
                )
            )
        if lines:
            self._f.write("\n".join(lines) + "\n")
            self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()


class _Base:
    def __init__(
        self,
        addr: str,
        *,
        timeout_s: float = 10.0,
        max_retries: int = 5,
        backoff_s: float = 0.05,
        max_backoff_s: float = 1.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        tls: TLSConfig | None = None,
    ) -> None:
        assert 0 <= max_retries <= MAX_RETRIES_CEILING
        self.addr = addr
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._tls = tls or TLSConfig.off()
        options: list[tuple[str, int | str]] = [*channel_options(max_message_bytes), ("grpc.primary_user_agent", USER_AGENT)]
        self._channel = grpc_channel(addr, self._tls, options=options)
        self._stub = pbg.BrokerServiceStub(self._channel)

    async def _call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        fn = getattr(self._stub, method)
        backoff = Backoff(self.backoff_s, self.max_backoff_s, jitter=False)
        for attempt in range(self.max_retries + 1):
            try:
                return await fn(request, timeout=timeout_s or self.timeout_s)
            except grpc.aio.AioRpcError as e:
                if e.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
                    raise PermissionDenied(f"{method} to {self.addr}: {e.details() or e.code().name}",
                                           addr=self.addr) from None
                if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                    raise BrokerUnavailable(f"{self.addr} answers, but not as a broker (the service there has no "
                                            f"{method}): is it a controller's or a name server's port? Give a "
                                            "broker's --listen address, or --namesrv and --group",
                                            addr=self.addr, grpc_code=e.code().name, attempts=attempt + 1) from None
                problem = transport_problem(e.details() or "", self._tls.enabled)
                if problem is not None and (problem[0] or attempt == self.max_retries):
                    raise BrokerUnavailable(f"{method} to {self.addr}: {problem[1]}", addr=self.addr,
                                            grpc_code=e.code().name, attempts=attempt + 1) from None
                if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == self.max_retries:
                    raise BrokerUnavailable(
                        f"{method} to {self.addr} failed: {e.code().name} {e.details()}",
                        addr=self.addr,
                        grpc_code=e.code().name,
                        attempts=attempt + 1,
                    ) from e
                delay = backoff.next()
                _log.debug("retry", method=method, addr=self.addr, attempt=attempt + 1, delay_s=delay)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self._channel.close()


class ProducerClient(_Base):
    def __init__(self, addr: str, *, ack_log: str | Path | None = None, **kw: Any) -> None:
        super().__init__(addr, **kw)
        self._ack_log = AckLog(ack_log) if ack_log else None

    async def produce(
        self,
        topic: str,
        bodies: Sequence[bytes],
        msg_ids: Sequence[str] | None = None,
        expect_master_epoch: int = 0,
    ) -> ProduceOutcome:
        """``expect_master_epoch``: this broker was named master of that MasterEpoch by a NOT_MASTER
        redirect (the broker may hold the call for its switch: proto ProduceRequest)."""
        if msg_ids is None:
            msg_ids = [uuid.uuid4().hex for _ in bodies]
        assert len(msg_ids) == len(bodies)
        now = int(time.time() * 1000)
        req = pb.ProduceRequest(
            topic=topic,
            messages=[pb.ProduceMessage(body=b, msg_id=m, born_ts_ms=now) for b, m in zip(bodies, msg_ids, strict=True)],
            expect_master_epoch=expect_master_epoch,
        )
        reply = await self._call("Produce", req)
        outcome = ProduceOutcome.of(reply)
        if self._ack_log is not None:
            self._ack_log.write(outcome, topic, int(time.time() * 1000))
        return outcome

    async def produce_or_raise(self, topic: str, bodies: Sequence[bytes]) -> ProduceOutcome:
        out = await self.produce(topic, bodies)
        if not out.ok:
            raise BrokerStatusError(out.status, out.error_message, master_addr=out.master_addr or None)
        return out

    async def close(self) -> None:
        if self._ack_log is not None:
            self._ack_log.close()
        await super().close()


class ConsumerClient(_Base):
    async def consume(self, topic: str, queue_offset: int, max_count: int = 100, record_runs: bool = False,
                      min_count: int = 0, max_wait_ms: int = 0) -> pb.ConsumeReply:
        """``record_runs``: the reply carries stored records (``runs``, read them with
        ``consumed_messages``), ~50x cheaper for the broker than one reply message per record.
        ``min_count``/``max_wait_ms``: long polling (the call's deadline grows by the wait)."""
        req = pb.ConsumeRequest(topic=topic, queue_offset=queue_offset, max_count=max_count,
                                record_runs=record_runs, min_count=min_count, max_wait_ms=max_wait_ms)
        return await self._call("Consume", req, timeout_s=self.timeout_s + max_wait_ms / 1000)

    async def commit_offset(self, consumer_group: str, topic: str, queue_offset: int,
                            operator_reset: bool = False) -> pb.CommitOffsetReply:
        """``operator_reset``: an operator's reset-offsets (admin only with authorization), recorded
        as such so the durability audit reports the move as the operator's decision."""
        return await self._call("CommitOffset", pb.CommitOffsetRequest(
            consumer_group=consumer_group, topic=topic, queue_offset=queue_offset, operator_reset=operator_reset))

    async def fetch_offset(self, consumer_group: str, topic: str) -> pb.FetchOffsetReply:
        return await self._call("FetchOffset", pb.FetchOffsetRequest(consumer_group=consumer_group, topic=topic))

    async def consumer_progress(self, consumer_group: str) -> pb.ConsumerProgressReply:
        return await self._call("ConsumerProgress", pb.ConsumerProgressRequest(consumer_group=consumer_group))

    async def list_clients(self) -> pb.ListClientsReply:
        return await self._call("ListClients", pb.ListClientsRequest())

    async def list_topics(self) -> pb.ListTopicsReply:
        return await self._call("ListTopics", pb.ListTopicsRequest())

    async def delete_consumer_group(self, consumer_group: str) -> pb.DeleteConsumerGroupReply:
        return await self._call("DeleteConsumerGroup", pb.DeleteConsumerGroupRequest(consumer_group=consumer_group))


def consumed_messages(reply: pb.ConsumeReply) -> Iterator[StoredMessage]:
    """The messages of a Consume reply in either form, CRC-checked again when they came as
    record runs (LogCorrupt on a bad one)."""
    if reply.runs:
        for run in reply.runs:
            yield from iter_run(run.records, run.phy_offset)
    else:
        for m in reply.messages:
            yield StoredMessage(m.topic, m.queue_offset, m.phy_offset, m.msg_id, m.born_ts_ms, m.body, 0, 0)


class AdminClient(_Base):
    async def update_topic(self, topic: str, max_message_bytes: int = 0,
                           retention_hours: float = 0.0) -> pb.TopicChangeReply:
        return await self._call("UpdateTopic", pb.UpdateTopicRequest(topic=topic, max_message_bytes=max_message_bytes,
                                                                     retention_hours=retention_hours))

    async def delete_topic(self, topic: str) -> pb.TopicChangeReply:
        return await self._call("DeleteTopic", pb.DeleteTopicRequest(topic=topic))

    async def get_config(self) -> pb.BrokerConfigReply:
        return await self._call("GetBrokerConfig", pb.GetBrokerConfigRequest())

    async def update_config(self, changes: dict[str, str]) -> pb.BrokerConfigReply:
        return await self._call("UpdateBrokerConfig", pb.UpdateBrokerConfigRequest(changes=changes))

    async def transfer_master(self, to_broker_id: int = 0, timeout_ms: int = 0,
                              reason: str = "") -> pb.TransferMasterReply:
        """Graceful handover on the master (broker/replicas/handover.py); the deadline covers the wait."""
        return await self._call("TransferMaster", pb.TransferMasterRequest(to_broker_id=to_broker_id,
                                                                            timeout_ms=timeout_ms, reason=reason),
                                timeout_s=self.timeout_s + (timeout_ms or 300_000) / 1000)

    async def get_broker_epoch(self) -> pb.GetBrokerEpochReply:
        return await self._call("GetBrokerEpoch", pb.GetBrokerEpochRequest())

    async def get_status(self) -> pb.GetStatusReply:
        return await self._call("GetStatus", pb.GetStatusRequest())

    async def switch_role(
        self,
        role: str,
        master_epoch: int,
        master_ha_addr: str = "",
        master_addr: str = "",
        sync_state_set: Sequence[int] = (),
        sync_state_set_epoch: int = 0,
        timeout_s: float = 30.0,
    ) -> pb.SwitchRoleReply:
        req = pb.SwitchRoleRequest(
            role=role,
            master_epoch=master_epoch,
            master_ha_addr=master_ha_addr,
            master_addr=master_addr,
            sync_state_set=list(sync_state_set),
            sync_state_set_epoch=sync_state_set_epoch,
        )
        return await self._call("SwitchRole", req, timeout_s=timeout_s)

    async def log_digest(self, from_offset: int = 0, to_offset: int = -1) -> pb.LogDigestReply:
        return await self._call(
            "LogDigest", pb.LogDigestRequest(from_offset=from_offset, to_offset=to_offset), timeout_s=60.0
        )


    async def log_ranges(self, from_offset: int = -1, to_offset: int = -1,
                         range_bytes: int = 4 * 1024 * 1024) -> pb.LogRangesReply:
        return await self._call("LogRanges", pb.LogRangesRequest(from_offset=from_offset, to_offset=to_offset,
                                                                 range_bytes=range_bytes), timeout_s=60.0)


class SyncClient:
    """Blocking wrapper: one private event loop, one async client. Not thread-safe."""

    def __init__(self, cls: type[_Base], addr: str, **kw: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._client = self._loop.run_until_complete(self._make(cls, addr, kw))

    @staticmethod
    async def _make(cls: type[_Base], addr: str, kw: dict[str, Any]) -> _Base:
        return cls(addr, **kw)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(attr(*args, **kwargs))

        return call

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.run_until_complete(self._client.close())
        self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def sync_producer(addr: str, **kw: Any) -> SyncClient:
    return SyncClient(ProducerClient, addr, **kw)


def sync_consumer(addr: str, **kw: Any) -> SyncClient:
    return SyncClient(ConsumerClient, addr, **kw)


def sync_admin(addr: str, **kw: Any) -> SyncClient:
    return SyncClient(AdminClient, addr, **kw)
