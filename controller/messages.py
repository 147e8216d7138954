"""Requests, replies and events of the controller state machine, and their Raft-log bytes.

Write requests travel through the Raft log as bytes (``encode_request``) and are decoded on
every node by ``ControllerStateMachine.apply``. Everything that depends on time or on liveness
(the proposal timestamp ``ts_ms``, the brokers a controller majority considers alive and what
they reported) is filled in by the proposing leader, so apply is deterministic everywhere.

Encoding: one compact JSON object ``{"v": 1, "t": <type>, ...fields}``, UTF-8, at most
``MAX_REQUEST_BYTES``. JSON keeps the log greppable and Python ints exact (no 32-bit offsets).
Every field is type- and range-checked on decode; a bad entry gives ``MalformedRequest``
(reply code CONTROLLER_INVALID_REQUEST), never an exception out of apply.

Why one long module: each request type sits next to its validation and its log encoding; the
planned typed records (docs/roadmap.md) move the encoding to a library and shrink it.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from autoswitch.controller.codes import Code

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.limits import (
    MAX_ADDRESS_LEN,
    MAX_BROKER_ID,
    MAX_INT64,
    MAX_NAME_LEN,
    MAX_REPLICAS_PER_GROUP,
)

ENCODING_VERSION = 1
MAX_REQUEST_BYTES = 1 << 20
MAX_CHECK_CODE_LEN = 512
MAX_QUERY_GROUPS = 100_000
MAX_CONFIG_KEYS = 64
MAX_CONFIG_VALUE_LEN = 1024
MIN_INT32, MAX_INT32 = -(1 << 31), (1 << 31) - 1

TRIGGER_CONTROLLER = "controller"   # the leader's scan saw the master dead (majority opinion)
TRIGGER_BROKER = "broker"           # a broker found no master and asked
TRIGGER_ADMIN = "admin"             # an operator (designated or not)
TRIGGERS = (TRIGGER_CONTROLLER, TRIGGER_BROKER, TRIGGER_ADMIN)


class MalformedRequest(AutoswitchError):
    """A request that cannot be decoded or has a field missing / of the wrong type / out of range."""

    code = "CONTROLLER_INVALID_REQUEST"


# Per-class field names, in declaration order: dataclasses.fields() rebuilds its tuple on every
# call and the per-write path (construct, encode, decode) would otherwise call it five times.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


# --------------------------------------------------------------------------- live info


@dataclass(frozen=True)
class BrokerLiveInfo:
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

    def to_list(self) -> list:
        return [self.broker_id, self.epoch, self.max_offset, self.confirm_offset,
                self.election_priority, 1 if self.clean_shutdown else 0]

    @classmethod
    def from_list(cls, raw: Any) -> BrokerLiveInfo:
        if not isinstance(raw, list) or len(raw) != 6:
            raise MalformedRequest("alive entry must be [brokerId, epoch, maxOffset, confirmOffset, priority, clean]")
        bid, epoch, max_off, confirm, prio, clean = raw
        if type(clean) is not int or clean not in (0, 1):
            raise MalformedRequest("alive entry clean flag must be 0 or 1")
        info = cls(bid, epoch, max_off, confirm, prio, clean == 1)
        info.validate()
        return info

    def validate(self) -> None:
        _check_id(self.broker_id, "alive.brokerId")
        _check_int(self.epoch, "alive.epoch", 0, MAX_INT64)
        _check_int(self.max_offset, "alive.maxOffset", 0, MAX_INT64)
        _check_int(self.confirm_offset, "alive.confirmOffset", 0, MAX_INT64)
        _check_int(self.election_priority, "alive.electionPriority", MIN_INT32, MAX_INT32)
        if not isinstance(self.clean_shutdown, bool):
            raise MalformedRequest("alive.cleanShutdown must be a bool")


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Request:
    """Base of every request. ``TYPE`` is the stable tag in the Raft log."""

    TYPE: ClassVar[str] = ""
    WRITE: ClassVar[bool] = True

    def __post_init__(self) -> None:
        # Accept lists and sets from callers; the canonical form (and the log form) is a tuple.
        d = self.__dict__
        for name in _field_names(type(self)):
            v = d[name]
            t = type(v)
            if t is int or t is str or t is tuple or t is bool:
                continue   # the common cases, nothing to convert
            if isinstance(v, list):
                object.__setattr__(self, name, tuple(v))
            elif isinstance(v, set | frozenset):
                try:
                    object.__setattr__(self, name, tuple(sorted(v)))
                except TypeError:
                    pass  # mixed types: validate() rejects it

    def validate(self) -> None:  # overridden; raises MalformedRequest
        pass

    @property
    def group(self) -> str | None:
        return getattr(self, "broker_name", None)


@dataclass(frozen=True)
class ApplyBrokerIdRequest(Request):
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


@dataclass(frozen=True)
class RegisterBrokerRequest(Request):
    TYPE: ClassVar[str] = "RegisterBroker"
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    clean_shutdown: bool = True
    ts_ms: int = 0
    broker_ha_address: str = ""     # "" = not given (slaves then use HA port = listen port + 1)

    def validate(self) -> None:
        _check_names(self.cluster_name, self.broker_name)
        _check_id(self.broker_id, "brokerId")
        _check_str(self.broker_address, "brokerAddress", MAX_ADDRESS_LEN, allow_empty=False)
        _check_str(self.broker_ha_address, "brokerHaAddress", MAX_ADDRESS_LEN, allow_empty=True)
        _check_bool(self.clean_shutdown, "cleanShutdown")
        _check_ts(self.ts_ms)


@dataclass(frozen=True)
class ElectMasterRequest(Request):
    """``broker_id``: the designated broker when ``designate``; else the asking broker (0 = none).

    ``alive``: every broker of the group that a controller majority considers alive, with its
    last report; ``dead_broker_ids``: brokers a controller majority has not heard from within the
    heartbeat timeout. Both are filled by the leader at proposal time. A non-designated election
    replaces an existing master that is not in ``alive`` only if that master is in
    ``dead_broker_ids`` (docs/design.md §2); otherwise it answers CONTROLLER_ELECT_MASTER_FAILED.
    """

    TYPE: ClassVar[str] = "ElectMaster"
    cluster_name: str
    broker_name: str
    trigger: str = TRIGGER_BROKER
    broker_id: int = 0
    designate: bool = False
    alive: tuple[BrokerLiveInfo, ...] = ()
    ts_ms: int = 0
    dead_broker_ids: tuple[int, ...] = ()   # after ts_ms: positional callers of the first API keep working

    def validate(self) -> None:
        _check_str(self.cluster_name, "clusterName", MAX_NAME_LEN, allow_empty=True)
        _check_str(self.broker_name, "brokerName", MAX_NAME_LEN, allow_empty=False)
        if self.trigger not in TRIGGERS:
            raise MalformedRequest(f"trigger must be one of {TRIGGERS}")
        _check_int(self.broker_id, "brokerId", 0, MAX_BROKER_ID)
        _check_bool(self.designate, "designate")
        if self.designate and self.broker_id == 0:
            raise MalformedRequest("a designated election needs brokerId")
        _check_alive(self.alive)
        _check_ids(self.dead_broker_ids, "deadBrokerIds")
        if {a.broker_id for a in self.alive} & set(self.dead_broker_ids):
            raise MalformedRequest("a broker cannot be both alive and dead")
        _check_ts(self.ts_ms)


@dataclass(frozen=True)
class AlterSyncStateSetRequest(Request):
    TYPE: ClassVar[str] = "AlterSyncStateSet"
    broker_name: str
    master_broker_id: int
    master_epoch: int
    new_sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int
    alive_broker_ids: tuple[int, ...] = ()   # filled by the leader from the majority view
    ts_ms: int = 0

    def validate(self) -> None:
        # The hot write (every SyncStateSet change): one pass over the plain valid shape, which
        # _validate_rules accepts too; anything else gets the rules, in order, for their message.
        name, mb, me, se, ts = self.broker_name, self.master_broker_id, self.master_epoch, \
            self.sync_state_set_epoch, self.ts_ms
        if (type(name) is str and 0 < len(name) <= MAX_NAME_LEN and name.isascii()
                and type(mb) is int and 1 <= mb <= MAX_BROKER_ID and type(me) is int and 0 <= me <= MAX_INT64
                and type(se) is int and 0 <= se <= MAX_INT64 and type(ts) is int and 0 <= ts <= MAX_INT64
                and _plain_ids(self.new_sync_state_set) and self.new_sync_state_set
                and _plain_ids(self.alive_broker_ids)):
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
        _check_ts(self.ts_ms)


@dataclass(frozen=True)
class CleanBrokerDataRequest(Request):
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


@dataclass(frozen=True)
class UpdateControllerConfigRequest(Request):
    TYPE: ClassVar[str] = "UpdateControllerConfig"
    config: dict[str, str] = field(default_factory=dict)
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


# Reads: served by ControllerStateMachine.query() on the leader after a read-index barrier.


@dataclass(frozen=True)
class GetNextBrokerIdRequest(Request):
    TYPE: ClassVar[str] = "GetNextBrokerId"
    WRITE: ClassVar[bool] = False
    cluster_name: str
    broker_name: str

    def validate(self) -> None:
        _check_names(self.cluster_name, self.broker_name)


@dataclass(frozen=True)
class GetReplicaInfoRequest(Request):
    TYPE: ClassVar[str] = "GetReplicaInfo"
    WRITE: ClassVar[bool] = False
    broker_name: str

    def validate(self) -> None:
        _check_str(self.broker_name, "brokerName", MAX_NAME_LEN, allow_empty=False)


@dataclass(frozen=True)
class GetSyncStateDataRequest(Request):
    """``broker_names`` empty = every group (bounded by MAX_QUERY_GROUPS)."""

    TYPE: ClassVar[str] = "GetSyncStateData"
    WRITE: ClassVar[bool] = False
    broker_names: tuple[str, ...] = ()

    def validate(self) -> None:
        if not isinstance(self.broker_names, tuple) or len(self.broker_names) > MAX_QUERY_GROUPS:
            raise MalformedRequest(f"brokerNames must be a tuple of at most {MAX_QUERY_GROUPS} names")
        for n in self.broker_names:
            _check_str(n, "brokerName", MAX_NAME_LEN, allow_empty=False)


@dataclass(frozen=True)
class GetMetaDataRequest(Request):
    TYPE: ClassVar[str] = "GetMetaData"
    WRITE: ClassVar[bool] = False


@dataclass(frozen=True)
class GetControllerConfigRequest(Request):
    TYPE: ClassVar[str] = "GetControllerConfig"
    WRITE: ClassVar[bool] = False


WRITE_REQUESTS: dict[str, type[Request]] = {
    c.TYPE: c
    for c in (ApplyBrokerIdRequest, RegisterBrokerRequest, ElectMasterRequest, AlterSyncStateSetRequest,
              CleanBrokerDataRequest, UpdateControllerConfigRequest)
}
READ_REQUESTS: dict[str, type[Request]] = {
    c.TYPE: c
    for c in (GetNextBrokerIdRequest, GetReplicaInfoRequest, GetSyncStateDataRequest, GetMetaDataRequest,
              GetControllerConfigRequest)
}


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class ReplicaView:
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

    def to_dict(self) -> dict:
        return {
            "clusterName": self.cluster_name, "brokerName": self.broker_name,
            "masterBrokerId": self.master_broker_id, "masterAddress": self.master_address,
            "masterEpoch": self.master_epoch, "syncStateSet": list(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch, "eligibleReplicas": list(self.eligible_replicas),
            "masterHaAddress": self.master_ha_address,
        }


@dataclass(frozen=True)
class Reply:
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


@dataclass(frozen=True)
class Event:
    """An applied state change. ``HISTORY`` is the name in the event history record."""

    HISTORY: ClassVar[str] = ""
    broker_name: str


@dataclass(frozen=True)
class ApplyBrokerIdEvent(Event):
    HISTORY: ClassVar[str] = "ApplyBrokerId"
    cluster_name: str
    broker_id: int
    address: str
    register_check_code: str
    ts_ms: int


@dataclass(frozen=True)
class UpdateBrokerAddressEvent(Event):
    HISTORY: ClassVar[str] = "RegisterBroker"
    broker_id: int
    address: str
    ha_address: str = ""


@dataclass(frozen=True)
class ElectMasterEvent(Event):
    """New master (or none: "NoMaster"). MasterEpoch always +1. ``sync_state_set`` None keeps the
    set (RocketMQ keeps it when nobody could be elected); otherwise it replaces it and
    syncStateSetEpoch +1."""

    HISTORY: ClassVar[str] = "ElectMaster"
    new_master: int | None
    sync_state_set: tuple[int, ...] | None
    eligible: tuple[int, ...]
    unclean: bool
    reason: str


@dataclass(frozen=True)
class AlterSyncStateSetEvent(Event):
    HISTORY: ClassVar[str] = "AlterSyncStateSet"
    sync_state_set: tuple[int, ...]
    eligible: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class EligibleChangeEvent(Event):
    """Eligible replicas change without an SSS change (a replica reported data loss)."""

    HISTORY: ClassVar[str] = "RegisterBroker"
    eligible: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class CleanBrokerDataEvent(Event):
    HISTORY: ClassVar[str] = "CleanBrokerData"
    broker_ids: tuple[int, ...]   # empty = the whole group


@dataclass(frozen=True)
class UpdateConfigEvent(Event):
    HISTORY: ClassVar[str] = "UpdateConfig"
    changes: tuple[tuple[str, str], ...]


# --------------------------------------------------------------------------- construction
#
# A frozen dataclass's generated __init__ stores every field through object.__setattr__ (about
# 0.1 us each); the apply path builds several of these objects per entry. Each class below gets
# an __init__ with the same signature, defaults, qualname and __post_init__ call that stores the
# fields into the instance __dict__ directly, which is where object.__setattr__ puts them (no
# field has a descriptor). Instances stay frozen: only __init__ changes. The generated
# dataclass __init__ stays in _DATACLASS_INIT (tests compare the two).

_DATACLASS_INIT: dict[type, Any] = {}


def _fast_frozen_init(cls: type) -> None:
    fs = fields(cls)
    if any(not f.init or f.default_factory is not MISSING or f.kw_only for f in fs) \
            or any(f.name in ("self", "d") for f in fs):
        return   # keep the dataclass __init__ for anything beyond plain positional fields
    ns: dict[str, Any] = {}
    params, body = ["self"], ["d = self.__dict__"]
    for f in fs:
        if f.default is MISSING:
            params.append(f.name)
        else:
            ns[f"_dflt_{f.name}"] = f.default
            params.append(f"{f.name}=_dflt_{f.name}")
        body.append(f"d[{f.name!r}] = {f.name}")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    src = f"def __init__({', '.join(params)}):\n    " + "\n    ".join(body) + "\n"
    exec(src, ns)  # noqa: S102 - source built above from the class's own field names
    init = ns["__init__"]
    old = cls.__init__
    init.__qualname__ = old.__qualname__
    init.__module__ = old.__module__
    init.__annotations__ = dict(old.__annotations__)
    _DATACLASS_INIT[cls] = old
    cls.__init__ = init


def event_name(ev: Event) -> str:
    if isinstance(ev, ElectMasterEvent) and ev.new_master is None:
        return "NoMaster"
    return ev.HISTORY


for _cls in (BrokerLiveInfo, *WRITE_REQUESTS.values(), *READ_REQUESTS.values(), ReplicaView, Reply,
             ApplyBrokerIdEvent, UpdateBrokerAddressEvent, ElectMasterEvent, AlterSyncStateSetEvent,
             EligibleChangeEvent, CleanBrokerDataEvent, UpdateConfigEvent):
    _fast_frozen_init(_cls)
del _cls


# --------------------------------------------------------------------------- encoding

# Same output as json.dumps(obj, separators=(",", ":"), ensure_ascii=False) (tuples encode as
# arrays, exactly like lists), without building a new encoder per call. The C encoder is made
# once, without the circular-reference check: a validated request holds only strings, ints,
# bools and fresh flat containers of them, so it cannot contain itself.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
if json.encoder.c_make_encoder is not None:
    _C_ENCODE = json.encoder.c_make_encoder(None, _ENCODER.default, json.encoder.encode_basestring, None,
                                            ":", ",", False, False, True)

    def _dumps(obj: dict) -> str:
        return "".join(_C_ENCODE(obj, 0))
else:  # pragma: no cover - CPython always has the C encoder
    _dumps = _ENCODER.encode


class _DecodeInfo:
    """Per write-request class: what decode_request needs, computed once."""

    __slots__ = ("names", "allowed", "defaults")

    def __init__(self, cls: type[Request]) -> None:
        self.names = _field_names(cls)
        self.allowed = frozenset(self.names) | {"v", "t"}
        # Plain defaults only; a required or default_factory field that is missing from the entry
        # goes through the dataclass __init__ (its own error message / factory call).
        self.defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}


_DECODE_INFO: dict[type[Request], _DecodeInfo] = {}
# Fields added after the first release: left out of an entry when empty, so a controller of the
# previous version (which refuses unknown fields) applies every entry that does not use them.
_OMIT_IF_EMPTY = frozenset({"broker_ha_address", "broker_timeout_floor_ms"})
_ABSENT = object()
_BYTES_TYPES = (bytes, bytearray, memoryview)   # a tuple: "bytes | bytearray" builds a union per call


def encode_request(req: Request) -> bytes:
    """Bytes for the Raft log. Validates first (MalformedRequest) so nothing bad is proposed."""
    if not isinstance(req, Request) or req.TYPE not in WRITE_REQUESTS:
        raise MalformedRequest(f"not a write request: {type(req).__name__}")
    req.validate()
    obj: dict[str, Any] = {"v": ENCODING_VERSION, "t": req.TYPE}
    d = req.__dict__
    for name in _field_names(type(req)):
        v = d[name]
        if name in _OMIT_IF_EMPTY and not v:
            continue    # entries written without it stay byte-identical to older versions' entries
        obj[name] = v
    if "alive" in obj:   # ElectMaster: BrokerLiveInfo entries travel as lists (same key position)
        obj["alive"] = [a.to_list() for a in obj["alive"]]
    data = _dumps(obj).encode()
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
        obj = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise MalformedRequest(f"request is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise MalformedRequest("request must be a JSON object")
    if obj.get("v") != ENCODING_VERSION:
        raise MalformedRequest(f"unsupported request encoding version {obj.get('v')!r}")
    t = obj.get("t")
    cls = WRITE_REQUESTS.get(t) if isinstance(t, str) else None
    if cls is None:
        raise MalformedRequest(f"unknown request type {obj.get('t')!r}")
    info = _DECODE_INFO.get(cls)
    if info is None:
        info = _DECODE_INFO[cls] = _DecodeInfo(cls)
    if not obj.keys() <= info.allowed:
        extra = set(obj) - info.allowed
        raise MalformedRequest(f"unknown fields {sorted(extra)} in {cls.TYPE}")
    kwargs: dict[str, Any] = {}
    complete = True
    defaults = info.defaults
    for name in info.names:
        v = obj.get(name, _ABSENT)
        if v is _ABSENT:
            if name in defaults:
                kwargs[name] = defaults[name]
            else:
                complete = False   # required (fails in __init__ below) or default_factory
            continue
        if type(v) is list:   # the JSON decoder makes exact lists only
            v = tuple(v)
        kwargs[name] = v
    if "alive" in kwargs and "alive" in obj:   # ElectMaster: [[brokerId, ...], ...] entries
        v = obj["alive"]
        if not isinstance(v, list):
            raise MalformedRequest("alive must be a list")
        kwargs["alive"] = tuple(BrokerLiveInfo.from_list(a) for a in v)
    if complete:
        # Every field is a JSON value with the top-level lists already made tuples, so the
        # dataclass __init__ + __post_init__ would only copy the values in: do just that.
        req = object.__new__(cls)
        req.__dict__.update(kwargs)
    else:
        for name in defaults:
            if name not in obj:
                del kwargs[name]
        try:
            req = cls(**kwargs)
        except TypeError as e:
            raise MalformedRequest(f"{cls.TYPE}: {e}") from None
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
