"""Asyncio client for the controller cluster: follows the leader, bounded retries with backoff.

Writes and linearizable reads go to the leader. A follower answers CONTROLLER_NOT_LEADER with
the leader's address, which the client adopts; an unreachable node makes the client try the next
configured address after a short, growing backoff; "no leader known" (an election is running)
is asked again every ``backoff_s``, so a call lands soon after the new leader's first commit.
Every call is bounded by ``max_attempts``, the backoff schedule's length and ``deadline_s``. Heartbeats go to EVERY controller (``heartbeat_all``)
because liveness is judged by a majority of controller nodes, not by the leader alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

import grpc
from autoswitch.controller.codes import Code, ControllerRpcError, code_name
from autoswitch.controller.server.batchable import BATCHABLE

from autoswitch.base.backoff import Backoff
from autoswitch.base.log import get_logger
from autoswitch.base.tls import TLSConfig, grpc_channel, transport_problem
from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import controller_pb2_grpc as pbg

_log = get_logger("controller.client")

MAX_MESSAGE_BYTES = 4 << 20
# Codes after which another node may succeed; anything else is the answer.
# QUORUM_UNAVAILABLE means nothing was committed, so a retry (maybe on a new leader) is safe;
# TIMEOUT is not retried: the write may still commit and the caller must decide.
_RETRYABLE = {Code.CONTROLLER_NOT_LEADER, Code.CONTROLLER_UNAVAILABLE, Code.CONTROLLER_QUORUM_UNAVAILABLE}




class _Batcher:
    """Coalesces the calls made to one controller address into Batch RPCs.

    A call joins the pending list; a flush scheduled with call_soon sends everything that joined
    in the same event-loop pass as one Batch (at most ``max_calls``), with at most ``max_inflight``
    batches outstanding, so a lone caller pays one loop pass and concurrent callers share the
    per-RPC cost. Per-call semantics do not change: each call gets its own reply (own header,
    own error), and a transport error fails every call of that batch the way it would have
    failed each unary call, so ControllerClient.call's retry and leader-following apply per call.
    """

    def __init__(self, client: ControllerClient, addr: str, max_calls: int, max_inflight: int) -> None:
        self.client = client
        self.addr = addr
        self.max_calls = max_calls
        self.max_inflight = max_inflight
        self._pending: list[tuple[str, Any, asyncio.Future, float]] = []
        self._inflight = 0
        self._scheduled = False

    async def call(self, method: str, request: Any, timeout: float) -> Any:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending.append((method, request, fut, loop.time() + timeout))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        self._scheduled = False
        now = asyncio.get_running_loop().time()
        while self._pending and self._inflight < self.max_inflight:
            batch, self._pending = self._pending[: self.max_calls], self._pending[self.max_calls :]
            live = []
            for b in batch:
                if b[2].done():          # the caller gave up (cancelled)
                    continue
                if b[3] <= now:          # waited out its deadline behind other batches: never sent
                    b[2].set_exception(ControllerRpcError(
                        Code.CONTROLLER_UNAVAILABLE, f"{b[0]} not sent to {self.addr} within its deadline",
                        address=self.addr))
                    continue
                live.append(b)
            batch = live
            if batch:
                self._inflight += 1
                asyncio.ensure_future(self._send(batch))

    async def _send(self, batch: list[tuple[str, Any, asyncio.Future, float]]) -> None:
        loop = asyncio.get_running_loop()
        try:
            timeout = max(0.001, max(b[3] for b in batch) - loop.time())
            req = pb.BatchRequest(calls=[pb.BatchCall(method=m, request=r.SerializeToString())
                                         for m, r, _f, _d in batch])
            try:
                reply = await self.client.stub(self.addr).Batch(req, timeout=timeout)
            except grpc.aio.AioRpcError as e:
                for _m, _r, f, _d in batch:
                    if not f.done():
                        f.set_exception(e)
                return
            except Exception as e:  # noqa: BLE001 - delivered to every caller of the batch
                for _m, _r, f, _d in batch:
                    if not f.done():
                        f.set_exception(e)
                return
            if reply.header.code != Code.SUCCESS or len(reply.replies) != len(batch):
                err = ControllerRpcError(reply.header.code or Code.CONTROLLER_INTERNAL_ERROR,
                                         reply.header.message or f"batch of {len(batch)} got {len(reply.replies)} replies",
                                         address=self.addr)
                for _m, _r, f, _d in batch:
                    if not f.done():
                        f.set_exception(err)
                return
            for (m, _r, f, _d), sub in zip(batch, reply.replies, strict=True):
                if f.done():
                    continue
                if sub.code != Code.SUCCESS:
                    f.set_exception(ControllerRpcError(sub.code, sub.message, address=self.addr))
                    continue
                try:
                    f.set_result(BATCHABLE[m][1].FromString(sub.reply))
                except Exception as e:  # noqa: BLE001 - an undecodable reply fails that call only
                    f.set_exception(ControllerRpcError(Code.CONTROLLER_INTERNAL_ERROR,
                                                       f"{m} reply does not decode: {type(e).__name__}",
                                                       address=self.addr))
        finally:
            self._inflight -= 1
            if self._pending and not self._scheduled:
                self._scheduled = True
                loop.call_soon(self._flush)


def parse_addresses(spec: str | Iterable[str]) -> list[str]:
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = [a.strip() for a in items if a.strip()]
    if not out:
        raise ValueError("no controller address given")
    return out


# While no leader is known and no channel is connected, how often the channels' states are looked
# at (connection set-up on a LAN takes about a millisecond; a dead machine's never ends).
CONNECT_POLL_S = 0.01


class ControllerClient:
    def __init__(
        self,
        addresses: str | Iterable[str],
        *,
        max_attempts: int = 12,
        deadline_s: float = 10.0,
        rpc_timeout_s: float = 5.0,
        backoff_s: float = 0.05,
        max_backoff_s: float = 0.5,
        batch: bool = True,
        batch_max_calls: int = 1024,
        batch_max_inflight: int = 2,
        tls: TLSConfig | None = None,
    ) -> None:
        self.addresses = parse_addresses(addresses)
        self.tls = tls or TLSConfig.off()
        self.max_attempts = max_attempts
        self.deadline_s = deadline_s
        self.rpc_timeout_s = rpc_timeout_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        # "No leader yet" answers are polled every backoff_s for as long as the whole backoff
        # schedule of max_attempts would have waited, then the call reports no quorum.
        self._leaderless_budget_s = sum(min(max_backoff_s, backoff_s * 2 ** i) for i in range(max_attempts))
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, pbg.ControllerServiceStub] = {}
        self._leader: str | None = None
        self._rr = 0
        # Concurrent calls to one address share Batch RPCs (see _Batcher); batch=False makes
        # every call its own unary RPC.
        self.batch = batch
        self.batch_max_calls = batch_max_calls
        self.batch_max_inflight = batch_max_inflight
        self._batchers: dict[str, _Batcher] = {}

    async def close(self) -> None:
        chans = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        self._batchers.clear()
        for ch in chans:
            await ch.close()

    def set_addresses(self, addresses: Iterable[str]) -> None:
        """Follow a controller membership change (a broker learns it from heartbeat replies);
        channels to addresses no longer listed stay until close()."""
        self.addresses = parse_addresses(addresses)
        if self._leader not in self.addresses:
            self._leader = None

    async def __aenter__(self) -> ControllerClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def leader(self) -> str | None:
        return self._leader

    def stub(self, addr: str) -> pbg.ControllerServiceStub:
        s = self._stubs.get(addr)
        if s is None:
            ch = grpc_channel(
                addr, self.tls,
                options=[
                    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                    # Fail fast on a dead node instead of waiting out the reconnect backoff.
                    ("grpc.initial_reconnect_backoff_ms", 100),
                    ("grpc.max_reconnect_backoff_ms", 1000),
                ],
            )
            self._channels[addr] = ch
            s = self._stubs[addr] = pbg.ControllerServiceStub(ch)
        return s

    async def _invoke(self, addr: str, method: str, request: Any, timeout: float) -> Any:
        """One attempt of ``method`` on ``addr``: through the address's batcher when batching is
        on and the method is batchable, else a unary RPC. Raises what the unary RPC would."""
        if self.batch and method in BATCHABLE:
            b = self._batchers.get(addr)
            if b is None:
                b = self._batchers[addr] = _Batcher(self, addr, self.batch_max_calls, self.batch_max_inflight)
            return await b.call(method, request, timeout)
        return await getattr(self.stub(addr), method)(request, timeout=timeout)

    async def _next_addr(self, wait_s: float, skip: Iterable[str] = ()) -> str:
        """The leader if known; else a controller this client can reach, round robin among the
        connected ones. With none connected yet, every channel connects at once and the first to
        connect within ``wait_s`` is asked: a dead or cut-off machine's address (its SYNs
        dropped) costs nothing, instead of an RPC timeout per call that happens to pick it."""
        if self._leader is not None:
            return self._leader
        n = len(self.addresses)
        order = [self.addresses[(self._rr + i) % n] for i in range(n)]
        order = [a for a in order if a not in skip] or order
        self._rr += 1
        for a in order:
            self.stub(a)
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            states = [self._channels[a].get_state(try_to_connect=True) for a in order]
            for a, st in zip(order, states, strict=True):
                if st == grpc.ChannelConnectivity.READY:
                    return a
            # Every one refused (nothing listens): the call fails fast there, as before. Still
            # connecting (SYNs unanswered, or the first try): wait a little for the first.
            if (len(order) == 1 or time.monotonic() >= deadline
                    or all(st == grpc.ChannelConnectivity.TRANSIENT_FAILURE for st in states)):
                return order[0]
            await asyncio.sleep(CONNECT_POLL_S)

    async def call(self, method: str, request: Any, *, leader: bool = True) -> Any:
        """Invoke ``method`` following the leader; returns the reply or raises ControllerRpcError."""
        start = time.monotonic()
        backoff = Backoff(self.backoff_s, self.max_backoff_s, jitter=False)
        last_code: int = Code.CONTROLLER_UNAVAILABLE
        last_msg = "no controller reachable"
        leaderless = 0   # answers "not leader, no leader known": an election, or no quorum
        attempt = 0      # failures other than "no leader yet": bounded by max_attempts
        leaderless_since: float | None = None
        wrong: dict[str, str] = {}   # addresses where another service answers: no retry helps
        while attempt < self.max_attempts:
            if len(wrong) == len(self.addresses):
                break
            remaining = self.deadline_s - (time.monotonic() - start)
            if remaining <= 0:
                break
            addr = await self._next_addr(min(self.rpc_timeout_s, remaining), skip=wrong)
            if addr in wrong:
                continue             # another address may be a controller
            remaining = self.deadline_s - (time.monotonic() - start)
            if remaining <= 0:
                break
            try:
                reply = await self._invoke(addr, method, request, min(self.rpc_timeout_s, remaining))
            except asyncio.CancelledError:
                # The caller's own deadline ended this attempt (often the same length as ours): a
                # hung node (SIGSTOP, a dead host whose connection stays open) must not stay the
                # cached leader, or every later call would wait on it again.
                if self._leader == addr:
                    self._leader = None
                raise
            except ControllerRpcError as e:    # from the batch path: a batch-level failure of this call
                if not leader or e.reply_code not in _RETRYABLE:
                    raise
                last_code, last_msg = e.reply_code, f"{addr}: {e.message}"
                self._leader = None
            except grpc.aio.AioRpcError as e:
                _raise_if_denied(e, addr)
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    details = e.details() or ""
                    code = Code.CONTROLLER_REQUEST_TOO_LARGE if "larger than max" in details else Code.CONTROLLER_OVERLOADED
                    raise ControllerRpcError(code, details or "resource exhausted", address=addr) from None
                last_code, last_msg = Code.CONTROLLER_UNAVAILABLE, f"{addr}: {e.code().name} {e.details()}"
                self._leader = None
                if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                    wrong[addr] = not_a_controller(addr, method)
                    last_msg = wrong[addr]
                    continue
                problem = transport_problem(e.details() or "", self.tls.enabled)
                if problem is not None:
                    final, hint = problem
                    last_msg = f"{addr}: {hint}"
                    if final:           # a TLS mismatch: no retry will connect
                        wrong[addr] = last_msg
                        continue
            else:
                h = reply.header
                if h.code == Code.SUCCESS or not leader or h.code not in _RETRYABLE:
                    if h.code == Code.SUCCESS and leader:
                        self._leader = addr
                    if h.code != Code.SUCCESS:
                        raise ControllerRpcError(h.code, h.message, node=h.node_id, address=addr)
                    return reply
                last_code, last_msg = h.code, f"{addr}: {h.message}"
                if h.code == Code.CONTROLLER_NOT_LEADER and h.leader_addr and h.leader_addr != addr:
                    self._leader = h.leader_addr
                    continue  # a redirect is not a failure: no backoff
                self._leader = None
                if h.code == Code.CONTROLLER_NOT_LEADER:
                    # A reachable node that knows no leader: an election is running. Ask again
                    # soon, at the first step of the backoff and without spending an attempt,
                    # so the call lands within ~backoff_s of the new leader's first commit
                    # instead of up to max_backoff_s later; the deadline still bounds it.
                    leaderless += 1
                    _log.debug("controller_no_leader_yet", method=method, polls=leaderless)
                    if leaderless_since is None:
                        leaderless_since = time.monotonic()
                    elif time.monotonic() - leaderless_since > self._leaderless_budget_s:
                        break   # as long as the backoff schedule would have waited: no quorum
                    await asyncio.sleep(min(self.backoff_s, max(0.0, self.deadline_s - (time.monotonic() - start))))
                    continue
            attempt += 1
            _log.debug("controller_retry", method=method, attempt=attempt, code=code_name(last_code))
            await asyncio.sleep(min(backoff.next(), max(0.0, self.deadline_s - (time.monotonic() - start))))
        if wrong and len(wrong) == len(self.addresses):
            raise ControllerRpcError(Code.CONTROLLER_UNAVAILABLE, "; ".join(wrong.values()), address=",".join(wrong))
        if leaderless and last_code in (Code.CONTROLLER_NOT_LEADER, Code.CONTROLLER_UNAVAILABLE):
            # Reachable nodes kept saying "no leader" for the whole budget: no quorum.
            raise ControllerRpcError(Code.CONTROLLER_QUORUM_UNAVAILABLE,
                                     f"{method}: no controller leader within {self.deadline_s}s "
                                     f"(quorum lost?); last: {last_msg}")
        raise ControllerRpcError(last_code, f"{method} failed after retries: {last_msg}")

    async def call_node(self, addr: str, method: str, request: Any, timeout_s: float | None = None) -> Any:
        """One attempt on one node, no leader following (metadata, config, liveness queries)."""
        try:
            reply = await self._invoke(addr, method, request, timeout_s or self.rpc_timeout_s)
        except grpc.aio.AioRpcError as e:
            _raise_if_denied(e, addr)
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise ControllerRpcError(Code.CONTROLLER_UNAVAILABLE, not_a_controller(addr, method),
                                         address=addr) from None
            problem = transport_problem(e.details() or "", self.tls.enabled)
            why = problem[1] if problem is not None else f"{e.code().name} {e.details()}"
            raise ControllerRpcError(Code.CONTROLLER_UNAVAILABLE, f"{addr}: {why}", address=addr) from None
        if reply.header.code != Code.SUCCESS:
            raise ControllerRpcError(reply.header.code, reply.header.message, address=addr)
        return reply

    # ---- typed helpers (RocketMQ operation names) ----

    async def get_next_broker_id(self, cluster: str, group: str) -> int:
        r = await self.call("GetNextBrokerId", pb.GetNextBrokerIdRequest(cluster_name=cluster, broker_name=group))
        return r.next_broker_id

    async def apply_broker_id(self, cluster: str, group: str, broker_id: int, check_code: str) -> None:
        await self.call(
            "ApplyBrokerId",
            pb.ApplyBrokerIdRequest(
                cluster_name=cluster, broker_name=group, applied_broker_id=broker_id,
                register_check_code=check_code,
            ),
        )

    async def register_broker(self, cluster: str, group: str, broker_id: int, address: str,
                              clean_shutdown: bool = True, ha_address: str = "") -> pb.ReplicaInfo:
        """``clean_shutdown`` False after an unclean restart (the replica may miss acked messages).
        ``ha_address``: where this broker serves AutoSwitchHA as master (ReplicaInfo.master_ha_address)."""
        r = await self.call(
            "RegisterBroker",
            pb.RegisterBrokerRequest(cluster_name=cluster, broker_name=group, broker_id=broker_id,
                                     broker_address=address, clean_shutdown=clean_shutdown,
                                     broker_ha_address=ha_address),
        )
        return r.replica_info

    async def heartbeat_all(self, req: pb.BrokerHeartbeatRequest, timeout_s: float = 1.0) -> int:
        """Send one heartbeat to every controller; returns how many answered SUCCESS."""

        async def one(addr: str) -> bool:
            try:
                await self.call_node(addr, "BrokerHeartbeat", req, timeout_s)
                return True
            except ControllerRpcError:
                return False

        results = await asyncio.gather(*(one(a) for a in self.addresses))
        return sum(results)

    async def heartbeat_batch(self, addr: str, reqs: list[pb.BrokerHeartbeatRequest],
                              timeout_s: float = 2.0) -> list[pb.BrokerHeartbeatReply]:
        """Many replicas' heartbeats to ONE controller in one call (replies[i] answers reqs[i])."""
        r = await self.call_node(addr, "BrokerHeartbeatBatch", pb.BrokerHeartbeatBatchRequest(heartbeats=reqs),
                                 timeout_s)
        return list(r.replies)

    async def elect_master(self, cluster: str, group: str, broker_id: int = 0,
                           designate: bool = False) -> pb.ReplicaInfo:
        r = await self.call(
            "ElectMaster",
            pb.ElectMasterRequest(cluster_name=cluster, broker_name=group, broker_id=broker_id,
                                  designate_elect=designate),
        )
        return r.replica_info

    async def alter_sync_state_set(self, group: str, master_id: int, master_epoch: int,
                                   new_set: Iterable[int], sss_epoch: int) -> tuple[list[int], int]:
        r = await self.call(
            "AlterSyncStateSet",
            pb.AlterSyncStateSetRequest(broker_name=group, master_broker_id=master_id, master_epoch=master_epoch,
                                        new_sync_state_set=sorted(new_set), sync_state_set_epoch=sss_epoch),
        )
        return list(r.sync_state_set), r.sync_state_set_epoch

    async def clean_broker_data(self, cluster: str, group: str, broker_ids: Iterable[int] = (),
                                clean_living: bool = False) -> None:
        await self.call(
            "CleanBrokerData",
            pb.CleanBrokerDataRequest(cluster_name=cluster, broker_name=group, broker_ids=list(broker_ids),
                                      clean_living_broker=clean_living),
        )

    async def get_replica_info(self, group: str) -> pb.ReplicaInfo:
        r = await self.call("GetReplicaInfo", pb.GetReplicaInfoRequest(broker_name=group))
        return r.replica_info

    async def get_sync_state_data(self, groups: Iterable[str] = ()) -> list[pb.GroupSyncState]:
        r = await self.call("GetSyncStateData", pb.GetSyncStateDataRequest(broker_names=list(groups)))
        return list(r.groups)

    async def get_metadata(self) -> pb.GetMetaDataReply:
        return await self.call("GetMetaData", pb.GetMetaDataRequest(), leader=False)

    def watch_replica_info(self, group: str, addr: str | None = None):
        """Server stream of ReplicaInfoEvent from one node (the leader if known)."""
        return self.stub(addr or self._leader or self.addresses[0]).WatchReplicaInfo(
            pb.WatchReplicaInfoRequest(broker_name=group)
        )


    def broker_session(self, addr: str, req: pb.BrokerSessionRequest):
        """Server stream of BrokerSessionEvent from node ``addr``, held open (no deadline)."""
        return self.stub(addr).BrokerSession(req)


def not_a_controller(addr: str, method: str) -> str:
    """What to tell an operator whose address answers, but not as a controller: a gRPC server
    without the controller API (a broker's or a name server's port, another program)."""
    return (f"{addr} answers, but not as a controller (the service there has no {method}): is it a broker's or "
            "a name server's port? Give a controller's client port (--controller; "
            "`admin get-controller-metadata` on a known controller lists them)")


def _raise_if_denied(e: grpc.aio.AioRpcError, addr: str) -> None:
    """Authorization refused us: no retry or other node will answer differently."""
    if e.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
        raise ControllerRpcError(Code.CONTROLLER_PERMISSION_DENIED, e.details() or e.code().name,
                                 address=addr) from None
