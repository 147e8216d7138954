"""Routing through the name server, the client's side: clients find the master (the broker's
side, its route registration, is autoswitch.broker.route_registrar).

``RoutedProducer`` / ``RoutedConsumer``: look the master up with
``LookupMaster(group)`` (the name server answers the master route with the HIGHEST MasterEpoch,
so a stale master that still re-registers cannot attract traffic). On NOT_MASTER / FENCED /
UNAVAILABLE (and the transient FLUSH_SLAVE_TIMEOUT / IN_SYNC_REPLICAS_NOT_ENOUGH) the client
refreshes the route and retries the NOT acknowledged messages with exponential backoff, bounded
by ``retry_deadline_s``. A message keeps its msg_id across retries, so a duplicate created by a
retry (e.g. FLUSH_SLAVE_TIMEOUT: the message stayed in the old master's log and was replicated)
can be told apart downstream.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from autoswitch.broker.client.client import (
    RETRYABLE,
    AckLog,
    BrokerUnavailable,
    ConsumerClient,
    ProduceOutcome,
    ProducerClient,
)
from autoswitch.broker.client.coalesce import ProduceCoalescer

from autoswitch.base.addr import split_hostport_list
from autoswitch.base.backoff import Backoff
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.limits import MAX_NAMESRVS
from autoswitch.base.log import get_logger
from autoswitch.base.tls import TLSConfig, grpc_channel
from autoswitch.proto import broker_pb2 as pb

if TYPE_CHECKING:
    from autoswitch.proto import namesrv_pb2

_log = get_logger("broker.route")
T = TypeVar("T")

NAMESRV_RPC_TIMEOUT_S = 2.0
MAX_CLIENTS = 16  # cached broker channels per routed client (a group has a handful of replicas)
# Concurrent sends one request may carry (coalesce.py): below a broker's default max_batch_messages
# (1000) and max_batch_bytes (32 MiB), so a merged request is never refused for its size there.
COALESCE_MAX_MESSAGES = 256
COALESCE_MAX_BYTES = 1 << 20
# gRPC requests one routed producer has out to one broker per topic: 2 keeps batched sends pipelined
# (4 x 100 messages: 66k vs 52k msg/s with 1) and one-message sends merged (the same rate with 1, 2, 4).
COALESCE_MAX_INFLIGHT = 2


class NoRoute(AutoswitchError):
    code = "NO_ROUTE"


class NotANameServer(AutoswitchError):
    """Every --namesrv address answers, but with another service (a broker's or controller's port)."""

    code = "NOT_A_NAME_SERVER"


class RetriesExhausted(AutoswitchError):
    code = "RETRIES_EXHAUSTED"


class ProduceRefused(AutoswitchError):
    """The master refused the messages for a reason sending them again cannot change (a deleted
    topic, a bad name, too large): the error's code is the broker's status (BAD_REQUEST,
    MESSAGE_TOO_LARGE, NOT_ALLOWED, ...), not a retry count nobody used (issue 64, item 7)."""

    code = "PRODUCE_REFUSED"

    def __init__(self, message: str, status: str, **details: object) -> None:
        super().__init__(message, status=status, **details)
        self.code = status


# --------------------------------------------------------------------------- client side

# After the first name server answers, the others get this long to answer too (the highest
# MasterEpoch among the answers wins): a cut-off name server costs a lookup this much, not the
# RPC timeout, and one that has not heard of a new master yet is outvoted by one that has.
NAMESRV_ANSWER_GRACE_S = 0.05


class NameServerClient:
    """Asks one or more name servers (``"h1:9876,h2:9876"``) at once; a master route is the one
    with the highest MasterEpoch among those that answer."""

    def __init__(self, addr: str | Sequence[str], tls: TLSConfig | None = None) -> None:
        from autoswitch.proto import namesrv_pb2_grpc as nsg

        self.addrs = split_hostport_list(addr if isinstance(addr, str) else list(addr), MAX_NAMESRVS)
        self.addr = ",".join(self.addrs)
        self._channels = [grpc_channel(a, tls or TLSConfig.off()) for a in self.addrs]
        self._stubs = [nsg.NameServerStub(ch) for ch in self._channels]

    async def _ask_all(self, call: Callable[[Any], Awaitable[T]]) -> tuple[list[T], list[str]]:
        """``call(stub)`` on every name server at once: (the answers that came, why the others did
        not). Returns once every server answered, or the grace after the first answer, or the
        RPC timeout."""
        tasks = {asyncio.ensure_future(call(stub)): addr for stub, addr in zip(self._stubs, self.addrs, strict=True)}
        answers: list[T] = []
        errors: list[str] = []
        wrong: list[str] = []
        clock = asyncio.get_running_loop().time
        deadline = clock() + NAMESRV_RPC_TIMEOUT_S
        pending = set(tasks)
        try:
            while pending and clock() < deadline:
                done, pending = await asyncio.wait(pending, timeout=deadline - clock(),
                                                   return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    e = t.exception()
                    if e is None:
                        if not answers:
                            deadline = min(deadline, clock() + NAMESRV_ANSWER_GRACE_S)
                        answers.append(t.result())
                    elif isinstance(e, grpc.aio.AioRpcError) and e.code() == grpc.StatusCode.UNIMPLEMENTED:
                        wrong.append(f"{tasks[t]} answers, but not as a name server: is it a broker's or a "
                                     "controller's port? (--namesrv takes the name servers' addresses)")
                        errors.append(wrong[-1])
                    elif isinstance(e, grpc.aio.AioRpcError):
                        errors.append(f"{tasks[t]}: {e.code().name} {e.details() or ''}".strip())
                    else:
                        raise e
        finally:
            for t in pending:
                t.cancel()
                errors.append(f"{tasks[t]}: no answer in time")
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        if len(wrong) == len(self.addrs):       # no retry will make them name servers
            raise NotANameServer("; ".join(wrong), addr=self.addr)
        return answers, errors

    async def lookup_master(self, group: str) -> str | None:
        """The master's address, or None when the name server knows none (failover in progress)."""
        route = await self.lookup_master_route(group)
        return route[0] if route else None

    async def lookup_master_route(self, group: str) -> tuple[str, int] | None:
        """(address, MasterEpoch) of the group's master route, or None."""
        route = await self.master_route(group)
        return (route.address, route.master_epoch) if route is not None else None

    async def master_route(self, group: str) -> namesrv_pb2.BrokerRoute | None:
        """The group's master route (namesrv_pb2.BrokerRoute) with the highest MasterEpoch any name
        server knows, or None when none knows one or none can be reached."""
        from autoswitch.proto import namesrv_pb2 as ns

        request = ns.LookupMasterRequest(broker_name=group)
        answers, errors = await self._ask_all(lambda stub: stub.LookupMaster(request, timeout=NAMESRV_RPC_TIMEOUT_S))
        if errors:
            _log.info("namesrv_unreachable", namesrv=self.addr, error="; ".join(errors)[:300])
        routes = [r.master for r in answers if r.header.code == 0 and r.master.address]
        return max(routes, key=lambda r: r.master_epoch) if routes else None

    async def _all_routes(self) -> list[namesrv_pb2.BrokerRoute]:
        """Every route of every name server that answers GetRoutes (BrokerUnavailable when none does)."""
        from autoswitch.proto import namesrv_pb2 as ns

        answers, errors = await self._ask_all(lambda stub: stub.GetRoutes(ns.GetRoutesRequest(),
                                                                          timeout=NAMESRV_RPC_TIMEOUT_S))
        if not answers:
            raise BrokerUnavailable(f"name server {'; '.join(errors)}", addr=self.addr)
        return [r for reply in answers for r in reply.routes]

    async def master_routes(self) -> list[tuple[str, str, int]]:
        """(group, master address, MasterEpoch) of every group with a master route (GetRoutes),
        the highest MasterEpoch per group among the name servers that answer."""
        best: dict[str, tuple[str, int]] = {}
        for r in await self._all_routes():
            if r.role == "master" and r.master_epoch >= best.get(r.broker_name, ("", -1))[1]:
                best[r.broker_name] = (r.address, r.master_epoch)
        return sorted((g, a, e) for g, (a, e) in best.items())

    async def broker_routes(self) -> list[tuple[str, int, str, str]]:
        """(group, brokerId, address, role) of every broker any name server that answers lists."""
        seen: dict[str, tuple[str, int, str, str]] = {}
        for r in await self._all_routes():
            seen.setdefault(r.address, (r.broker_name, r.broker_id, r.address, r.role))
        return sorted(seen.values())

    async def close(self) -> None:
        for ch in self._channels:
            await ch.close()


@dataclass
class RetryPolicy:
    backoff_min_s: float = 0.02
    # The new master's route is there within a few hundred ms of a failover; a longer step would
    # overshoot it by up to the step (0.5 s cost the gray-failure bench up to 0.4 s of ack gap).
    backoff_max_s: float = 0.2
    retry_deadline_s: float = 30.0  # give up on a batch after this long without an ack
    rpc_timeout_s: float = 5.0

    def validate(self) -> RetryPolicy:
        assert 0 < self.backoff_min_s <= self.backoff_max_s <= 60
        assert 0 < self.retry_deadline_s <= 3600 and 0 < self.rpc_timeout_s <= 600
        return self


async def retry_until(policy: RetryPolicy, what: str, attempt: Callable[[], Awaitable[tuple[T | None, str]]]) -> T:
    """Call ``attempt`` until it returns a result (else it says why not), backing off between
    tries per ``policy``; RetriesExhausted naming ``what`` and the last reason after the policy's
    ``retry_deadline_s``. The routed clients' one retry loop."""
    deadline = time.monotonic() + policy.retry_deadline_s
    backoff = Backoff(policy.backoff_min_s, policy.backoff_max_s, jitter=False)
    while True:
        result, why = await attempt()
        if result is not None:
            return result
        delay = backoff.next()
        if time.monotonic() + delay > deadline:
            raise RetriesExhausted(f"{what}: {why}")
        await asyncio.sleep(delay)


@dataclass
class _Stats:
    retries: int = 0
    route_refreshes: int = 0
    statuses: dict[str, int] = field(default_factory=dict)


class _Routed:
    def __init__(self, namesrv: str, group: str, policy: RetryPolicy | None = None,
                 tls: TLSConfig | None = None) -> None:
        self.tls = tls or TLSConfig.off()
        self.ns = NameServerClient(namesrv, self.tls)
        self.group = group
        self.policy = (policy or RetryPolicy()).validate()
        self.master: str | None = None
        # MasterEpoch of the route to self.master; None when it came from a NOT_MASTER hint.
        self.master_epoch: int | None = None
        self.expect_epoch = 0   # MasterEpoch self.master was named for (route or hint): a switching broker holds
        self.highest_epoch = 0            # highest MasterEpoch any route or ack showed so far
        self.stats = _Stats()
        self._clients: dict[str, Any] = {}

    def _make(self, addr: str) -> Any:
        raise NotImplementedError

    def _client(self, addr: str) -> Any:
        c = self._clients.get(addr)
        if c is None:
            if len(self._clients) >= MAX_CLIENTS:
                # Drop the oldest channel; closed in the background (no await in a sync helper).
                old_addr = next(iter(self._clients))
                old = self._clients.pop(old_addr)
                asyncio.get_running_loop().create_task(old.close())
            c = self._clients[addr] = self._make(addr)
        return c

    async def _refresh(self, hint: str | None = None, hint_epoch: int = 0) -> None:
        self.stats.route_refreshes += 1
        # The NOT_MASTER hint comes from a broker that knows a newer master; the name server may
        # still be one registration period behind.
        if hint:
            self.master, self.master_epoch, self.expect_epoch = hint, None, hint_epoch
            return
        route = await self.ns.lookup_master_route(self.group)
        self.master, self.master_epoch = route if route else (None, None)
        self.expect_epoch = self.master_epoch or 0
        if self.master_epoch is not None:
            self.highest_epoch = max(self.highest_epoch, self.master_epoch)

    def _ack_counts(self, r: pb.ProduceResult) -> bool:
        """An ack counts only from the MasterEpoch it was routed to (or, routed by a NOT_MASTER
        hint, from no epoch older than one already seen): a broker acking under another epoch is
        not the master this producer was sent to (a role switched behind the controller's back,
        a forged route), and its ack may be lost at the next failover."""
        if self.master_epoch is not None:
            return r.epoch == self.master_epoch
        return r.epoch >= self.highest_epoch

    def _note(self, status: str) -> None:
        self.stats.statuses[status] = self.stats.statuses.get(status, 0) + 1

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()
        await self.ns.close()


class RoutedProducer(_Routed):
    """Produce to the group's current master; survives failovers (see module doc)."""

    def __init__(self, namesrv: str, group: str, *, ack_log: str | Path | None = None,
                 policy: RetryPolicy | None = None, tls: TLSConfig | None = None, coalesce: bool = True) -> None:
        super().__init__(namesrv, group, policy, tls)
        self._ack_log = AckLog(ack_log) if ack_log else None
        self.last_ack_broker_id = 0       # the brokerId of the last ack (at self.master)
        # Concurrent produce() calls share requests (coalesce.py); off: one request per call.
        self.coalesce = coalesce

    def wrap_connection(self, inner: Any, max_inflight: int) -> ProduceCoalescer:
        """One broker connection as this producer sends over it (a subclass's _make wraps its own)."""
        if not self.coalesce:       # every call its own request, one at a time per connection
            return ProduceCoalescer(inner, max_inflight=max_inflight, max_messages=1, max_bytes=1)
        return ProduceCoalescer(inner, max_inflight=max_inflight, max_messages=COALESCE_MAX_MESSAGES,
                                max_bytes=COALESCE_MAX_BYTES)

    def _make(self, addr: str) -> ProduceCoalescer:
        # One transport attempt per call: retrying (with route refresh) is this class's job.
        inner = ProducerClient(addr, timeout_s=self.policy.rpc_timeout_s, max_retries=0, tls=self.tls)
        # gRPC multiplexes calls: without coalescing, every concurrent call goes out at once
        return self.wrap_connection(inner, COALESCE_MAX_INFLIGHT if self.coalesce else 1 << 30)

    @property
    def requests_sent(self) -> int:
        """Produce requests sent over the broker connections this producer holds now (fewer than
        produce() calls when concurrent calls shared them)."""
        return sum(c.requests for c in self._clients.values())

    async def produce(self, topic: str, bodies: Sequence[bytes],
                      msg_ids: Sequence[str] | None = None) -> list[pb.ProduceResult]:
        """Returns one OK result per message (in request order) or raises RetriesExhausted."""
        if msg_ids is None:
            msg_ids = [uuid.uuid4().hex for _ in bodies]
        assert len(msg_ids) == len(bodies)
        pending: dict[str, bytes] = dict(zip(msg_ids, bodies, strict=True))
        done: dict[str, pb.ProduceResult] = {}
        deadline = time.monotonic() + self.policy.retry_deadline_s
        backoff = Backoff(self.policy.backoff_min_s, self.policy.backoff_max_s)
        last = "no attempt"
        hint: str | None = None
        hint_epoch = 0
        redirected = False      # followed a NOT_MASTER redirect without waiting (once per call)
        while pending:
            if self.master is None or hint is not None:
                await self._refresh(hint, hint_epoch)
                hint = None
            if self.master is not None:
                ids = list(pending)
                out: ProduceOutcome | None
                try:
                    out = await self._client(self.master).produce(topic, [pending[i] for i in ids], ids,
                                                                  expect_master_epoch=self.expect_epoch)
                except BrokerUnavailable as e:
                    out = None
                    last = f"UNAVAILABLE {self.master}: {e}"
                    self._note("UNAVAILABLE")
                    self.master = None
                if out is not None:
                    acked = [r for r in out.acked() if self._ack_counts(r)]
                    foreign = len(out.acked()) - len(acked)
                    if foreign:
                        # The route may just be behind (the same master re-elected): look again
                        # before calling the acks foreign.
                        addr = self.master
                        await self._refresh()
                        if self.master == addr and self.master_epoch is not None:
                            acked = [r for r in out.acked() if self._ack_counts(r)]
                            foreign = len(out.acked()) - len(acked)
                        self.master = addr
                    if foreign:
                        # Written there, not acknowledged here: sent again to the routed master
                        # (at-least-once, as after any unacknowledged attempt).
                        self._note("EPOCH_MISMATCH")
                        _log.warning("ack_epoch_mismatch", group=self.group, broker=self.master,
                                     routed_epoch=self.master_epoch, ack_epoch=out.acked()[0].epoch,
                                     messages=foreign)
                    elif acked and self.master_epoch is None:
                        self.highest_epoch = max(self.highest_epoch, acked[0].epoch)
                    if acked:
                        self.last_ack_broker_id = out.broker_id
                    if acked and self._ack_log is not None:
                        self._ack_log.write(ProduceOutcome(pb.OK, "", "", out.group, out.broker_id, acked),
                                            topic, int(time.time() * 1000))
                    for r in acked:
                        done[r.msg_id] = r
                        pending.pop(r.msg_id, None)
                    if not pending:
                        break
                    name = pb.Status.Name(out.status)
                    self._note(name)
                    last = f"{name} from {self.master}: {out.error_message[:200]}"
                    bad = [r for r in out.results if r.status != pb.OK and r.status not in RETRYABLE]
                    if bad or (out.status not in RETRYABLE and out.status != pb.OK):
                        # BAD_REQUEST, MESSAGE_TOO_LARGE, ...: sending again cannot help.
                        why = next((r for r in out.results if r.status != pb.OK and r.status not in RETRYABLE), None)
                        status = pb.Status.Name(why.status) if why is not None else name
                        raise ProduceRefused(f"{status} from {self.master}: {out.error_message[:300]}", status=status)
                    if foreign:
                        last = (f"acks from {self.master} under MasterEpoch {out.acked()[0].epoch}, "
                                f"routed to {self.master_epoch}")
                        self.master = None          # ask the name server again, never a hint
                    elif out.status in (pb.NOT_MASTER, pb.FENCED):
                        hint = out.master_addr or None
                        if hint == self.master:
                            hint = None
                        hint_epoch = out.master_epoch
                        self.master = None
            else:
                last = f"no master route for {self.group}"
            if hint is not None and not redirected:
                # A broker named the new master (a handover or a failover it already saw): go there
                # now. Only once per call, so two brokers pointing at each other cannot spin.
                redirected = True
                self.stats.retries += 1
                continue
            delay = backoff.next()
            if time.monotonic() + delay > deadline:
                raise RetriesExhausted(f"{len(pending)} messages not acknowledged: {last}",
                                       pending=len(pending))
            self.stats.retries += 1
            await asyncio.sleep(delay)
        return [done[i] for i in msg_ids]

    async def close(self) -> None:
        if self._ack_log is not None:
            self._ack_log.close()
        await super().close()


class RoutedConsumer(_Routed):
    """Consume from the group's master (reads stop at confirmOffset), re-routing on failover."""

    def _make(self, addr: str) -> ConsumerClient:
        return ConsumerClient(addr, timeout_s=self.policy.rpc_timeout_s, max_retries=0, tls=self.tls)

    async def consume(self, topic: str, queue_offset: int, max_count: int,
                      record_runs: bool = False) -> pb.ConsumeReply:
        return await self._on_master(f"consume {topic}@{queue_offset}",
                                     lambda c: c.consume(topic, queue_offset, max_count, record_runs))

    async def commit_offset(self, consumer_group: str, topic: str, queue_offset: int) -> pb.CommitOffsetReply:
        return await self._on_master(f"commit {consumer_group}/{topic}@{queue_offset}",
                                     lambda c: c.commit_offset(consumer_group, topic, queue_offset))

    async def fetch_offset(self, consumer_group: str, topic: str) -> pb.FetchOffsetReply:
        return await self._on_master(f"fetch offset {consumer_group}/{topic}",
                                     lambda c: c.fetch_offset(consumer_group, topic))

    async def consumer_progress(self, consumer_group: str) -> pb.ConsumerProgressReply:
        return await self._on_master(f"progress of {consumer_group}", lambda c: c.consumer_progress(consumer_group))

    async def _on_master(self, what: str, call: Callable[[ConsumerClient], Awaitable[Any]]) -> Any:
        """``call`` on the group's master, re-routing on failover, until a reply that is OK or not
        retryable, or RetriesExhausted after the policy's deadline."""

        async def attempt() -> tuple[Any, str]:
            if self.master is None:
                await self._refresh()
            if self.master is None:
                return None, f"no master route for {self.group}"
            try:
                reply = await call(self._client(self.master))
            except BrokerUnavailable as e:
                failed, self.master = self.master, None
                return None, f"UNAVAILABLE {failed}: {e}"
            if reply.status == pb.OK or reply.status not in RETRYABLE:
                return reply, ""
            self.master = None
            return None, f"{pb.Status.Name(reply.status)}: {reply.error_message[:200]}"

        return await retry_until(self.policy, what, attempt)
