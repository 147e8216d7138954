"""Requests, replies and events of the controller state machine, and their Raft-log bytes.

Write requests travel through the Raft log as bytes (``encode_request``) and are decoded on
every node by ``ControllerStateMachine.apply``. Everything that depends on time or on liveness
(the proposal timestamp ``ts_ms``, the brokers a controller majority considers alive and what
they reported) is filled in by the proposing leader, so apply is deterministic everywhere.

Requests, events, replies and views are msgspec Structs: typed records the library constructs,
compares and encodes. A write request's log form is one compact JSON object tagged with its type,
``{"t": "<type>", ...every field}``, UTF-8, at most ``MAX_REQUEST_BYTES``; JSON keeps the log
greppable and Python ints exact (no 32-bit offsets). Decoding is strict (msgspec: a JSON ``true``
is not an integer, unknown fields are refused) and checks every field's range, which is part of
its type (``BrokerId``, ``Name``, ...), then the rules between fields (``check``); a bad entry
gives ``MalformedRequest`` (reply code CONTROLLER_INVALID_REQUEST), never an exception out of
apply. The controller's service checks what callers send with the same decode (check_request).

Why one long module: each request type sits next to the field types and rules it is checked by.
"""

from __future__ import annotations

import functools
import operator
from typing import Annotated, Any, ClassVar, Final, Literal, get_args

import msgspec
from autoswitch.controller.codes import Code

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.features import MAX_LEVEL as MAX_FEATURE_LEVEL
from autoswitch.base.limits import (
    MAX_ADDRESS_LEN,
    MAX_BROKER_ID,
    MAX_CONTROLLERS,
    MAX_INCARNATION_LEN,
    MAX_INT64,
    MAX_NAME_LEN,
    MAX_REPLICAS_PER_GROUP,
    MAX_ZONES,
)
from autoswitch.base.structs import tuples_for_collections

MAX_REQUEST_BYTES = 1 << 20
MAX_CHECK_CODE_LEN = 512
MAX_QUERY_GROUPS = 100_000
MAX_CONFIG_KEYS = 64
MAX_CONFIG_VALUE_LEN = 1024
MAX_AUDIT_FIELD_LEN = 1024
MIN_INT32, MAX_INT32 = -(1 << 31), (1 << 31) - 1

TRIGGER_CONTROLLER: Final = "controller"  # the leader's scan saw the master dead (majority opinion)
TRIGGER_BROKER: Final = "broker"         # a broker found no master and asked
TRIGGER_ADMIN: Final = "admin"           # an operator (designated or not)
TRIGGER_HANDOVER: Final = "handover"     # the master hands over to an in-sync slave (compare-and-set)
TRIGGERS = (TRIGGER_CONTROLLER, TRIGGER_BROKER, TRIGGER_ADMIN, TRIGGER_HANDOVER)
# Not a request's trigger: a registration that ended a master's claim (history records only).
TRIGGER_REGISTRATION = "registration"


class MalformedRequest(AutoswitchError):
    """A request that cannot be decoded or has a field missing / of the wrong type / out of range."""

    code = "CONTROLLER_INVALID_REQUEST"


# --------------------------------------------------------------------------- field types
#
# A field's range is part of its type: msgspec enforces these constraints when it decodes, so the
# one strict decode that reads a Raft-log entry (and the round trip check_request makes of a request
# built in memory) is the whole range check. Rules between fields are each request's ``check()``.

BrokerId = Annotated[int, msgspec.Meta(ge=1, le=MAX_BROKER_ID)]
BrokerIdOrZero = Annotated[int, msgspec.Meta(ge=0, le=MAX_BROKER_ID)]       # 0 = none
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT64)]                      # epochs, offsets, times
Int32 = Annotated[int, msgspec.Meta(ge=MIN_INT32, le=MAX_INT32)]
ReplicaCount = Annotated[int, msgspec.Meta(ge=0, le=MAX_REPLICAS_PER_GROUP)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_LEN)]
NameOrEmpty = Annotated[str, msgspec.Meta(max_length=MAX_NAME_LEN)]
Address = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ADDRESS_LEN)]
AddressOrEmpty = Annotated[str, msgspec.Meta(max_length=MAX_ADDRESS_LEN)]
Incarnation = Annotated[str, msgspec.Meta(max_length=MAX_INCARNATION_LEN)]   # "" = not stated
CheckCode = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_CHECK_CODE_LEN)]
FeatureLevel = Annotated[int, msgspec.Meta(ge=1, le=MAX_FEATURE_LEVEL)]
FeatureLevelOrZero = Annotated[int, msgspec.Meta(ge=0, le=MAX_FEATURE_LEVEL)]
AuditText = Annotated[str, msgspec.Meta(max_length=MAX_AUDIT_FIELD_LEN)]
Actor = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_AUDIT_FIELD_LEN)]
BrokerIds = Annotated[tuple[BrokerId, ...], msgspec.Meta(max_length=MAX_REPLICAS_PER_GROUP)]
SomeBrokerIds = Annotated[tuple[BrokerId, ...], msgspec.Meta(min_length=1, max_length=MAX_REPLICAS_PER_GROUP)]
LeaveReason = Annotated[str, msgspec.Meta(max_length=32)]
# Why a member leaves a SyncStateSet when it holds no acknowledged copy (ha/sync_state.py names it)
NOT_HOLDER_REASONS: Final = frozenset({"quarantined"})
AckMode = Literal["", "all", "quorum", "master"]                              # "" = not stated
Trigger = Literal["controller", "broker", "admin", "handover"]
ConfigUpdate = Annotated[dict[Name, Annotated[str, msgspec.Meta(max_length=MAX_CONFIG_VALUE_LEN)]],
                         msgspec.Meta(min_length=1, max_length=MAX_CONFIG_KEYS)]
ACK_MODES = frozenset(get_args(AckMode))
_ACK_MODE_OF: dict[str, AckMode] = {a: a for a in get_args(AckMode)}
assert TRIGGERS == get_args(Trigger)


def ack_mode_or_unstated(v: str) -> AckMode:
    """``v`` if it names an ack mode, else "" (not stated): for a peer's second-hand report."""
    return _ACK_MODE_OF.get(v, "")


def _unique(ids: tuple[int, ...], what: str) -> None:
    if len(set(ids)) != len(ids):
        raise MalformedRequest(f"{what} has duplicates")


# --------------------------------------------------------------------------- live info


class BrokerLiveInfo(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """What a broker last reported in its heartbeat, as seen alive by a controller majority.

    ``clean_shutdown`` False means: this incarnation started after an unclean shutdown and has
    not been re-admitted to a SyncStateSet since, so its log may miss acknowledged messages.
    """

    broker_id: BrokerId
    epoch: Count = 0
    max_offset: Count = 0
    confirm_offset: Count = 0
    election_priority: Int32 = 0
    clean_shutdown: bool = True
    # the fewest SyncStateSet members with which it acknowledges as master (0 = not stated)
    min_in_sync_replicas: ReplicaCount = 0
    ack_mode: AckMode = ""
    incarnation: Incarnation = ""   # the broker process that sent the report
    # its range digests found bytes that differ from its master's, not repaired yet: not a clean
    # candidate (controller/state/election.py)
    diverged: bool = False


# --------------------------------------------------------------------------- requests


class Request(msgspec.Struct, frozen=True, tag_field="t", forbid_unknown_fields=True, omit_defaults=True):
    """Base of every request. ``TYPE`` is its stable tag in the Raft log.

    Field types carry the ranges; ``check`` holds the rules between fields (raises
    MalformedRequest). Both hold for every request that ``decode_request`` or ``check_request``
    returns; a request built in memory is unchecked until one of them (or encode_request) ran."""

    TYPE: ClassVar[str] = ""
    WRITE: ClassVar[bool] = True

    def __post_init__(self) -> None:
        tuples_for_collections(self)    # callers may pass lists and sets (autoswitch/base/structs.py)

    def check(self) -> None:  # overridden where fields depend on each other
        pass

    @property
    def group(self) -> str | None:
        """The broker group a request is about (None: controller-wide)."""
        return self.broker_name if isinstance(self, GroupRequest) else None


class ApplyBrokerIdRequest(Request, frozen=True, tag="ApplyBrokerId"):
    TYPE: ClassVar[str] = "ApplyBrokerId"
    cluster_name: Name
    broker_name: Name
    applied_broker_id: BrokerId
    register_check_code: CheckCode
    ts_ms: Count = 0


class RegisterBrokerRequest(Request, frozen=True, tag="RegisterBroker"):
    TYPE: ClassVar[str] = "RegisterBroker"
    cluster_name: Name
    broker_name: Name
    broker_id: BrokerId
    broker_address: Address
    clean_shutdown: bool = True
    ts_ms: Count = 0
    broker_ha_address: AddressOrEmpty = ""   # "" = not given (slaves then use HA port = listen port + 1)
    incarnation: Incarnation = ""            # this broker process (new at every start)
    previous_incarnation: Incarnation = ""   # the incarnation whose clean stop this start follows
    crashed: bool = False                    # the last run did not stop cleanly (durable or not)


class ElectMasterRequest(Request, frozen=True, tag="ElectMaster"):
    """``broker_id``: the designated broker when ``designate``; else the asking broker (0 = none).

    ``alive``: every broker of the group that a controller majority considers alive, with its
    last report; ``dead_broker_ids``: brokers a controller majority has not heard from within the
    heartbeat timeout. Both are filled by the leader at proposal time. A non-designated election
    replaces an existing master that is not in ``alive`` only if that master is in
    ``dead_broker_ids`` (docs/design.md §2); otherwise it answers CONTROLLER_ELECT_MASTER_FAILED.

    ``handover_from`` (trigger "handover"): the master ``handover_from`` hands over to the designated
    ``broker_id``; a compare-and-set: it succeeds only while ``handover_from`` is still the master
    at ``expect_master_epoch`` and ``expect_sync_state_set_epoch`` and the target is in the
    SyncStateSet (never unclean).

    ``crash_only``: the majority's DEAD verdict on the master rests on closed sessions, not on
    the heartbeat timeout (crash-fast failover, docs/controller.md). Such an election may not be
    unclean: its safety comes from the SyncStateSet rule alone, not from the master lease.
    """

    TYPE: ClassVar[str] = "ElectMaster"
    cluster_name: NameOrEmpty
    broker_name: Name
    trigger: Trigger = TRIGGER_BROKER
    broker_id: BrokerIdOrZero = 0
    designate: bool = False
    alive: Annotated[tuple[BrokerLiveInfo, ...], msgspec.Meta(max_length=MAX_REPLICAS_PER_GROUP)] = ()
    ts_ms: Count = 0
    dead_broker_ids: BrokerIds = ()
    handover_from: BrokerIdOrZero = 0
    expect_master_epoch: Count = 0
    expect_sync_state_set_epoch: Count = 0
    crash_only: bool = False
    # (brokerId, zone) of the group's replicas as their heartbeats state them, filled by the
    # leader once feature level 2 is finalized (empty: no zones known)
    zones: Annotated[tuple[tuple[BrokerId, Name], ...], msgspec.Meta(max_length=MAX_REPLICAS_PER_GROUP)] = ()
    # An operator's guided unclean recovery (`admin unclean-recover --confirm`, feature level 2):
    # the designated replica may be elected outside the SyncStateSet and eligible replicas even
    # with enable_elect_unclean_master off; the plan's token is recorded with the election.
    unclean_recovery: AuditText = ""
    # The zones the group's replicas state their acks must span (the most any states; feature
    # level 2, filled by the leader): the decision says when the live replicas span fewer.
    min_in_sync_zones: Annotated[int, msgspec.Meta(ge=0, le=MAX_ZONES)] = 0

    def check(self) -> None:
        if self.designate and self.broker_id == 0:
            raise MalformedRequest("a designated election needs brokerId")
        if (self.trigger == TRIGGER_HANDOVER) != (self.handover_from != 0):
            raise MalformedRequest("a handover names handoverFrom, and only a handover does")
        if self.handover_from and (not self.designate or self.broker_id == self.handover_from
                                   or self.expect_master_epoch == 0 or self.expect_sync_state_set_epoch == 0):
            raise MalformedRequest("a handover designates another broker and names the MasterEpoch and "
                                   "syncStateSetEpoch it expects")
        alive = tuple(a.broker_id for a in self.alive)
        _unique(alive, "alive")
        _unique(self.dead_broker_ids, "deadBrokerIds")
        if set(alive) & set(self.dead_broker_ids):
            raise MalformedRequest("a broker cannot be both alive and dead")
        _unique(tuple(b for b, _z in self.zones), "zones")
        if self.unclean_recovery and (self.trigger != TRIGGER_ADMIN or not self.designate):
            raise MalformedRequest("an unclean recovery is an operator's designated election")


class AlterSyncStateSetRequest(Request, frozen=True, tag="AlterSyncStateSet"):
    TYPE: ClassVar[str] = "AlterSyncStateSet"
    broker_name: Name
    master_broker_id: BrokerId
    master_epoch: Count
    new_sync_state_set: SomeBrokerIds
    sync_state_set_epoch: Count
    alive_broker_ids: BrokerIds = ()   # filled by the leader from the majority view
    ts_ms: Count = 0
    # The master's stated min_in_sync_replicas (its heartbeats), filled by the leader; 0 = unknown
    master_min_in_sync_replicas: ReplicaCount = 0
    # Why members leave, as the master states it ((brokerId, reason), e.g. "quarantined": its range
    # digests found other bytes than the master's, so it holds no acknowledged copy and must not
    # become an eligible replica; feature level 3).
    leaving: Annotated[tuple[tuple[BrokerId, LeaveReason], ...], msgspec.Meta(max_length=MAX_REPLICAS_PER_GROUP)] = ()

    def check(self) -> None:
        _unique(self.new_sync_state_set, "newSyncStateSet")
        _unique(self.alive_broker_ids, "aliveBrokerIds")
        _unique(tuple(b for b, _ in self.leaving), "leaving")


class CleanBrokerDataRequest(Request, frozen=True, tag="CleanBrokerData"):
    """``broker_ids`` empty = the whole group."""

    TYPE: ClassVar[str] = "CleanBrokerData"
    cluster_name: NameOrEmpty
    broker_name: Name
    broker_ids: BrokerIds = ()
    clean_living_broker: bool = False
    alive_broker_ids: BrokerIds = ()
    ts_ms: Count = 0

    def check(self) -> None:
        _unique(self.broker_ids, "brokerIds")
        _unique(self.alive_broker_ids, "aliveBrokerIds")


class UpdateControllerConfigRequest(Request, frozen=True, tag="UpdateControllerConfig"):
    TYPE: ClassVar[str] = "UpdateControllerConfig"
    config: ConfigUpdate
    ts_ms: Count = 0
    # Filled by the leader: the largest heartbeat timeout the brokers it hears sized their master
    # leases for; heartbeat_timeout_ms may not go below it (docs/controller.md).
    broker_timeout_floor_ms: Annotated[int, msgspec.Meta(ge=0, le=600_000)] = 0


class SetPreferredMasterRequest(Request, frozen=True, tag="SetPreferredMaster"):
    """The group's preferred master (Kafka's preferred leader): the leader moves mastership back to
    it through a graceful handover when ``auto_rebalance_masters`` is on. 0 clears it."""

    TYPE: ClassVar[str] = "SetPreferredMaster"
    broker_name: Name
    broker_id: BrokerIdOrZero = 0
    ts_ms: Count = 0


class SetMaintenanceRequest(Request, frozen=True, tag="SetMaintenance"):
    """Put a broker in maintenance (cordon) or take it out (feature level 2). A replica in
    maintenance keeps replicating but is not elected master while a clean replica outside
    maintenance exists, is never a preferred-master move's target, and while it is master the
    leader hands its mastership to an in-sync replica outside maintenance (the drain)."""

    TYPE: ClassVar[str] = "SetMaintenance"
    broker_name: Name
    broker_id: BrokerId
    on: bool
    ts_ms: Count = 0


class SetZonePreferenceRequest(Request, frozen=True, tag="SetZonePreference"):
    """The zones a group's elections prefer, most preferred first (feature level 2): among the
    replicas that hold every acknowledged message, one in an earlier zone wins (Redpanda's leader
    pinning). Empty clears it."""

    TYPE: ClassVar[str] = "SetZonePreference"
    broker_name: Name
    zones: Annotated[tuple[Name, ...], msgspec.Meta(max_length=MAX_ZONES)] = ()
    ts_ms: Count = 0

    def check(self) -> None:
        if len(set(self.zones)) != len(self.zones):
            raise MalformedRequest("zones has duplicates")


class SetControllerMaintenanceRequest(Request, frozen=True, tag="SetControllerMaintenance"):
    """Put a controller member in maintenance (it keeps voting and replicating, never campaigns;
    a leader in maintenance hands leadership over) or take it out (feature level 2)."""

    TYPE: ClassVar[str] = "SetControllerMaintenance"
    node_id: Name
    on: bool
    ts_ms: Count = 0
    # Filled by the leader: the voters; at least one must stay outside maintenance (someone has
    # to be able to campaign when the leader dies).
    voters: Annotated[tuple[Name, ...], msgspec.Meta(max_length=64)] = ()


class ImportGroupRequest(Request, frozen=True, tag="ImportGroup"):
    """A broker group as another controller holds it (RocketMQ's, read through its 1006 reply;
    docs/rocketmq.md "Moving a running RocketMQ cluster"): its brokerIds and addresses, master,
    MasterEpoch, SyncStateSet and syncStateSetEpoch, taken over unchanged so that running brokers
    keep their identity files, their roles and their epochs (feature level 3). Only into a group
    these controllers do not know; the same import again is a no-op."""

    TYPE: ClassVar[str] = "ImportGroup"
    cluster_name: Name
    broker_name: Name
    brokers: Annotated[tuple[tuple[BrokerId, Address], ...],
                       msgspec.Meta(min_length=1, max_length=MAX_REPLICAS_PER_GROUP)]
    master_epoch: Annotated[int, msgspec.Meta(ge=0, le=MAX_INT32)]      # a Java int on the brokers
    sync_state_set_epoch: Annotated[int, msgspec.Meta(ge=0, le=MAX_INT32)]
    master_broker_id: BrokerIdOrZero = 0      # 0 = no master
    sync_state_set: BrokerIds = ()
    source: AuditText = ""                    # where it was read (the history record names it)
    ts_ms: Count = 0

    def check(self) -> None:
        ids = tuple(b for b, _a in self.brokers)
        _unique(ids, "brokers")
        _unique(self.sync_state_set, "syncStateSet")
        if not set(self.sync_state_set) <= set(ids):
            raise MalformedRequest("the SyncStateSet names a brokerId that is not among the brokers")
        if self.master_broker_id and self.master_broker_id not in self.sync_state_set:
            raise MalformedRequest("the master is not in the SyncStateSet")
        if self.master_broker_id and self.master_epoch == 0:
            raise MalformedRequest("a group with a master has a MasterEpoch of at least 1")


class AdminAuditRequest(Request, frozen=True, tag="AdminAudit"):
    """Who made an admin call, what it was and how it ended (docs/security.md): changes no state,
    becomes one ``AdminAudit`` record in every node's event history."""

    TYPE: ClassVar[str] = "AdminAudit"
    actor: Actor
    action: Name
    broker_name: NameOrEmpty = ""
    detail: AuditText = ""
    code: Int32 = 0
    remark: AuditText = ""
    ts_ms: Count = 0
    # Proposed in the same Raft append right after the admin's write (issue 29): the record takes
    # code and remark from that entry's outcome when applied, so a write is never in the log
    # without its audit record, whatever happens to the caller afterwards.
    outcome_of_previous: bool = False


class FinalizeFeaturesRequest(Request, frozen=True, tag="FinalizeFeatures"):
    """The cluster's finalized feature level (autoswitch/base/features.py): the leader proposes it
    only after every controller and registered broker said it supports the target, and a lowering
    only past levels whose records the lower one reads (``plan_finalize``)."""

    TYPE: ClassVar[str] = "FinalizeFeatures"
    level: FeatureLevel
    ts_ms: Count = 0
    # Filled by the leader: the voters of the configuration in force. The state machine refuses a
    # level that one of them, as the replicated state records it, does not support (the check is
    # part of the committed entry: a member rolled back after the leader asked is caught once its
    # record says so; issue 58, item 6). Empty: not checked (entries of earlier releases).
    voters: Annotated[tuple[Name, ...], msgspec.Meta(max_length=MAX_CONTROLLERS)] = ()
    # A new cluster's first level: applied only while the state is pristine (nothing written yet
    # at a lower level), so an upgraded cluster stays where it was (Kafka formats a new cluster
    # at the newest metadata.version).
    bootstrap: bool = False


class RecordMemberLevelRequest(Request, frozen=True, tag="RecordMemberLevel"):
    """The highest feature level controller member ``node_id`` runs, as it answered the leader
    (0: forget the member, it left the configuration). FinalizeFeatures checks the voters' records."""

    TYPE: ClassVar[str] = "RecordMemberLevel"
    node_id: Name
    level: FeatureLevelOrZero
    ts_ms: Count = 0


class CheckStateHashRequest(Request, frozen=True, tag="CheckStateHash"):
    """The leader's periodic marker for the online state hash check (docs/controller.md "State
    hash check"): changes no state; every member that applies it hashes its state right there,
    so all members hash the state as of the same applied index, and compare with each other."""

    TYPE: ClassVar[str] = "CheckStateHash"
    ts_ms: Count = 0


# Reads: served by ControllerStateMachine.query() on the leader after a read-index barrier.


class GetNextBrokerIdRequest(Request, frozen=True, tag="GetNextBrokerId"):
    TYPE: ClassVar[str] = "GetNextBrokerId"
    WRITE: ClassVar[bool] = False
    cluster_name: Name
    broker_name: Name


class GetReplicaInfoRequest(Request, frozen=True, tag="GetReplicaInfo"):
    TYPE: ClassVar[str] = "GetReplicaInfo"
    WRITE: ClassVar[bool] = False
    broker_name: Name


class GetSyncStateDataRequest(Request, frozen=True, tag="GetSyncStateData"):
    """``broker_names`` empty = every group (bounded by MAX_QUERY_GROUPS)."""

    TYPE: ClassVar[str] = "GetSyncStateData"
    WRITE: ClassVar[bool] = False
    broker_names: Annotated[tuple[Name, ...], msgspec.Meta(max_length=MAX_QUERY_GROUPS)] = ()


class GetMetaDataRequest(Request, frozen=True, tag="GetMetaData"):
    TYPE: ClassVar[str] = "GetMetaData"
    WRITE: ClassVar[bool] = False


class GetControllerConfigRequest(Request, frozen=True, tag="GetControllerConfig"):
    TYPE: ClassVar[str] = "GetControllerConfig"
    WRITE: ClassVar[bool] = False


# Every write request carries the proposing leader's ``ts_ms`` (0 = not stamped yet).
WriteRequest = (ApplyBrokerIdRequest | RegisterBrokerRequest | ElectMasterRequest | AlterSyncStateSetRequest
                | CleanBrokerDataRequest | UpdateControllerConfigRequest | AdminAuditRequest | SetPreferredMasterRequest
                | CheckStateHashRequest | FinalizeFeaturesRequest | SetMaintenanceRequest
                | SetControllerMaintenanceRequest | SetZonePreferenceRequest | RecordMemberLevelRequest
                | ImportGroupRequest)
WRITE_REQUESTS: dict[str, type[Request]] = {
    c.TYPE: c
    for c in (ApplyBrokerIdRequest, RegisterBrokerRequest, ElectMasterRequest, AlterSyncStateSetRequest,
              CleanBrokerDataRequest, UpdateControllerConfigRequest, AdminAuditRequest, SetPreferredMasterRequest,
              CheckStateHashRequest, FinalizeFeaturesRequest, SetMaintenanceRequest, SetControllerMaintenanceRequest,
              SetZonePreferenceRequest, RecordMemberLevelRequest, ImportGroupRequest)
}
assert set(WRITE_REQUESTS.values()) == set(WriteRequest.__args__)
# The requests about one broker group (``broker_name``); the rest are controller-wide.
GroupRequest = (ApplyBrokerIdRequest | RegisterBrokerRequest | ElectMasterRequest | AlterSyncStateSetRequest
                | CleanBrokerDataRequest | AdminAuditRequest | SetPreferredMasterRequest | GetNextBrokerIdRequest
                | GetReplicaInfoRequest | SetMaintenanceRequest | SetZonePreferenceRequest | ImportGroupRequest)
READ_REQUESTS: dict[str, type[Request]] = {
    c.TYPE: c
    for c in (GetNextBrokerIdRequest, GetReplicaInfoRequest, GetSyncStateDataRequest, GetMetaDataRequest,
              GetControllerConfigRequest)
}


# --------------------------------------------------------------------------- replies


class ReplicaView(msgspec.Struct, frozen=True):
    """One group's replica info after the operation (what brokers consume)."""

    cluster_name: str
    broker_name: str
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int
    eligible_replicas: tuple[int, ...] = ()
    master_ha_address: str | None = None
    preferred_master: int = 0          # 0 = none
    maintenance: tuple[int, ...] = ()  # replicas in maintenance (SetMaintenance)
    zone_preference: tuple[str, ...] = ()   # SetZonePreference, most preferred first
    diverged: tuple[int, ...] = ()     # replicas holding no acknowledged copy (GroupState.diverged)

    def to_dict(self) -> dict:
        return {
            "clusterName": self.cluster_name, "brokerName": self.broker_name,
            "masterBrokerId": self.master_broker_id, "masterAddress": self.master_address,
            "masterEpoch": self.master_epoch, "syncStateSet": list(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch, "eligibleReplicas": list(self.eligible_replicas),
            "masterHaAddress": self.master_ha_address, "preferredMaster": self.preferred_master,
            **({"maintenance": list(self.maintenance)} if self.maintenance else {}),
            **({"zonePreference": list(self.zone_preference)} if self.zone_preference else {}),
            **({"diverged": list(self.diverged)} if self.diverged else {}),
        }


class Reply(msgspec.Struct, frozen=True):
    """``replica`` is set for group operations (also on most rejections, as RocketMQ does, so a
    fenced master learns the current epochs); ``broker_id`` for GetNextBrokerId / ApplyBrokerId;
    ``data`` (JSON-able) for the bulk reads and config."""

    code: int = Code.SUCCESS
    remark: str = ""
    replica: ReplicaView | None = None
    broker_id: int | None = None
    data: Any = None
    # ElectMaster / AlterSyncStateSet: the decision's typed record (controller/state/explain.py)
    decision: Any = None

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"code": int(self.code), "remark": self.remark}
        if self.replica is not None:
            out["replica"] = self.replica.to_dict()
        if self.broker_id is not None:
            out["brokerId"] = self.broker_id
        if self.data is not None:
            out["data"] = self.data
        return out


# --------------------------------------------------------------------------- events


class Event(msgspec.Struct, frozen=True):
    """An applied state change. ``HISTORY`` is the name in the event history record."""

    HISTORY: ClassVar[str] = ""
    broker_name: str


class ApplyBrokerIdEvent(Event, frozen=True):
    HISTORY: ClassVar[str] = "ApplyBrokerId"
    cluster_name: str
    broker_id: int
    address: str
    register_check_code: str
    ts_ms: int


class ImportGroupEvent(Event, frozen=True):
    """A group taken over from another controller (ImportGroupRequest): created with these
    brokers, master, epochs and SyncStateSet."""

    HISTORY: ClassVar[str] = "ImportGroup"
    cluster_name: str
    brokers: tuple[tuple[int, str], ...]
    master_broker_id: int | None
    master_epoch: int
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int
    source: str
    ts_ms: int


class UpdateBrokerAddressEvent(Event, frozen=True):
    """A registration changed the broker's addresses or its incarnation (the process)."""

    HISTORY: ClassVar[str] = "RegisterBroker"
    broker_id: int
    address: str
    ha_address: str = ""
    incarnation: str = ""


class ElectMasterEvent(Event, frozen=True):
    """New master (or none: "NoMaster"). MasterEpoch always +1. ``sync_state_set`` None keeps the
    set (RocketMQ keeps it when nobody could be elected); otherwise it replaces it and
    syncStateSetEpoch +1."""

    HISTORY: ClassVar[str] = "ElectMaster"
    new_master: int | None
    sync_state_set: tuple[int, ...] | None
    eligible: tuple[int, ...]
    unclean: bool
    reason: str
    # The new MasterEpoch is at least this (0: just +1): an operator's election past a controller
    # state older than the brokers' (a restored snapshot) must be above every epoch they report.
    min_epoch: int = 0
    # What caused it, for the history record: the election request's trigger ("registration" for a
    # registration that ended a master's claim), and whether the master was dead on crash evidence.
    trigger: str = ""
    crash: bool = False
    # The group's replicas that hold no acknowledged copy (diverged, quarantined, repairing) after
    # this event; None: unchanged (GroupState.diverged, feature level 3).
    diverged: tuple[int, ...] | None = None


class AlterSyncStateSetEvent(Event, frozen=True):
    HISTORY: ClassVar[str] = "AlterSyncStateSet"
    sync_state_set: tuple[int, ...]
    eligible: tuple[int, ...]
    reason: str
    diverged: tuple[int, ...] | None = None     # as in ElectMasterEvent


class EligibleChangeEvent(Event, frozen=True):
    """Eligible replicas change without an SSS change (a replica reported data loss)."""

    HISTORY: ClassVar[str] = "RegisterBroker"
    eligible: tuple[int, ...]
    reason: str


class CleanBrokerDataEvent(Event, frozen=True):
    HISTORY: ClassVar[str] = "CleanBrokerData"
    broker_ids: tuple[int, ...]   # empty = the whole group


class UpdateConfigEvent(Event, frozen=True):
    HISTORY: ClassVar[str] = "UpdateConfig"
    changes: tuple[tuple[str, str], ...]


class FeatureLevelEvent(Event, frozen=True):
    """The cluster's finalized feature level changed (``broker_name`` is "": cluster-wide)."""

    HISTORY: ClassVar[str] = "FinalizeFeatures"
    level: int
    previous: int


class PreferredMasterEvent(Event, frozen=True):
    HISTORY: ClassVar[str] = "PreferredMaster"
    broker_id: int              # 0 = cleared


class MaintenanceEvent(Event, frozen=True):
    HISTORY: ClassVar[str] = "Maintenance"
    broker_id: int
    on: bool


class ZonePreferenceEvent(Event, frozen=True):
    HISTORY: ClassVar[str] = "ZonePreference"
    zones: tuple[str, ...]


class MemberLevelEvent(Event, frozen=True):
    """A controller member's highest supported feature level, recorded (0: forgotten)."""

    HISTORY: ClassVar[str] = "MemberLevel"
    node_id: str
    level: int


class ControllerMaintenanceEvent(Event, frozen=True):
    """A controller member entered or left maintenance (``broker_name`` is "": cluster-wide)."""

    HISTORY: ClassVar[str] = "ControllerMaintenance"
    node_id: str
    on: bool


class AdminAuditEvent(Event, frozen=True):
    """Changes nothing; recorded in the history (who did what, with which result)."""

    HISTORY: ClassVar[str] = "AdminAudit"
    actor: str
    action: str
    detail: str
    code: int
    remark: str


def event_name(ev: Event) -> str:
    if isinstance(ev, ElectMasterEvent) and ev.new_master is None:
        return "NoMaster"
    return ev.HISTORY


# --------------------------------------------------------------------------- encoding

_ENCODER = msgspec.json.Encoder()
_WRITE_TYPES = tuple(WRITE_REQUESTS.values())
_DECODER = msgspec.json.Decoder(functools.reduce(operator.or_, _WRITE_TYPES))
_DECODERS = {c: msgspec.json.Decoder(c) for c in (*_WRITE_TYPES, *READ_REQUESTS.values())}
_BYTES_TYPES = (bytes, bytearray, memoryview)


def encode_request(req: Request) -> bytes:
    """Bytes for the Raft log. Checked first (MalformedRequest): the bytes are what
    decode_request accepts, so nothing is proposed that apply would refuse."""
    if not isinstance(req, Request) or req.TYPE not in WRITE_REQUESTS:
        raise MalformedRequest(f"not a write request: {type(req).__name__}")
    data = _encode(req)
    if len(data) > MAX_REQUEST_BYTES:
        raise MalformedRequest(f"request of {len(data)} bytes exceeds {MAX_REQUEST_BYTES}")
    decode_request(data)
    return data


def decode_request(data: bytes) -> Request:
    """Inverse of encode_request; MalformedRequest on anything unexpected."""
    if not isinstance(data, _BYTES_TYPES):
        raise MalformedRequest("request data must be bytes")
    if len(data) > MAX_REQUEST_BYTES:
        raise MalformedRequest(f"request of {len(data)} bytes exceeds {MAX_REQUEST_BYTES}")
    return _decoded(_DECODER, data)


def check_request(req: Request) -> Request:
    """``req`` with its field ranges and rules checked (MalformedRequest), reads included: the
    same strict decode a log entry gets, of ``req``'s own encoding."""
    decoder = _DECODERS.get(type(req))
    if decoder is None:
        raise MalformedRequest(f"not a request: {type(req).__name__}")
    return _decoded(decoder, _encode(req))


_LIVE_INFO_DECODER = msgspec.json.Decoder(BrokerLiveInfo)


def recovery_token_state(token: str) -> tuple[int, int] | None:
    """(MasterEpoch, syncStateSetEpoch) an unclean-recovery plan was made at, from its token
    (``<MasterEpoch>.<syncStateSetEpoch>.<digest>``, autoswitch/app/unclean_plan.py); None when the
    token does not have that form."""
    parts = token.split(".")
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 19 for p in parts[:2]) or not parts[2].isalnum():
        return None
    return int(parts[0]), int(parts[1])


def check_live_info(info: BrokerLiveInfo) -> BrokerLiveInfo:
    """``info`` with its field ranges checked (MalformedRequest): a heartbeat's report."""
    try:
        return _LIVE_INFO_DECODER.decode(_ENCODER.encode(info))
    except (msgspec.DecodeError, TypeError, ValueError) as e:
        raise MalformedRequest(f"bad report: {e}") from None


def _encode(req: Request) -> bytes:
    try:
        return _ENCODER.encode(req)
    except (TypeError, ValueError, OverflowError) as e:   # a field of a type JSON cannot carry (or a lone surrogate)
        raise MalformedRequest(f"{req.TYPE} cannot be encoded: {e}") from None


def _decoded(decoder: msgspec.json.Decoder, data: bytes) -> Request:
    try:
        req = decoder.decode(data)
    except (msgspec.DecodeError, ValueError, RecursionError) as e:   # ValidationError is a DecodeError;
        # invalid UTF-8 comes as UnicodeDecodeError (a ValueError)
        raise MalformedRequest(f"bad request entry: {e}") from None
    req.check()
    return req
