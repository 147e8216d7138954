"""Controller-to-controller liveness queries (Sentinel's is-master-down-by-addr).

The leader asks every other controller node, in parallel and with a short timeout, for its own
opinion of a batch of brokers. A peer that does not answer in time simply casts no "dead" vote:
silence never helps declare a master dead. Batches are bounded; channels are kept open.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

import grpc
from autoswitch.controller.api import BrokerReport
from autoswitch.controller.config import ControllerConfig
from autoswitch.controller.failover.liveness import NodeOpinion, Opinion
from autoswitch.controller.messages import ack_mode_or_unstated

from autoswitch.base.limits import MAX_INCARNATION_LEN
from autoswitch.base.log import get_logger
from autoswitch.base.tls import grpc_channel
from autoswitch.base.waits import cancellation_is_ours
from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import controller_pb2_grpc as pbg

MAX_KEYS_PER_QUERY = 20_000
# A channel to a peer that left the voters closes this long after: a query in flight on it ends by
# its own timeout. Closed at once, gRPC cancels the call, and the CancelledError it raises in the
# asking task once ended the leader's dead-master scan for good (no failover from that node).
CLOSE_GRACE_S = 10.0
_log = get_logger("controller.peers")
_Reply = TypeVar("_Reply")


async def _answer(nid: str, event: str, call: Awaitable[_Reply]) -> _Reply | None:
    """A peer's reply, or None when the call failed: an RPC error, or a cancellation that is not
    ours (gRPC cancels calls on a channel closed under them; see CLOSE_GRACE_S)."""
    try:
        return await call
    except (TimeoutError, grpc.aio.AioRpcError, OSError) as e:
        _log.debug(event, peer=nid, status=e.code().name if isinstance(e, grpc.aio.AioRpcError) else repr(e))
        return None
    except asyncio.CancelledError:
        if cancellation_is_ours():
            raise
        _log.info(event, peer=nid, status="CANCELLED")
        return None


class PeerLiveness:
    def __init__(self, config: ControllerConfig, self_id: str) -> None:
        self.self_id = self_id
        self.peers = {n: a for n, a in config.peers.items() if n != self_id}
        self.tls = config.tls
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, pbg.ControllerServiceStub] = {}
        self._last_ok: dict[str, float] = {}

    def set_peers(self, voters: dict[str, str]) -> None:
        """Ask exactly the other voters (a membership change); channels to others close lazily."""
        self.peers = {n: a for n, a in voters.items() if n != self.self_id and a}
        for nid in [n for n in self._stubs if n not in self.peers]:
            self._stubs.pop(nid, None)
            ch = self._channels.pop(nid, None)
            if ch is not None:
                asyncio.get_running_loop().create_task(ch.close(grace=CLOSE_GRACE_S))

    def _stub(self, nid: str) -> pbg.ControllerServiceStub:
        s = self._stubs.get(nid)
        if s is None:
            ch = grpc_channel(self.peers[nid], self.tls, options=[
                ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000),
                ("grpc.max_receive_message_length", 64 << 20)])
            self._channels[nid] = ch
            s = self._stubs[nid] = pbg.ControllerServiceStub(ch)
        return s

    def reachability(self, within_s: float = 15.0) -> dict[str, bool]:
        now = time.monotonic()
        return {n: (now - self._last_ok.get(n, -1e18)) <= within_s for n in self.peers}

    async def _ask_all(self, req: pb.QueryLivenessRequest, timeout_s: float, n_keys: int
                       ) -> dict[str, pb.QueryLivenessReply]:
        """peer id -> its QueryLiveness reply (success, one opinion per asked key); peers that
        failed are absent."""
        async def one(nid: str):
            r = await _answer(nid, "peer_liveness_failed", self._stub(nid).QueryLiveness(req, timeout=timeout_s))
            if r is None:
                return nid, None
            if r.header.code != 0 or len(r.opinions) != n_keys:
                _log.warning("peer_liveness_bad_reply", peer=nid, code=r.header.code)
                return nid, None
            self._last_ok[nid] = time.monotonic()
            return nid, r

        results = await asyncio.gather(*(one(n) for n in self.peers))
        return {n: r for n, r in results if r is not None}

    async def query(self, keys: list[tuple[str, int]], timeout_s: float) -> dict[str, list[NodeOpinion]]:
        """peer id -> opinions aligned with ``keys``; peers that failed are absent."""
        keys = keys[:MAX_KEYS_PER_QUERY]
        req = pb.QueryLivenessRequest(
            brokers=[pb.BrokerKey(broker_name=g, broker_id=b) for g, b in keys], asking_node=self.self_id
        )
        replies = await self._ask_all(req, timeout_s, len(keys))
        return {n: [opinion_from_pb(o) for o in r.opinions] for n, r in replies.items()}

    async def timeout_floors(self, timeout_s: float, cap_ms: int) -> dict[str, int]:
        """peer id -> the longest heartbeat timeout its brokers sized their leases for (capped at
        ``cap_ms``: a peer cannot raise the floor past any value a heartbeat could state)."""
        replies = await self._ask_all(pb.QueryLivenessRequest(asking_node=self.self_id), timeout_s, 0)
        return {n: max(0, min(int(r.max_assumed_timeout_ms), cap_ms)) for n, r in replies.items()}

    async def state_hashes(self, index: int, timeout_s: float) -> dict[str, pb.GetStateHashReply | None]:
        """Each other voter's state hash at ``index`` (the state hash check); None: no answer."""
        async def one(nid: str) -> tuple[str, pb.GetStateHashReply | None]:
            r = await _answer(nid, "peer_state_hash_failed",
                              self._stub(nid).GetStateHash(pb.GetStateHashRequest(index=index), timeout=timeout_s))
            return nid, r if r is not None and r.header.code == 0 else None

        return dict(await asyncio.gather(*(one(n) for n in sorted(self.peers))))

    async def close(self) -> None:
        chans = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        for ch in chans:
            await ch.close()


def opinion_to_pb(key: tuple[str, int], op: NodeOpinion) -> pb.LivenessOpinion:
    out = pb.LivenessOpinion(broker=pb.BrokerKey(broker_name=key[0], broker_id=key[1]),
                             alive=op.opinion is Opinion.ALIVE, no_opinion=op.opinion is Opinion.UNKNOWN,
                             last_heard_ms_ago=op.last_heard_ms_ago, crashed=op.crashed)
    r = op.report
    if r is not None:
        out.epoch, out.max_offset, out.confirm_offset = r.epoch, r.max_offset, r.confirm_offset
        out.election_priority, out.clean_shutdown = r.election_priority, r.clean_shutdown
        out.min_in_sync_replicas, out.ack_mode = r.min_in_sync_replicas, r.ack_mode
        out.incarnation, out.diverged = r.incarnation, r.diverged
    return out


def opinion_from_pb(o: pb.LivenessOpinion) -> NodeOpinion:
    report = None
    if o.last_heard_ms_ago >= 0:
        report = BrokerReport(broker_id=o.broker.broker_id, epoch=o.epoch, max_offset=o.max_offset,
                              confirm_offset=o.confirm_offset, election_priority=o.election_priority,
                              clean_shutdown=o.clean_shutdown, min_in_sync_replicas=o.min_in_sync_replicas,
                              ack_mode=ack_mode_or_unstated(o.ack_mode),
                              incarnation=o.incarnation[:MAX_INCARNATION_LEN], diverged=o.diverged)
    if o.no_opinion:
        kind = Opinion.UNKNOWN
    else:
        kind = Opinion.ALIVE if o.alive else Opinion.DEAD
    return NodeOpinion(kind, o.last_heard_ms_ago, report, crashed=kind is Opinion.DEAD and o.crashed)
