"""Who may call what on a controller node and its name server: the rules the one interceptor per
server checks (autoswitch.base.auth), and how an admin call is described in the audit record
(the service writes one per admin call into the replicated event log).

The table (also in docs/security.md):

    Raft Stream                                   peer
    QueryLiveness, GetStateHash                   peer, reader
    GetNextBrokerId, Get/WatchReplicaInfo,        reader, or a broker of that group
      GetSyncStateData
    ApplyBrokerId, RegisterBroker, heartbeats,    a broker, for its own group and brokerId
      BrokerSession
    AlterSyncStateSet                             a broker, as its group's master (its own brokerId)
    ElectMaster                                   admin; or a broker asking for itself (not designating),
                                                  or a master handing over (handover_from = its own id)
    CleanBrokerData, UpdateControllerConfig,      admin (each admin call audited, batched or not)
      SetPreferredMaster, SetMaintenance, SetZonePreference, MoveLeader, SaveSnapshot, FinalizeFeatures,
      ChangeMembership, ImportGroup
    GetMetaData                                   reader, peer, producer or any broker (to find the leader)
    GetControllerConfig                           reader, broker (checks the timeout its lease is sized for)
    ExportEvents, WatchAlerts, ListAlarms         reader
    Batch                                         each call by its own rule
    name server: Register/UnregisterRoute         a broker for its own group and brokerId; admin
    name server: LookupMaster, GetRoutes          reader, producer, broker
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from autoswitch.controller.server.batchable import BATCHABLE
from google.protobuf import text_format

from autoswitch.base.auth import Role, Rule, Target

R, B, P, A, W = Role.READER, Role.BROKER, Role.PEER, Role.ADMIN, Role.PRODUCER
MAX_AUDIT_DETAIL = 512


def _own(req: Any) -> list[Target]:
    return [(req.broker_name, req.broker_id)]


def _group(req: Any) -> list[Target]:
    return [(req.broker_name, None)]


def _elect_scope(req: Any) -> list[Target] | None:
    if req.handover_from:
        return [(req.broker_name, req.handover_from)]   # the master itself, handing over
    if req.designate_elect or req.broker_id == 0:
        return None                 # an operator's election: admin only
    return [(req.broker_name, req.broker_id)]


def _sync_state_scope(req: Any) -> list[Target] | None:
    return [(g, None) for g in req.broker_names] or None     # empty = every group: readers only


def _batch_calls(req: Any) -> Iterable[tuple[str, Any]]:
    for call in req.calls:
        classes = BATCHABLE.get(call.method)
        if classes is None:
            continue                # the handler answers it CONTROLLER_MALFORMED_REQUEST
        try:
            sub = classes[0].FromString(call.request)
        except Exception:  # noqa: BLE001 - undecodable: the handler refuses it with a typed reply
            continue
        yield call.method, sub


CONTROLLER_RULES: dict[str, Rule] = {
    "Stream": Rule((P,)),
    "QueryLiveness": Rule((P, R)),
    "GetStateHash": Rule((P, R)),
    "GetNextBrokerId": Rule((R, B), scope=_group),
    "GetReplicaInfo": Rule((R, B, P), scope=_group),
    "WatchReplicaInfo": Rule((R, B, P), scope=_group),
    "WatchAlerts": Rule((R,)),
    "ListAlarms": Rule((R,)),
    "GetSyncStateData": Rule((R, B), scope=_sync_state_scope),
    "ApplyBrokerId": Rule((B,), scope=lambda r: [(r.broker_name, r.applied_broker_id)]),
    "RegisterBroker": Rule((B,), scope=_own),
    "BrokerHeartbeat": Rule((B,), scope=_own),
    "BrokerHeartbeatStream": Rule((B,), scope=_own),
    "BrokerSession": Rule((B,), scope=_own),
    "BrokerHeartbeatBatch": Rule((B,), scope=lambda r: [(h.broker_name, h.broker_id) for h in r.heartbeats]),
    "AlterSyncStateSet": Rule((B,), scope=lambda r: [(r.broker_name, r.master_broker_id)]),
    "ElectMaster": Rule((A, B), scope=_elect_scope),
    "CleanBrokerData": Rule((A,)),
    "SetPreferredMaster": Rule((A,)),
    "SetMaintenance": Rule((A,)),
    "Explain": Rule((R,)),
    "SetZonePreference": Rule((A,)),
    "ImportGroup": Rule((A,)),
    "MoveLeader": Rule((A,)),
    "ChangeMembership": Rule((A,)),
    "SaveSnapshot": Rule((A,)),
    "UpdateControllerConfig": Rule((A,)),
    "FinalizeFeatures": Rule((A,)),
    "GetMetaData": Rule((R, P, W, B)),
    "GetControllerConfig": Rule((R, B)),     # brokers check heartbeat_timeout_ms against their lease
    "ExportEvents": Rule((R,)),
    "Batch": Rule((R, B, P, A), expand=_batch_calls),
    # grpc.health.v1.Health: any caller the server knows (probes use a reader certificate or token)
    "Check": Rule((R, B, P, A, W)),
    "Watch": Rule((R, B, P, A, W)),
}

NAMESRV_RULES: dict[str, Rule] = {
    "RegisterRoute": Rule((B, A), scope=lambda r: [(r.route.broker_name, r.route.broker_id)]),
    "UnregisterRoute": Rule((B, A), scope=_own),
    "LookupMaster": Rule((R, W, B)),
    "GetRoutes": Rule((R, W, B)),
}
# the standalone name server's own server also serves grpc.health.v1 (the embedded one shares the node's)
STANDALONE_NAMESRV_RULES: dict[str, Rule] = {**NAMESRV_RULES, "Check": Rule((R, B, P, A, W)),
                                             "Watch": Rule((R, B, P, A, W))}


def audit_detail(request: Any) -> str:
    """The request as one line of protobuf text, bounded."""
    text = text_format.MessageToString(request, as_one_line=True)
    return text if len(text) <= MAX_AUDIT_DETAIL else text[:MAX_AUDIT_DETAIL - 3] + "..."
