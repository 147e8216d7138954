"""``BrokerControllerApi`` over gRPC: the leader-following ``ControllerClient`` plus the mapping of
protobuf replies to the broker's types and of reply codes to ``ControllerCallFailed``. The one
place that decides which controller failures a broker retries."""

from __future__ import annotations

from collections.abc import AsyncIterator

from autoswitch.controller.api import (
    HANDOVER_REQUESTED_BY,
    ControllerCallFailed,
    FailKind,
    Heartbeat,
    HeartbeatAnswer,
    RegisteredReplica,
    ReplicaInfo,
)
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.codes import Code, ControllerRpcError, code_name

from autoswitch.base.limits import MAX_INCARNATION_LEN, MAX_NAME_LEN, MAX_REPLICAS_PER_GROUP
from autoswitch.base.tls import TLSConfig
from autoswitch.proto import controller_pb2 as pb

# Worth the same call again later: the cluster is electing, unreachable, overloaded or slow.
_RETRY = frozenset({
    Code.CONTROLLER_UNAVAILABLE, Code.CONTROLLER_QUORUM_UNAVAILABLE, Code.CONTROLLER_TIMEOUT,
    Code.CONTROLLER_INTERNAL_ERROR, Code.CONTROLLER_OVERLOADED,
})


def classify(e: ControllerRpcError, *, conflict_means_taken: bool = False) -> ControllerCallFailed:
    """``conflict_means_taken``: for ApplyBrokerId, BROKER_ID_INVALID means "another broker owns
    this id" (pick another), not a bad request."""
    code = e.reply_code
    leader = e.details.get("leader_addr") or None
    if code == Code.CONTROLLER_NOT_LEADER:
        kind = FailKind.NOT_LEADER
    elif code in _RETRY:
        kind = FailKind.RETRY
    elif code == Code.CONTROLLER_BROKER_ID_INVALID and conflict_means_taken:
        kind = FailKind.CONFLICT
    else:
        kind = FailKind.REJECTED
    return ControllerCallFailed(kind, code_name(code), e.message, leader)


def replica_info(p: pb.ReplicaInfo) -> ReplicaInfo:
    return ReplicaInfo(
        master_id=int(p.master_broker_id), master_addr=str(p.master_address), master_epoch=int(p.master_epoch),
        sync_state_set=frozenset(int(x) for x in p.sync_state_set),
        sync_state_set_epoch=int(p.sync_state_set_epoch), master_ha_addr=str(p.master_ha_address),
        maintenance=frozenset(int(x) for x in p.maintenance),
    )


class GrpcBrokerControllerApi:
    def __init__(self, addresses: list[str], *, rpc_timeout_s: float, tls: TLSConfig | None = None) -> None:
        self.client = ControllerClient(addresses, rpc_timeout_s=rpc_timeout_s, deadline_s=rpc_timeout_s, tls=tls)

    async def _call(self, method: str, request, *, leader: bool = True, conflict_means_taken: bool = False):
        try:
            return await self.client.call(method, request, leader=leader)
        except ControllerRpcError as e:
            raise classify(e, conflict_means_taken=conflict_means_taken) from None

    def set_controllers(self, addresses: tuple[str, ...]) -> None:
        self.client.set_addresses(list(addresses))

    async def leader_address(self) -> str | None:
        md = await self._call("GetMetaData", pb.GetMetaDataRequest(), leader=False)
        return md.leader_addr or None

    async def heartbeat_timeout_ms(self) -> int | None:
        reply = await self._call("GetControllerConfig", pb.GetControllerConfigRequest())
        raw: str | None = dict(reply.config).get("heartbeat_timeout_ms")
        if raw is None:
            return None
        try:
            return int(raw)
        except ValueError:
            raise ControllerCallFailed(FailKind.REJECTED, "BAD_CONFIG_VALUE",
                                       f"controller heartbeat_timeout_ms is not an integer: {raw[:40]!r}") from None

    async def get_next_broker_id(self, cluster: str, group: str) -> int:
        r = await self._call("GetNextBrokerId", pb.GetNextBrokerIdRequest(cluster_name=cluster, broker_name=group))
        return int(r.next_broker_id)

    async def apply_broker_id(self, cluster: str, group: str, broker_id: int, check_code: str) -> None:
        await self._call("ApplyBrokerId", pb.ApplyBrokerIdRequest(
            cluster_name=cluster, broker_name=group, applied_broker_id=broker_id, register_check_code=check_code),
            conflict_means_taken=True)

    async def register_broker(self, cluster: str, group: str, broker_id: int, address: str,
                              ha_address: str, clean_shutdown: bool = True, incarnation: str = "",
                              previous_incarnation: str = "", crashed: bool = False) -> ReplicaInfo:
        r = await self._call("RegisterBroker", pb.RegisterBrokerRequest(
            cluster_name=cluster, broker_name=group, broker_id=broker_id, broker_address=address,
            clean_shutdown=clean_shutdown, broker_ha_address=ha_address, incarnation=incarnation,
            previous_incarnation=previous_incarnation, crashed=crashed))
        return replica_info(r.replica_info)

    async def heartbeat(self, controller_addr: str, hb: Heartbeat, timeout_s: float) -> HeartbeatAnswer:
        req = heartbeat_request(hb)
        try:
            r = await self.client.call_node(controller_addr, "BrokerHeartbeat", req, timeout_s)
        except ControllerRpcError as e:
            raise classify(e) from None
        return HeartbeatAnswer(is_leader=bool(r.is_leader), lease_granted=bool(r.lease_granted),
                               controllers=tuple(r.controllers), controllers_index=int(r.controllers_index),
                               master_epoch=int(r.master_epoch), node_id=str(r.header.node_id),
                               feature_level=int(r.feature_level))

    async def get_replica_info(self, group: str) -> ReplicaInfo:
        r = await self._call("GetReplicaInfo", pb.GetReplicaInfoRequest(broker_name=group))
        return replica_info(r.replica_info)

    async def elect_master(self, cluster: str, group: str, broker_id: int) -> ReplicaInfo:
        r = await self._call("ElectMaster", pb.ElectMasterRequest(cluster_name=cluster, broker_name=group,
                                                                  broker_id=broker_id))
        return replica_info(r.replica_info)

    async def hand_over_master(self, cluster: str, group: str, from_id: int, to_id: int, expect_master_epoch: int,
                               expect_sync_state_set_epoch: int) -> ReplicaInfo:
        r = await self._call("ElectMaster", pb.ElectMasterRequest(
            cluster_name=cluster, broker_name=group, broker_id=to_id, designate_elect=True,
            handover_from=from_id, expect_master_epoch=expect_master_epoch,
            expect_sync_state_set_epoch=expect_sync_state_set_epoch, requested_by=HANDOVER_REQUESTED_BY.get()))
        return replica_info(r.replica_info)

    async def alter_sync_state_set(self, group: str, master_id: int, master_epoch: int, new_set: frozenset[int],
                                   sync_state_set_epoch: int,
                                   leaving: tuple[tuple[int, str], ...] = ()) -> tuple[frozenset[int], int]:
        r = await self._call("AlterSyncStateSet", pb.AlterSyncStateSetRequest(
            broker_name=group, master_broker_id=master_id, master_epoch=master_epoch,
            new_sync_state_set=sorted(new_set), sync_state_set_epoch=sync_state_set_epoch,
            leaving=[pb.LeavingMember(broker_id=b, reason=w) for b, w in leaving]))
        return frozenset(int(m) for m in r.sync_state_set), int(r.sync_state_set_epoch)

    async def group_members(self, group: str) -> dict[int, RegisteredReplica]:
        r = await self._call("GetSyncStateData", pb.GetSyncStateDataRequest(broker_names=[group]))
        members = [(int(m.broker_id), RegisteredReplica(m.incarnation[:MAX_INCARNATION_LEN], m.zone[:MAX_NAME_LEN]))
                   for g in r.groups if g.replica_info.broker_name == group for m in g.members]
        return dict(members[:MAX_REPLICAS_PER_GROUP])

    async def watch_replica_info(self, group: str, addr: str) -> AsyncIterator[ReplicaInfo]:
        stream = self.client.watch_replica_info(group, addr)
        try:
            async for ev in stream:
                if ev.header.code != Code.SUCCESS:
                    raise classify(ControllerRpcError(ev.header.code, ev.header.message))
                yield replica_info(ev.replica_info)
        finally:
            stream.cancel()

    async def broker_session(self, addr: str, cluster: str, group: str, broker_id: int,
                             ack_mode: str, incarnation: str = "") -> AsyncIterator[bool]:
        stream = self.client.broker_session(addr, pb.BrokerSessionRequest(
            cluster_name=cluster, broker_name=group, broker_id=broker_id, ack_mode=ack_mode,
            incarnation=incarnation))
        try:
            async for ev in stream:
                if ev.header.code != Code.SUCCESS:
                    raise classify(ControllerRpcError(ev.header.code, ev.header.message))
                yield bool(ev.tracked)
        finally:
            stream.cancel()

    async def close(self) -> None:
        await self.client.close()





def heartbeat_request(hb: Heartbeat) -> pb.BrokerHeartbeatRequest:
    """The broker side's one conversion of a heartbeat to protobuf (the controllers' is
    ``server.service_common.checked_heartbeat``)."""
    r = hb.report
    h = r.health
    return pb.BrokerHeartbeatRequest(
        cluster_name=hb.cluster, broker_name=hb.group, broker_id=r.broker_id, broker_address=r.address,
        epoch=r.epoch, max_offset=r.max_offset, confirm_offset=r.confirm_offset,
        election_priority=r.election_priority, clean_shutdown=r.clean_shutdown,
        heartbeat_timeout_ms=r.assumed_timeout_ms, lease_quorum=hb.lease_quorum,
        controllers_index=hb.controllers_index, min_in_sync_replicas=r.min_in_sync_replicas,
        incarnation=r.incarnation, stopping=hb.stopping, ack_mode=r.ack_mode,
        degraded=r.degraded, degraded_reasons=list(h.reasons) if h else [],
        append_ms=h.append_ms if h else -1.0, fsync_ms=h.fsync_ms if h else -1.0,
        loop_lag_ms=h.loop_lag_ms if h else -1.0, diverged=r.diverged,
        feature_level=r.feature_level, version=r.version, zone=r.zone, min_in_sync_zones=r.min_in_sync_zones,
        produce_per_s=r.traffic.produce_per_s, consume_per_s=r.traffic.consume_per_s,
        topic_rates=[pb.TopicRate(topic=t.topic, produce_per_s=t.produce_per_s, consume_per_s=t.consume_per_s)
                     for t in r.traffic.topics])
