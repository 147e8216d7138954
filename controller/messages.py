"""Requests, replies and events of the controller state machine, and their Raft-log bytes.

Write requests travel through the Raft log as bytes (``encode_request``) and are decoded on
every node by ``ControllerStateMachine.apply``. Everything that depends on time or on liveness
(the proposal timestamp ``ts_ms``, the brokers a controller majority considers alive and what
they reported) is filled in by the proposing leader, so apply is deterministic everywhere.

Requests, events, replies and views are msgspec Structs: typed records the library constructs,
compares and encodes. A write request's log form is one compact JSON object tagged with its type,
``{"t": "<type>", ...every field}``, UTF-8, at most ``MAX_REQUEST_BYTES``; JSON keeps the log
greppable and Python ints exact (no 32-bit offsets). Decoding checks every field's type (msgspec,
strict: a JSON ``true`` is not an integer, unknown fields are refused), then its range
(``validate``); a bad entry gives ``MalformedRequest`` (reply code CONTROLLER_INVALID_REQUEST),
never an exception out of apply.

Why one long module: each request type sits next to its validation rules.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, ClassVar

import msgspec
from autoswitch.controller.codes import Code
from msgspec.structs import force_setattr

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.limits import (
    MAX_ADDRESS_LEN,
    MAX_BROKER_ID,
    MAX_INCARNATION_LEN,
    MAX_INT64,
    MAX_NAME_LEN,
    MAX_REPLICAS_PER_GROUP,
)

MAX_REQUEST_BYTES = 1 << 20
MAX_CHECK_CODE_LEN = 512
ACK_MODES = frozenset({"", "all", "quorum", "master"})
MAX_QUERY_GROUPS = 100_000
MAX_CONFIG_KEYS = 64
MAX_CONFIG_VALUE_LEN = 1024
MAX_AUDIT_FIELD_LEN = 1024
MIN_INT32, MAX_INT32 = -(1 << 31), (1 << 31) - 1

TRIGGER_CONTROLLER = "controller"   # the leader's scan saw the master dead (majority opinion)
TRIGGER_BROKER = "broker"           # a broker found no master and asked
TRIGGER_ADMIN = "admin"             # an operator (designated or not)
TRIGGER_HANDOVER = "handover"       # the master hands over to an in-sync slave (compare-and-set)
TRIGGERS = (TRIGGER_CONTROLLER, TRIGGER_BROKER, TRIGGER_ADMIN, TRIGGER_HANDOVER)
# Not a request's trigger: a registration that ended a master's claim (history records only).
TRIGGER_REGISTRATION = "registration"


class MalformedRequest(AutoswitchError):
    """A request that cannot be decoded or has a field missing / of the wrong type / out of range."""

    code = "CONTROLLER_INVALID_REQUEST"


# --------------------------------------------------------------------------- live info


class BrokerLiveInfo(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """What a broker last reported in its heartbeat, as seen alive by a controller majority.

    ``clean_shutdown`` False means: this incarnation started after an unclean shutdown and has
    not been re-admitted to a SyncStateSet since, so its log may miss acknowledged messages.
    """

    broker_id: int
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0
    clean_shutdown: bool = True
    # the fewest SyncStateSet members with which it acknowledges as master (0 = not stated)
    min_in_sync_replicas: int = 0
    ack_mode: str = ""              # "all" | "quorum" | "master"; "" = not stated
    incarnation: str = ""           # the broker process that sent the report; "" = not stated

    def validate(self) -> None:
        _check_id(self.broker_id, "alive.brokerId")
        _check_int(self.epoch, "alive.epoch", 0, MAX_INT64)
        _check_int(self.max_offset, "alive.maxOffset", 0, MAX_INT64)
        _check_int(self.confirm_offset, "alive.confirmOffset", 0, MAX_INT64)
        _check_int(self.election_priority, "alive.electionPriority", MIN_INT32, MAX_INT32)
        _check_bool(self.clean_shutdown, "alive.cleanShutdown")
        _check_int(self.min_in_sync_replicas, "alive.minInSyncReplicas", 0, MAX_REPLICAS_PER_GROUP)
        if self.ack_mode not in ACK_MODES:
            raise MalformedRequest(f"alive.ackMode must be one of {sorted(ACK_MODES)}")
        _check_str(self.incarnation, "alive.incarnation", MAX_INCARNATION_LEN, allow_empty=True)


# --------------------------------------------------------------------------- requests


class Request(msgspec.Struct, frozen=True, tag_field="t", forbid_unknown_fields=True, omit_defaults=True):
    """Base of every request. ``TYPE`` is its stable tag in the Raft log."""

    TYPE: ClassVar[str] = ""
    WRITE: ClassVar[bool] = True

    def __post_init__(self) -> None:
        # Accept lists and sets from callers; the canonical form (and the log form) is a tuple.
        for name in self.__struct_fields__:
            v = getattr(self, name)
            if isinstance(v, list):
                force_setattr(self, name, tuple(v))
            elif isinstance(v, set | frozenset):
                try:
                    force_setattr(self, name, tuple(sorted(v)))
                except TypeError:
                    pass  # mixed types: validate() rejects it

    def validate(self) -> None:  # overridden; raises MalformedRequest
        pass

    @property
    def group(self) -> str | None:
        """The broker group a request is about (None: controller-wide)."""
        return self.broker_name if isinstance(self, GroupRequest) else None


class ApplyBrokerIdRequest(Request, frozen=True, tag="ApplyBrokerId"):
    TYPE: ClassVar[str] = "ApplyBrokerId"
    cluster_name: str
    broker_name: str
    applied_broker_id: int
    register_check_code: str
    ts_ms: int = 0

    def validate(self) -> None:
        _check_names(self.cluster_name, self.broker_name)
        _check_id(self.applied_broker_id, "appliedBrokerId")
        _check_str(self.register_check_code, "registerCheckCode", MAX_CHECK_CODE_LEN, allow_empty=False)
        _check_ts(self.ts_ms)


class RegisterBrokerRequest(Request, frozen=True, tag="RegisterBroker"):
    TYPE: ClassVar[str] = "RegisterBroker"
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    clean_shutdown: bool = True
    ts_ms: int = 0
    broker_ha_address: str = ""     # "" = not given (slaves then use HA port = listen port + 1)
    incarnation: str = ""           # this broker process (new at every start); "" = not stated
    previous_incarnation: str = ""  # the incarnation whose clean stop this start follows; "" = none

    def validate(self) -> None:
        _check_names(self.cluster_name, self.broker_name)
        _check_id(self.broker_id, "brokerId")
        _check_str(self.broker_address, "brokerAddress", MAX_ADDRESS_LEN, allow_empty=False)
        _check_str(self.broker_ha_address, "brokerHaAddress", MAX_ADDRESS_LEN, allow_empty=True)
        _check_str(self.incarnation, "incarnation", MAX_INCARNATION_LEN, allow_empty=True)
        _check_str(self.previous_incarnation, "previousIncarnation", MAX_INCARNATION_LEN, allow_empty=True)
        _check_bool(self.clean_shutdown, "cleanShutdown")
        _check_ts(self.ts_ms)


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
    cluster_name: str
    broker_name: str
    trigger: str = TRIGGER_BROKER
    broker_id: int = 0
    designate: bool = False
    alive: tuple[BrokerLiveInfo, ...] = ()
    ts_ms: int = 0
    dead_broker_ids: tuple[int, ...] = ()
    handover_from: int = 0
    expect_master_epoch: int = 0
    expect_sync_state_set_epoch: int = 0
    crash_only: bool = False

    def validate(self) -> None:
        _check_str(self.cluster_name, "clusterName", MAX_NAME_LEN, allow_empty=True)
        _check_str(self.broker_name, "brokerName", MAX_NAME_LEN, allow_empty=False)
        _check_bool(self.crash_only, "crashOnly")
        if self.trigger not in TRIGGERS:
            raise MalformedRequest(f"trigger must be one of {TRIGGERS}")
        _check_int(self.broker_id, "brokerId", 0, MAX_BROKER_ID)
        _check_bool(self.designate, "designate")
        if self.designate and self.broker_id == 0:
            raise MalformedRequest("a designated election needs brokerId")
        _check_int(self.handover_from, "handoverFrom", 0, MAX_BROKER_ID)
        _check_int(self.expect_master_epoch, "expectMasterEpoch", 0, MAX_INT64)
        _check_int(self.expect_sync_state_set_epoch, "expectSyncStateSetEpoch", 0, MAX_INT64)
        if (self.trigger == TRIGGER_HANDOVER) != (self.handover_from != 0):
            raise MalformedRequest("a handover names handoverFrom, and only a handover does")
        if self.handover_from and (not self.designate or self.broker_id == self.handover_from
                                   or self.expect_master_epoch == 0 or self.expect_sync_state_set_epoch == 0):
            raise MalformedRequest("a handover designates another broker and names the MasterEpoch and "
                                   "syncStateSetEpoch it expects")
        _check_alive(self.alive)
        _check_ids(self.dead_broker_ids, "deadBrokerIds")
        if {a.broker_id for a in self.alive} & set(self.dead_broker_ids):
            raise MalformedRequest("a broker cannot be both alive and dead")
        _check_ts(self.ts_ms)


class AlterSyncStateSetRequest(Request, frozen=True, tag="AlterSyncStateSet"):
    TYPE: ClassVar[str] = "AlterSyncStateSet"
    broker_name: str
    master_broker_id: int
    master_epoch: int
    new_sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int
    alive_broker_ids: tuple[int, ...] = ()   # filled by the leader from the majority view
    ts_ms: int = 0
    # The master's stated min_in_sync_replicas (its heartbeats), filled by the leader; 0 = unknown
    master_min_in_sync_replicas: int = 0

    def validate(self) -> None:
        # The hot write (every SyncStateSet change): one pass over the plain valid shape, which
        # _validate_rules accepts too; anything else gets the rules, in order, for their message.
        name, mb, me, se, ts = self.broker_name, self.master_broker_id, self.master_epoch, \
            self.sync_state_set_epoch, self.ts_ms
        if (type(name) is str and 0 < len(name) <= MAX_NAME_LEN and name.isascii()
                and type(mb) is int and 1 <= mb <= MAX_BROKER_ID and type(me) is int and 0 <= me <= MAX_INT64
                and type(se) is int and 0 <= se <= MAX_INT64 and type(ts) is int and 0 <= ts <= MAX_INT64
                and _plain_ids(self.new_sync_state_set) and self.new_sync_state_set
                and _plain_ids(self.alive_broker_ids) and type(self.master_min_in_sync_replicas) is int
                and 0 <= self.master_min_in_sync_replicas <= MAX_REPLICAS_PER_GROUP):
            return
        self._validate_rules()

    def _validate_rules(self) -> None:
        _check_str(self.broker_name, "brokerName", MAX_NAME_LEN, allow_empty=False)
        _check_id(self.master_broker_id, "masterBrokerId")
        _check_int(self.master_epoch, "masterEpoch", 0, MAX_INT64)
        _check_int(self.sync_state_set_epoch, "syncStateSetEpoch", 0, MAX_INT64)
        _check_ids(self.new_sync_state_set, "newSyncStateSet")
        if not self.new_sync_state_set:
            raise MalformedRequest("newSyncStateSet is empty")
        _check_ids(self.alive_broker_ids, "aliveBrokerIds")
        _check_int(self.master_min_in_sync_replicas, "masterMinInSyncReplicas", 0, MAX_REPLICAS_PER_GROUP)
        _check_ts(self.ts_ms)


class CleanBrokerDataRequest(Request, frozen=True, tag="CleanBrokerData"):
    """``broker_ids`` empty = the whole group."""

    TYPE: ClassVar[str] = "CleanBrokerData"
    cluster_name: str
    broker_name: str
    broker_ids: tuple[int, ...] = ()
    clean_living_broker: bool = False
    alive_broker_ids: tuple[int, ...] = ()
    ts_ms: int = 0

    def validate(self) -> None:
        _check_str(self.cluster_name, "clusterName", MAX_NAME_LEN, allow_empty=True)
        _check_str(self.broker_name, "brokerName", MAX_NAME_LEN, allow_empty=False)
        _check_ids(self.broker_ids, "brokerIds")
        _check_bool(self.clean_living_broker, "cleanLivingBroker")
        _check_ids(self.alive_broker_ids, "aliveBrokerIds")
        _check_ts(self.ts_ms)


class UpdateControllerConfigRequest(Request, frozen=True, tag="UpdateControllerConfig"):
    TYPE: ClassVar[str] = "UpdateControllerConfig"
    config: dict[str, str] = msgspec.field(default_factory=dict)
    ts_ms: int = 0
    # Filled by the leader: the largest heartbeat timeout the brokers it hears sized their master
    # leases for; heartbeat_timeout_ms may not go below it (docs/controller.md).
    broker_timeout_floor_ms: int = 0

    def validate(self) -> None:
        if not isinstance(self.config, dict) or not self.config:
            raise MalformedRequest("config must be a non-empty map")
        if len(self.config) > MAX_CONFIG_KEYS:
            raise MalformedRequest(f"at most {MAX_CONFIG_KEYS} config keys per update")
        if (not isinstance(self.broker_timeout_floor_ms, int) or isinstance(self.broker_timeout_floor_ms, bool)
                or not 0 <= self.broker_timeout_floor_ms <= 600_000):
            raise MalformedRequest("broker_timeout_floor_ms must be an int in [0, 600000]")
        for k, v in self.config.items():
            _check_str(k, "config key", MAX_NAME_LEN, allow_empty=False)
            _check_str(v, f"config[{k}]", MAX_CONFIG_VALUE_LEN, allow_empty=True)
        _check_ts(self.ts_ms)


class SetPreferredMasterRequest(Request, frozen=True, tag="SetPreferredMaster"):
    """The group's preferred master (Kafka's preferred leader): the leader moves mastership back to
    it through a graceful handover when ``auto_rebalance_masters`` is on. 0 clears it."""

    TYPE: ClassVar[str] = "SetPreferredMaster"
    broker_name: str
    broker_id: int = 0
    ts_ms: int = 0

    def validate(self) -> None:
        _check_str(self.broker_name, "brokerName", MAX_NAME_LEN, allow_empty=False)
        _check_int(self.broker_id, "brokerId", 0, MAX_BROKER_ID)
        _check_ts(self.ts_ms)


class AdminAuditRequest(Request, frozen=True, tag="AdminAudit"):
    """Who made an admin call, what it was and how it ended (docs/security.md): changes no state,
    becomes one ``AdminAudit`` record in every node's event history."""

    TYPE: ClassVar[str] = "AdminAudit"
    actor: str
    action: str
    broker_name: str = ""
    detail: str = ""
    code: int = 0
    remark: str = ""
    ts_ms: int = 0
    # Proposed in the same Raft append right after the admin's write (issue 29): the record takes
    # code and remark from that entry's outcome when applied, so a write is never in the log
    # without its audit record, whatever happens to the caller afterwards.
    outcome_of_previous: bool = False

    def validate(self) -> None:
        _check_str(self.actor, "actor", MAX_AUDIT_FIELD_LEN, allow_empty=False)
        _check_str(self.action, "action", MAX_NAME_LEN, allow_empty=False)
        _check_str(self.broker_name, "brokerName", MAX_NAME_LEN, allow_empty=True)
        _check_str(self.detail, "detail", MAX_AUDIT_FIELD_LEN, allow_empty=True)
        _check_int(self.code, "code", -(1 << 31), (1 << 31) - 1)
        _check_str(self.remark, "remark", MAX_AUDIT_FIELD_LEN, allow_empty=True)
        _check_ts(self.ts_ms)


# Reads: served by ControllerStateMachine.query() on the leader after a read-index barrier.


class GetNextBrokerIdRequest(Request, frozen=True, tag="GetNextBrokerId"):
    TYPE: ClassVar[str] = "GetNextBrokerId"
    WRITE: ClassVar[bool] = False
    cluster_name: str
    broker_name: str

    def validate(self) -> None:
        _check_names(self.cluster_name, self.broker_name)


class GetReplicaInfoRequest(Request, frozen=True, tag="GetReplicaInfo"):
    TYPE: ClassVar[str] = "GetReplicaInfo"
    WRITE: ClassVar[bool] = False
    broker_name: str

    def validate(self) -> None:
        _check_str(self.broker_name, "brokerName", MAX_NAME_LEN, allow_empty=False)


class GetSyncStateDataRequest(Request, frozen=True, tag="GetSyncStateData"):
    """``broker_names`` empty = every group (bounded by MAX_QUERY_GROUPS)."""

    TYPE: ClassVar[str] = "GetSyncStateData"
    WRITE: ClassVar[bool] = False
    broker_names: tuple[str, ...] = ()

    def validate(self) -> None:
        if not isinstance(self.broker_names, tuple) or len(self.broker_names) > MAX_QUERY_GROUPS:
            raise MalformedRequest(f"brokerNames must be a tuple of at most {MAX_QUERY_GROUPS} names")
        for n in self.broker_names:
            _check_str(n, "brokerName", MAX_NAME_LEN, allow_empty=False)


class GetMetaDataRequest(Request, frozen=True, tag="GetMetaData"):
    TYPE: ClassVar[str] = "GetMetaData"
    WRITE: ClassVar[bool] = False


class GetControllerConfigRequest(Request, frozen=True, tag="GetControllerConfig"):
    TYPE: ClassVar[str] = "GetControllerConfig"
    WRITE: ClassVar[bool] = False


# Every write request carries the proposing leader's ``ts_ms`` (0 = not stamped yet).
WriteRequest = (ApplyBrokerIdRequest | RegisterBrokerRequest | ElectMasterRequest | AlterSyncStateSetRequest
                | CleanBrokerDataRequest | UpdateControllerConfigRequest | AdminAuditRequest | SetPreferredMasterRequest)
WRITE_REQUESTS: dict[str, type[Request]] = {
    c.TYPE: c
    for c in (ApplyBrokerIdRequest, RegisterBrokerRequest, ElectMasterRequest, AlterSyncStateSetRequest,
              CleanBrokerDataRequest, UpdateControllerConfigRequest, AdminAuditRequest, SetPreferredMasterRequest)
}
assert set(WRITE_REQUESTS.values()) == set(WriteRequest.__args__)
# The requests about one broker group (``broker_name``); the rest are controller-wide.
GroupRequest = (ApplyBrokerIdRequest | RegisterBrokerRequest | ElectMasterRequest | AlterSyncStateSetRequest
                | CleanBrokerDataRequest | AdminAuditRequest | SetPreferredMasterRequest | GetNextBrokerIdRequest
                | GetReplicaInfoRequest)
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

    def to_dict(self) -> dict:
        return {
            "clusterName": self.cluster_name, "brokerName": self.broker_name,
            "masterBrokerId": self.master_broker_id, "masterAddress": self.master_address,
            "masterEpoch": self.master_epoch, "syncStateSet": list(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch, "eligibleReplicas": list(self.eligible_replicas),
            "masterHaAddress": self.master_ha_address, "preferredMaster": self.preferred_master,
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


class AlterSyncStateSetEvent(Event, frozen=True):
    HISTORY: ClassVar[str] = "AlterSyncStateSet"
    sync_state_set: tuple[int, ...]
    eligible: tuple[int, ...]
    reason: str


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


class PreferredMasterEvent(Event, frozen=True):
    HISTORY: ClassVar[str] = "PreferredMaster"
    broker_id: int              # 0 = cleared


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
_BYTES_TYPES = (bytes, bytearray, memoryview)


def encode_request(req: Request) -> bytes:
    """Bytes for the Raft log. Validates first (MalformedRequest) so nothing bad is proposed."""
    if not isinstance(req, Request) or req.TYPE not in WRITE_REQUESTS:
        raise MalformedRequest(f"not a write request: {type(req).__name__}")
    req.validate()
    try:
        data = _ENCODER.encode(req)
    except (TypeError, ValueError, OverflowError) as e:   # a field of a type JSON cannot carry
        raise MalformedRequest(f"{req.TYPE} cannot be encoded: {e}") from None
    if len(data) > MAX_REQUEST_BYTES:
        raise MalformedRequest(f"request of {len(data)} bytes exceeds {MAX_REQUEST_BYTES}")
    return data


def decode_request(data: bytes) -> Request:
    """Inverse of encode_request; MalformedRequest on anything unexpected."""
    if not isinstance(data, _BYTES_TYPES):
        raise MalformedRequest("request data must be bytes")
    if len(data) > MAX_REQUEST_BYTES:
        raise MalformedRequest(f"request of {len(data)} bytes exceeds {MAX_REQUEST_BYTES}")
    try:
        req = _DECODER.decode(data)
    except (msgspec.DecodeError, ValueError, RecursionError) as e:   # ValidationError is a DecodeError;
        # invalid UTF-8 comes as UnicodeDecodeError (a ValueError)
        raise MalformedRequest(f"bad request entry: {e}") from None
    req.validate()
    return req


# --------------------------------------------------------------------------- field checks
#
# Each check has a fast path for the common valid value (an exact int / str / tuple of ints) that
# accepts exactly what the reference rule (the ``*_ref`` function) accepts; anything else goes to
# the reference rule, which accepts it or raises with its message. tests/unit/
# test_controller_sm_fastpath.py checks the two agree.


def _check_int_ref(v: Any, what: str, lo: int, hi: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise MalformedRequest(f"{what} must be an integer in [{lo}, {hi}], got {v!r}")


def _check_int(v: Any, what: str, lo: int, hi: int) -> None:
    if type(v) is int and lo <= v <= hi:
        return
    _check_int_ref(v, what, lo, hi)


def _check_id(v: Any, what: str) -> None:
    if type(v) is int and 1 <= v <= MAX_BROKER_ID:
        return
    _check_int_ref(v, what, 1, MAX_BROKER_ID)


def _check_ids_ref(v: Any, what: str) -> None:
    if not isinstance(v, tuple) or len(v) > MAX_REPLICAS_PER_GROUP:
        raise MalformedRequest(f"{what} must be a list of at most {MAX_REPLICAS_PER_GROUP} brokerIds")
    for x in v:
        _check_int_ref(x, what, 1, MAX_BROKER_ID)
    if len(set(v)) != len(v):
        raise MalformedRequest(f"{what} has duplicates")


def _plain_ids(v: Any) -> bool:
    """True if ``v`` is an exact tuple of exact ints that _check_ids_ref accepts."""
    if type(v) is tuple and len(v) <= MAX_REPLICAS_PER_GROUP:
        for x in v:
            if type(x) is not int or not 1 <= x <= MAX_BROKER_ID:
                return False
        return len(set(v)) == len(v)
    return False


def _check_ids(v: Any, what: str) -> None:
    if not _plain_ids(v):
        _check_ids_ref(v, what)


def _check_bool(v: Any, what: str) -> None:
    if not isinstance(v, bool):
        raise MalformedRequest(f"{what} must be a bool")


def _check_str_ref(v: Any, what: str, max_len: int, allow_empty: bool) -> None:
    if not isinstance(v, str) or len(v) > max_len or (not allow_empty and not v):
        raise MalformedRequest(f"{what} must be a {'' if allow_empty else 'non-empty '}string of at most {max_len} chars")
    try:
        v.encode("utf-8")   # JSON "\ud800" decodes to a lone surrogate that no snapshot could store
    except UnicodeEncodeError:
        raise MalformedRequest(f"{what} is not valid Unicode") from None


def _check_str(v: Any, what: str, max_len: int, allow_empty: bool) -> None:
    # ASCII text always encodes to UTF-8 (no surrogates); isascii() allocates nothing.
    if type(v) is str and len(v) <= max_len and (allow_empty or v) and v.isascii():
        return
    _check_str_ref(v, what, max_len, allow_empty)


def _check_names(cluster: Any, broker: Any) -> None:
    _check_str(cluster, "clusterName", MAX_NAME_LEN, allow_empty=False)
    _check_str(broker, "brokerName", MAX_NAME_LEN, allow_empty=False)


def _check_ts(v: Any) -> None:
    if type(v) is int and 0 <= v <= MAX_INT64:
        return
    _check_int_ref(v, "ts_ms", 0, MAX_INT64)


def _check_alive(v: Any) -> None:
    if not isinstance(v, tuple) or len(v) > MAX_REPLICAS_PER_GROUP:
        raise MalformedRequest(f"alive must be a list of at most {MAX_REPLICAS_PER_GROUP} entries")
    seen = set()
    for a in v:
        if not isinstance(a, BrokerLiveInfo):
            raise MalformedRequest("alive entries must be BrokerLiveInfo")
        a.validate()
        if a.broker_id in seen:
            raise MalformedRequest(f"alive has brokerId {a.broker_id} twice")
        seen.add(a.broker_id)
