"""ControllerService gRPC servicer: validates requests, maps them onto the node, maps replies back.

The servicer holds no state: writes go to ``node.proposer.write`` (proposed into Raft, applied by the
state machine on every node), reads to ``node.query`` (after a read-index barrier on the leader),
heartbeats and liveness queries to the node's local liveness view. Input is checked here, before
anything is proposed, so a malformed request costs nothing and gets CONTROLLER_MALFORMED_REQUEST.
No exception escapes a handler: anything unexpected becomes CONTROLLER_INTERNAL_ERROR + a log line.

Why one long module: the servicer is one class with one thin handler per RPC of the proto
service; the longer operations live in their own modules (features_ops, maintenance_ops, ...).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from autoswitch.controller import messages as m
from autoswitch.controller.codes import Code
from autoswitch.controller.server import audit as admin_audit
from autoswitch.controller.server import streams
from autoswitch.controller.server.authz import audit_detail
from autoswitch.controller.server.batchable import BATCHABLE, decode_call
from autoswitch.controller.server.service_common import (
    BadRequest,
    NodeReply,
    check_addr,
    check_field,
    checked,
    checked_heartbeat,
    log_internal,
    log_refused,
    replica_info_pb,
)
from autoswitch.controller.state import explain

from autoswitch.base import features
from autoswitch.base.auth import current_caller
from autoswitch.base.limits import DECISIONS_KEPT_PER_GROUP, MAX_REPLICAS_PER_GROUP
from autoswitch.base.log import get_logger
from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import controller_pb2_grpc as pbg

if TYPE_CHECKING:
    from autoswitch.controller.server.node_api import ServedNode

_log = get_logger("controller.service")

MAX_HEARTBEAT_BATCH = 10_000
MAX_BATCH_CALLS = 4096
MAX_PACING_WAIT_S = 120.0      # a ChangeMembership held back by voter-change pacing waits at most this

def _too_large(node: ServedNode, size: int) -> NodeReply | None:
    # The server's own limit is Raft's (snapshots and append batches share the port).
    if size > node.config.max_message_bytes:
        return NodeReply(Code.CONTROLLER_REQUEST_TOO_LARGE, f"request of {size} bytes > {node.config.max_message_bytes}")
    return None


def _error_reply(node: ServedNode, reply_cls, rpc: str, e: Exception):
    """A typed reply for what a handler raised: BadRequest -> MALFORMED, NodeReply -> its code
    (NOT_LEADER with the leader's address), anything else -> INTERNAL_ERROR + an error log."""
    if isinstance(e, BadRequest):
        log_refused(rpc, e.message)
        code: int = Code.CONTROLLER_MALFORMED_REQUEST
        msg, lid, laddr = e.message, "", ""
    elif isinstance(e, NodeReply):
        code, msg, lid, laddr = e.reply_code, e.message, e.leader_id, e.leader_addr
    else:  # a bug: keep serving, make it loud
        log_internal(rpc, e)
        code, msg, lid, laddr = Code.CONTROLLER_INTERNAL_ERROR, f"{type(e).__name__}: {e}", "", ""
    if code == Code.CONTROLLER_NOT_LEADER and not laddr:
        lid, laddr = node.leader_hint()
    return reply_cls(header=pb.ReplyHeader(code=code, message=msg, leader_id=lid or "",
                                           leader_addr=laddr or "", node_id=node.node_id))


def _handler(reply_cls, audit: Callable[[Any], str] | None = None):
    """Wrap an RPC: typed errors -> header codes; the reply type carries the header. ``audit``
    (request -> the group it concerns): an admin's call is recorded with its result
    (node.proposer.audit_admin_call), alone or in a Batch."""

    def deco(fn):
        @functools.wraps(fn)
        async def wrapper(self: ControllerServicer, request, context):
            node = self.node
            token = admin_audit.CURRENT.set(
                admin_audit.begin(fn.__name__, request, audit(request)) if audit is not None else None)
            try:
                try:
                    big = _too_large(node, request.ByteSize())
                    if big is not None:
                        raise big
                    reply = await fn(self, request, context)
                    reply.header.node_id = node.node_id
                except asyncio.CancelledError:
                    call = admin_audit.pending()
                    if call is not None:
                        # the caller gave up (its deadline): the record still gets written
                        node.spawn(node.proposer.audit_admin_call(call, int(Code.CONTROLLER_TIMEOUT),
                                                         "the caller cancelled before the reply"), "admin-audit")
                    raise
                except Exception as e:  # noqa: BLE001 - every failure becomes a typed reply
                    reply = _error_reply(node, reply_cls, fn.__name__, e)
                call = admin_audit.pending()    # the handler may have opened its own (a handover's)
            finally:
                admin_audit.CURRENT.reset(token)
            if call is not None:
                await asyncio.shield(node.proposer.audit_admin_call(call, int(reply.header.code), reply.header.message))
            return reply

        return wrapper

    return deco


def _member_pb(x: Any) -> pb.ReplicaMember:
    d = msgspec.structs.asdict(x)
    d["topic_rates"] = [pb.TopicRate(**msgspec.structs.asdict(t)) for t in x.topic_rates]
    return pb.ReplicaMember(**d)


def _header(reply: m.Reply) -> pb.ReplyHeader:
    return pb.ReplyHeader(code=int(reply.code), message=reply.remark)


class ControllerServicer(pbg.ControllerServiceServicer):
    def __init__(self, node: ServedNode) -> None:
        self.node = node

    # ---- many calls in one RPC ----

    async def Batch(self, request, context):  # noqa: N802 (gRPC method name)
        """Each call gets the reply it would have got alone (validation, error codes, its own
        Raft entry), in the calls' order. The common writes (``_PLANNED_WRITES``) are validated
        here and proposed together with ``node.proposer.write_many``: one Raft append and one wait for
        all of them instead of a coroutine, future and timer each. Everything else, and a write
        that needs more than this node's own liveness view, runs its full handler concurrently."""
        node = self.node
        calls = request.calls
        if len(calls) > MAX_BATCH_CALLS:
            log_refused("Batch", f"{len(calls)} calls")
            return pb.BatchReply(header=pb.ReplyHeader(
                code=Code.CONTROLLER_MALFORMED_REQUEST, message=f"at most {MAX_BATCH_CALLS} calls per batch",
                node_id=node.node_id))
        replies: list[Any] = [None] * len(calls)
        planned: list[tuple[int, str, m.Request]] = []
        full: list[int] = []
        for i, call in enumerate(calls):
            spec = _PLANNED_WRITES.get(call.method)
            if spec is None:
                full.append(i)
                continue
            req = decode_call(call)
            if isinstance(req, pb.BatchCallReply):
                replies[i] = req
                continue
            try:
                big = _too_large(node, len(call.request))
                if big is not None:
                    raise big
                item = spec[0](self, req)
            except Exception as e:  # noqa: BLE001 - a typed reply for this call only
                replies[i] = pb.BatchCallReply(
                    reply=_error_reply(node, BATCHABLE[call.method][1], call.method, e).SerializeToString())
                continue
            if item is None:
                full.append(i)
            else:
                planned.append((i, call.method, item))
        full_jobs = asyncio.gather(*(self._batch_one(calls[i], context) for i in full))
        results: list[m.Reply | NodeReply] = []
        if planned:
            full_replies, results = await asyncio.gather(
                full_jobs, node.proposer.write_many([item for _i, _m, item in planned]))
        else:
            full_replies = await full_jobs
        for i, rep in zip(full, full_replies, strict=True):
            replies[i] = rep
        if planned:
            for (i, method, _item), res in zip(planned, results, strict=True):
                if isinstance(res, NodeReply):
                    reply = _error_reply(node, BATCHABLE[method][1], method, res)
                else:
                    reply = _PLANNED_WRITES[method][1](res)
                    reply.header.node_id = node.node_id
                replies[i] = pb.BatchCallReply(reply=reply.SerializeToString())
        return pb.BatchReply(header=pb.ReplyHeader(code=0, node_id=node.node_id), replies=replies)

    async def _batch_one(self, call, context) -> pb.BatchCallReply:
        req = decode_call(call)
        if isinstance(req, pb.BatchCallReply):
            return req
        reply = await getattr(self, call.method)(req, context)
        return pb.BatchCallReply(reply=reply.SerializeToString())

    # ---- broker identity and registration (writes) ----

    @_handler(pb.GetNextBrokerIdReply)
    async def GetNextBrokerId(self, request, context):
        res = await self.node.query(checked(m.GetNextBrokerIdRequest(request.cluster_name, request.broker_name)))
        return pb.GetNextBrokerIdReply(header=_header(res), next_broker_id=res.broker_id or 0)

    def _plan_apply_broker_id(self, request) -> m.ApplyBrokerIdRequest:
        return checked(m.ApplyBrokerIdRequest(
            cluster_name=request.cluster_name, broker_name=request.broker_name,
            applied_broker_id=request.applied_broker_id, register_check_code=request.register_check_code))

    @staticmethod
    def _apply_broker_id_reply(res: m.Reply) -> pb.ApplyBrokerIdReply:
        return pb.ApplyBrokerIdReply(header=_header(res))

    @_handler(pb.ApplyBrokerIdReply)
    async def ApplyBrokerId(self, request, context):
        return self._apply_broker_id_reply(await self.node.proposer.write(self._plan_apply_broker_id(request)))

    def _register_request(self, request) -> m.RegisterBrokerRequest:
        return checked(m.RegisterBrokerRequest(
            cluster_name=request.cluster_name, broker_name=request.broker_name, broker_id=request.broker_id,
            broker_address=check_addr(request.broker_address, "broker_address"), clean_shutdown=request.clean_shutdown,
            broker_ha_address=(check_addr(request.broker_ha_address, "broker_ha_address")
                               if request.broker_ha_address else ""),
            incarnation=request.incarnation, previous_incarnation=request.previous_incarnation,
            crashed=request.crashed))

    def _plan_register_broker(self, request) -> m.RegisterBrokerRequest | None:
        """None (the unary handler answers it) when another incarnation of the id is alive."""
        req = self._register_request(request)
        return None if self.node.liveness.registration_refused(req) else req

    @staticmethod
    def _register_broker_reply(res: m.Reply) -> pb.RegisterBrokerReply:
        return pb.RegisterBrokerReply(header=_header(res), replica_info=replica_info_pb(res.replica))

    @_handler(pb.RegisterBrokerReply)
    async def RegisterBroker(self, request, context):
        req = self._register_request(request)
        # Every node hears the brokers: the leader refuses a second live process of an id before
        # its registration could move the id's address to it (issue 30, cloned data directories).
        await self.node.liveness.check_registration(req)
        return self._register_broker_reply(await self.node.proposer.write(req))

    # ---- liveness (node-local, every node answers) ----

    @_handler(pb.BrokerHeartbeatReply)
    async def BrokerHeartbeat(self, request, context):
        return self._heartbeat(request)

    def _heartbeat(self, request) -> pb.BrokerHeartbeatReply:
        granted = self.node.liveness.record_heartbeat(checked_heartbeat(request))
        epoch, master = self.node.sm.master_of(request.broker_name)
        ctl_index, ctls = self.node.controllers_for_brokers()
        return pb.BrokerHeartbeatReply(header=pb.ReplyHeader(code=0), is_leader=self.node.is_leader,
                                       raft_term=self.node.term, lease_granted=granted, master_epoch=epoch,
                                       master_broker_id=master, controllers=ctls, controllers_index=ctl_index,
                                       feature_level=self.node.sm.feature_level)

    async def BrokerHeartbeatStream(self, request_iterator, context):
        """Bounded by gRPC flow control: one reply per request, in order; a bad request gets its
        typed reply and the stream goes on."""
        async for req in request_iterator:
            yield await self.BrokerHeartbeat(req, context)

    @_handler(pb.BrokerHeartbeatBatchReply)
    async def BrokerHeartbeatBatch(self, request, context):
        """Many replicas' heartbeats in one call (a process hosting many brokers, like RocketMQ's
        BrokerContainer); each item is judged and answered on its own."""
        if len(request.heartbeats) > MAX_HEARTBEAT_BATCH:
            raise BadRequest(f"at most {MAX_HEARTBEAT_BATCH} heartbeats per batch")
        out = []
        for item in request.heartbeats:
            try:
                out.append(self._heartbeat(item))
            except BadRequest as e:
                out.append(pb.BrokerHeartbeatReply(header=pb.ReplyHeader(
                    code=Code.CONTROLLER_MALFORMED_REQUEST, message=e.message)))
            except NodeReply as e:
                out.append(pb.BrokerHeartbeatReply(header=pb.ReplyHeader(code=e.reply_code, message=e.message)))
        return pb.BrokerHeartbeatBatchReply(header=pb.ReplyHeader(code=0), replies=out)

    @_handler(pb.QueryLivenessReply)
    async def QueryLiveness(self, request, context):
        if len(request.brokers) > 100_000:
            raise BadRequest("too many brokers in one liveness query")
        from autoswitch.controller.failover.peers import opinion_to_pb

        keys = [(check_field(k.broker_name, m.Name, "broker_name"), check_field(k.broker_id, m.BrokerId, "broker_id"))
                for k in request.brokers]
        ops = [opinion_to_pb(k, op) for k, op in zip(keys, self.node.liveness.local_opinions(keys), strict=True)]
        return pb.QueryLivenessReply(header=pb.ReplyHeader(code=0), opinions=ops,
                                     max_assumed_timeout_ms=self.node.liveness.max_assumed_timeout_ms())

    @_handler(pb.GetStateHashReply)
    async def GetStateHash(self, request, context):
        node = self.node
        check = node.state_check
        h = check.hash_at(request.index) if check is not None else None
        return pb.GetStateHashReply(header=pb.ReplyHeader(code=0), found=h is not None, hash=h or "",
                                    applied_index=node.sm.last_applied_index,
                                    corrupt=(check.corrupt or "") if check is not None else "")

    async def BrokerSession(self, request, context):
        """Held open by the broker for its whole life; its end is crash evidence (controller/server/streams.py)."""
        async for ev in streams.broker_session(self.node, request):
            yield ev

    # ---- elections and SyncStateSet (writes) ----

    @_handler(pb.ElectMasterReply, audit=lambda r: r.broker_name)
    async def ElectMaster(self, request, context):
        asked = checked(m.ElectMasterRequest(
            cluster_name=request.cluster_name, broker_name=request.broker_name, broker_id=request.broker_id,
            designate=request.designate_elect or bool(request.handover_from),
            trigger="handover" if request.handover_from else "admin", handover_from=request.handover_from,
            expect_master_epoch=request.expect_master_epoch,
            expect_sync_state_set_epoch=request.expect_sync_state_set_epoch))
        group, bid = asked.broker_name, asked.broker_id
        if asked.handover_from:
            if request.requested_by and admin_audit.CURRENT.get() is None:
                # a master handing over because an admin asked it (the broker's TransferMaster):
                # the broker reports who; recorded with the handover's write like an admin's own
                who = current_caller()
                admin_audit.CURRENT.set(admin_audit.AuditCall(
                    f"{request.requested_by[:256]} via {who.name if who is not None else 'broker'}",
                    "TransferMaster", group, audit_detail(request)))
            res = await self.node.elections.elect(asked.cluster_name, group, bid, True, trigger="handover",
                                                  handover_from=asked.handover_from,
                                                  expect_master_epoch=asked.expect_master_epoch,
                                                  expect_sync_state_set_epoch=asked.expect_sync_state_set_epoch)
            return pb.ElectMasterReply(header=_header(res), replica_info=replica_info_pb(res.replica))
        # RocketMQ: a broker asks with its own id; an operator (admin CLI) designates or sends 0.
        trigger: m.Trigger = m.TRIGGER_ADMIN if request.designate_elect or bid == 0 else m.TRIGGER_BROKER
        if request.unclean_recovery:
            from autoswitch.controller.server.maintenance_ops import needs_operator_level

            needs_operator_level(self.node, "an unclean recovery")
        res = await self.node.elections.elect(asked.cluster_name, group, bid, request.designate_elect, trigger=trigger,
                                              dry_run=request.dry_run,
                                              unclean_recovery=check_field(request.unclean_recovery, m.AuditText,
                                                                           "unclean_recovery"))
        # a dry run answers SUCCESS whatever it found: the would-be code is the decision's own
        return pb.ElectMasterReply(header=pb.ReplyHeader(code=0) if request.dry_run else _header(res),
                                   replica_info=replica_info_pb(res.replica),
                                   decision_json=explain.to_json(res.decision) if res.decision is not None else "")

    @_handler(pb.SetZonePreferenceReply, audit=lambda r: r.broker_name)
    async def SetZonePreference(self, request, context):
        from autoswitch.controller.server.maintenance_ops import set_zone_preference

        return await set_zone_preference(self.node, request)

    @_handler(pb.ExplainReply)
    async def Explain(self, request, context):
        group = check_field(request.broker_name, m.Name, "broker_name")
        if not 0 <= request.last <= DECISIONS_KEPT_PER_GROUP:
            raise BadRequest(f"last must be in [0, {DECISIONS_KEPT_PER_GROUP}] (0 = all kept)")
        await self.node.proposer.barrier()     # the leader's applied state: every committed decision
        found = self.node.sm.decisions(group, request.last or DECISIONS_KEPT_PER_GROUP)
        return pb.ExplainReply(header=pb.ReplyHeader(code=0), decisions_json=[explain.to_json(d) for d in found],
                               pending=self.node.pending_moves(group))

    @staticmethod
    def _alter_request(request) -> m.AlterSyncStateSetRequest:
        return checked(m.AlterSyncStateSetRequest(
            broker_name=request.broker_name, master_broker_id=request.master_broker_id,
            master_epoch=request.master_epoch, new_sync_state_set=tuple(sorted(request.new_sync_state_set)),
            sync_state_set_epoch=request.sync_state_set_epoch,
            leaving=tuple((x.broker_id, x.reason) for x in request.leaving)))

    def _plan_alter_sync_state_set(self, request) -> m.AlterSyncStateSetRequest | None:
        """None when some proposed member was not heard by this node itself: then the liveness
        evidence needs the peers (an await), so the call takes the full handler."""
        req = self._alter_request(request)
        if not self.node.liveness.heard_all(req.broker_name, req.new_sync_state_set):
            return None
        return msgspec.structs.replace(req, alive_broker_ids=req.new_sync_state_set,
                                       master_min_in_sync_replicas=self.node.liveness.stated_min_in_sync(req.broker_name, req.master_broker_id))

    @staticmethod
    def _alter_sync_state_set_reply(res: m.Reply) -> pb.AlterSyncStateSetReply:
        v = res.replica
        return pb.AlterSyncStateSetReply(header=_header(res), sync_state_set=sorted(v.sync_state_set) if v else [],
                                         sync_state_set_epoch=v.sync_state_set_epoch if v else 0)

    @_handler(pb.AlterSyncStateSetReply)
    async def AlterSyncStateSet(self, request, context):
        res = await self.node.elections.alter_sync_state_set(self._alter_request(request))
        return self._alter_sync_state_set_reply(res)

    @_handler(pb.CleanBrokerDataReply, audit=lambda r: r.broker_name)
    async def CleanBrokerData(self, request, context):
        if len(request.broker_ids) > MAX_REPLICAS_PER_GROUP:   # before the set below is built
            raise BadRequest("too many broker_ids")
        res = await self.node.elections.clean_broker_data(checked(m.CleanBrokerDataRequest(
            cluster_name=request.cluster_name, broker_name=request.broker_name,
            broker_ids=tuple(sorted(set(request.broker_ids))), clean_living_broker=request.clean_living_broker)))
        return pb.CleanBrokerDataReply(header=_header(res))

    @_handler(pb.SetPreferredMasterReply, audit=lambda r: r.broker_name)
    async def SetPreferredMaster(self, request, context):
        res = await self.node.proposer.write(checked(m.SetPreferredMasterRequest(
            broker_name=request.broker_name, broker_id=request.broker_id)))
        return pb.SetPreferredMasterReply(header=_header(res), replica_info=replica_info_pb(res.replica))

    @_handler(pb.ListAlarmsReply)
    async def ListAlarms(self, request, context):
        """The leader's: only it raises alarms (a follower's list would be empty or stale)."""
        if not self.node.is_leader:
            raise self.node.proposer.not_leader()
        book = self.node.alarms
        rows = book.standing() + (book.cleared() if request.include_cleared else [])
        return pb.ListAlarmsReply(header=pb.ReplyHeader(code=0), dropped=book.dropped, alarms=[pb.Alarm(
            kind=a.kind, group=a.group, epoch=-1 if a.epoch is None else a.epoch, first_ms=a.first_ms,
            last_ms=a.last_ms, count=a.count, detail_json=json.dumps(a.detail, sort_keys=True, default=str),
            cleared_ms=a.cleared_ms or 0, cleared_by=a.cleared_by) for a in rows])

    @_handler(pb.ImportGroupReply, audit=lambda r: r.broker_name)
    async def ImportGroup(self, request, context):
        if self.node.sm.feature_level < features.SAFETY_LEVEL:
            # refused before anything is proposed: a member of an older release cannot read the entry
            raise NodeReply(Code.CONTROLLER_FEATURE_UNSUPPORTED,
                            f"importing a group needs feature level {features.SAFETY_LEVEL}; the cluster is "
                            f"finalized at {self.node.sm.feature_level} (docs/compatibility.md)")
        if len(request.brokers) > MAX_REPLICAS_PER_GROUP:
            raise BadRequest(f"at most {MAX_REPLICAS_PER_GROUP} brokers")
        brokers = tuple((b.broker_id, check_addr(b.address, "address")) for b in request.brokers)
        res = await self.node.proposer.write(checked(m.ImportGroupRequest(
            cluster_name=request.cluster_name, broker_name=request.broker_name, brokers=brokers,
            master_broker_id=request.master_broker_id, master_epoch=request.master_epoch,
            sync_state_set=tuple(request.sync_state_set), sync_state_set_epoch=request.sync_state_set_epoch,
            source=request.source)))
        return pb.ImportGroupReply(header=_header(res), replica_info=replica_info_pb(res.replica))

    @_handler(pb.SetMaintenanceReply, audit=lambda r: r.broker_name)
    async def SetMaintenance(self, request, context):
        from autoswitch.controller.server.maintenance_ops import set_maintenance

        return await set_maintenance(self.node, request)

    @_handler(pb.MoveLeaderReply, audit=lambda r: "")
    async def MoveLeader(self, request, context):
        to = check_field(request.to_node_id, m.Name, "to_node_id")
        if not 0 <= request.timeout_ms <= 60_000:
            raise BadRequest("timeout_ms must be in [0, 60000]")
        if to not in self.node.membership.voter_ids:
            raise BadRequest(f"unknown controller {to[:64]!r}; voters: {list(self.node.membership.voter_ids)}")
        call = admin_audit.pending()
        if call is not None and self.node.is_leader:
            # recorded before it moves: afterwards this node is no leader to write the record
            await asyncio.shield(self.node.proposer.audit_admin_call(call, 0, f"moving the leadership to {to}"))
        await self.node.move_leader(to, request.timeout_ms / 1000.0 if request.timeout_ms else None)
        return pb.MoveLeaderReply(header=pb.ReplyHeader(code=0), leader_id=to, raft_term=self.node.term)

    @_handler(pb.ChangeMembershipReply, audit=lambda r: "")
    async def ChangeMembership(self, request, context):
        nid = check_field(request.node_id, m.Name, "node_id")
        if request.action not in ("add", "remove"):
            raise BadRequest("action must be 'add' or 'remove'")
        for what, a in (("address", request.address), ("raft_address", request.raft_address)):
            if a:
                check_addr(a, what)
        # a change held back by voter-change pacing waits for it within the caller's deadline
        left = context.time_remaining() if context is not None else None
        budget = max(0.0, min(left, MAX_PACING_WAIT_S) - 0.5) if left is not None else 0.0
        await self.node.change_membership(request.action, nid, request.address, request.raft_address, budget)
        md = self.node.metadata()
        members = [pb.ControllerPeer(node_id=n, address=a, reachable=r, role=role, match_index=md["match"].get(n, 0))
                   for n, a, r, role in md["peers"]]
        return pb.ChangeMembershipReply(header=pb.ReplyHeader(code=0), members=members, cluster_id=md["cluster_id"],
                                        config_index=md["config_index"])

    @_handler(pb.SaveSnapshotReply, audit=lambda r: "")
    async def SaveSnapshot(self, request, context):
        await self.node.proposer.barrier()
        data, index = self.node.state_snapshot()
        return pb.SaveSnapshotReply(header=pb.ReplyHeader(code=0), snapshot=data, applied_index=index)

    # ---- reads ----

    @_handler(pb.GetReplicaInfoReply)
    async def GetReplicaInfo(self, request, context):
        res = await self.node.query(checked(m.GetReplicaInfoRequest(request.broker_name)))
        return pb.GetReplicaInfoReply(header=_header(res), replica_info=replica_info_pb(res.replica))

    @_handler(pb.GetSyncStateDataReply)
    async def GetSyncStateData(self, request, context):
        if len(request.broker_names) > self.node.config.max_groups_per_query:
            raise BadRequest("too many broker_names")
        groups = checked(m.GetSyncStateDataRequest(tuple(request.broker_names))).broker_names
        res, states = await self.node.sync_state_data(groups)
        out = [pb.GroupSyncState(replica_info=replica_info_pb(g.replica_info),
                                 members=[_member_pb(x) for x in g.members])
               for g in states]
        return pb.GetSyncStateDataReply(header=_header(res), groups=out)

    @_handler(pb.GetMetaDataReply)
    async def GetMetaData(self, request, context):
        md = self.node.metadata()
        peers = [pb.ControllerPeer(node_id=n, address=a, reachable=r, role=role, match_index=md["match"].get(n, 0))
                 for n, a, r, role in md["peers"]]
        return pb.GetMetaDataReply(header=pb.ReplyHeader(code=0), node_id=md["node_id"], is_leader=md["is_leader"],
                                   leader_id=md["leader_id"] or "", leader_addr=md["leader_addr"] or "",
                                   raft_term=md["term"], peers=peers, groups=md["groups"], raft_role=md["raft_role"],
                                   commit_index=md["commit"], applied_index=md["applied"],
                                   last_index=md["last_index"], cluster_id=md["cluster_id"],
                                   config_index=md["config_index"], version=md["version"],
                                   feature_level=md["feature_level"],
                                   feature_level_supported=md["feature_level_supported"],
                                   lease_grants_paused_ms=md["lease_grants_paused_ms"],
                                   maintenance=md["maintenance"])

    @_handler(pb.FinalizeFeaturesReply, audit=lambda r: "")
    async def FinalizeFeatures(self, request, context):
        from autoswitch.controller.server.features_ops import finalize_features

        if not 0 <= request.level <= features.MAX_LEVEL:
            raise BadRequest(f"level must be in [0, {features.MAX_LEVEL}] (0 = describe)")
        return await finalize_features(self.node, int(request.level), bool(request.dry_run))

    @_handler(pb.GetControllerConfigReply)
    async def GetControllerConfig(self, request, context):
        # Node-local process keys + the replicated keys as applied on THIS node (a follower may lag).
        cfg = self.node.config.runtime_view()
        cfg.update(self.node.sm.config_strings())
        return pb.GetControllerConfigReply(header=pb.ReplyHeader(code=0), config=cfg)

    @_handler(pb.UpdateControllerConfigReply, audit=lambda r: "")
    async def UpdateControllerConfig(self, request, context):
        """Replicated keys go through Raft (leader only); node-local keys change on this node only."""
        from autoswitch.controller.state import sm_config

        from autoswitch.base.errors import ConfigError

        if not 0 < len(request.config) <= 64:
            raise BadRequest("1..64 keys per update")
        changes = dict(request.config)
        from autoswitch.controller.config import RUNTIME_KEYS

        local = {k: v for k, v in changes.items() if k in RUNTIME_KEYS}
        replicated = {k: v for k, v in changes.items() if k not in local}
        unknown = sorted(k for k in replicated if k not in sm_config.KEYS and k not in sm_config.BLACKLIST)
        if unknown:
            from autoswitch.base.config_check import suggest

            known = set(sm_config.KEYS) | set(RUNTIME_KEYS)
            raise NodeReply(Code.CONTROLLER_CONFIG_REJECTED, "; ".join(
                f"unknown config key {k[:64]!r}{suggest(k, known)}" for k in unknown))
        early = sorted(k for k in replicated if sm_config.KEY_LEVEL.get(k, 0) > self.node.sm.feature_level)
        if early:     # never proposed: a member of the older release would refuse it otherwise
            raise NodeReply(Code.CONTROLLER_CONFIG_REJECTED, f"config keys {early} need feature level "
                            f"{max(sm_config.KEY_LEVEL[k] for k in early)}; the cluster is finalized at "
                            f"{self.node.sm.feature_level} (`autoswitch admin finalize-features`)")
        done: dict[str, str] = {}
        if replicated:
            floor = await self.node.liveness.broker_timeout_floor() if "heartbeat_timeout_ms" in replicated else 0
            res = await self.node.proposer.write(m.UpdateControllerConfigRequest(config=replicated,
                                                                        broker_timeout_floor_ms=floor))
            if res.code != Code.SUCCESS:
                return pb.UpdateControllerConfigReply(header=_header(res))
            done.update(replicated)
        if local:
            try:
                done.update(self.node.config.update_runtime(local))
            except ConfigError as e:
                raise NodeReply(Code.CONTROLLER_CONFIG_REJECTED, e.message) from None
        _log.info("controller_config_updated", changes=done)
        return pb.UpdateControllerConfigReply(header=pb.ReplyHeader(code=0), config=done)

    @_handler(pb.ExportEventsReply)
    async def ExportEvents(self, request, context):
        if request.from_line < 0:
            raise BadRequest("from_line must be >= 0")
        n = request.max_lines or 1000
        if not 0 < n <= self.node.config.events_max_lines_per_call:
            raise BadRequest("max_lines out of range")
        lines, nxt, eof = self.node.read_events(request.from_line, n)
        return pb.ExportEventsReply(header=pb.ReplyHeader(code=0), lines=lines, next_line=nxt, eof=eof)

    # ---- notifications ----

    async def WatchAlerts(self, request, context):
        async for ev in streams.watch_alerts(self.node, request):
            yield ev

    async def WatchReplicaInfo(self, request, context):
        async for ev in streams.watch_replica_info(self.node, request):
            yield ev


# Batchable writes a Batch proposes together: method -> (plan, reply). ``plan(servicer, request)``
# validates like the unary handler and returns the typed request for node.proposer.write_many, or None to
# send the call through its unary handler instead; ``reply(messages.Reply)`` builds its reply.
_PLANNED_WRITES: dict[str, tuple[Any, Any]] = {
    "ApplyBrokerId": (ControllerServicer._plan_apply_broker_id, ControllerServicer._apply_broker_id_reply),
    "RegisterBroker": (ControllerServicer._plan_register_broker, ControllerServicer._register_broker_reply),
    "AlterSyncStateSet": (ControllerServicer._plan_alter_sync_state_set,
                          ControllerServicer._alter_sync_state_set_reply),
}

