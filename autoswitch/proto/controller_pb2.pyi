from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplyHeader(_message.Message):
    __slots__ = ("code", "message", "leader_id", "leader_addr", "node_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDR_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    leader_id: str
    leader_addr: str
    node_id: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., leader_id: _Optional[str] = ..., leader_addr: _Optional[str] = ..., node_id: _Optional[str] = ...) -> None: ...

class ReplicaInfo(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "master_broker_id", "master_address", "master_epoch", "sync_state_set_epoch", "sync_state_set", "eligible_replicas", "master_ha_address", "preferred_master_broker_id", "maintenance", "zone_preference")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    MASTER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    ELIGIBLE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MASTER_HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_MASTER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MAINTENANCE_FIELD_NUMBER: _ClassVar[int]
    ZONE_PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    master_broker_id: int
    master_address: str
    master_epoch: int
    sync_state_set_epoch: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    eligible_replicas: _containers.RepeatedScalarFieldContainer[int]
    master_ha_address: str
    preferred_master_broker_id: int
    maintenance: _containers.RepeatedScalarFieldContainer[int]
    zone_preference: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., master_broker_id: _Optional[int] = ..., master_address: _Optional[str] = ..., master_epoch: _Optional[int] = ..., sync_state_set_epoch: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., eligible_replicas: _Optional[_Iterable[int]] = ..., master_ha_address: _Optional[str] = ..., preferred_master_broker_id: _Optional[int] = ..., maintenance: _Optional[_Iterable[int]] = ..., zone_preference: _Optional[_Iterable[str]] = ...) -> None: ...

class GetNextBrokerIdRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ...) -> None: ...

class GetNextBrokerIdReply(_message.Message):
    __slots__ = ("header", "next_broker_id")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    NEXT_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    next_broker_id: int
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., next_broker_id: _Optional[int] = ...) -> None: ...

class ApplyBrokerIdRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "applied_broker_id", "register_check_code")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    APPLIED_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTER_CHECK_CODE_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    applied_broker_id: int
    register_check_code: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., applied_broker_id: _Optional[int] = ..., register_check_code: _Optional[str] = ...) -> None: ...

class ApplyBrokerIdReply(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_address", "clean_shutdown", "broker_ha_address", "incarnation", "previous_incarnation", "crashed")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CLEAN_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    BROKER_HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    CRASHED_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    clean_shutdown: bool
    broker_ha_address: str
    incarnation: str
    previous_incarnation: str
    crashed: bool
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_address: _Optional[str] = ..., clean_shutdown: _Optional[bool] = ..., broker_ha_address: _Optional[str] = ..., incarnation: _Optional[str] = ..., previous_incarnation: _Optional[str] = ..., crashed: _Optional[bool] = ...) -> None: ...

class RegisterBrokerReply(_message.Message):
    __slots__ = ("header", "replica_info")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICA_INFO_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    replica_info: ReplicaInfo
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., replica_info: _Optional[_Union[ReplicaInfo, _Mapping]] = ...) -> None: ...

class BrokerHeartbeatRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_address", "epoch", "max_offset", "confirm_offset", "election_priority", "clean_shutdown", "heartbeat_timeout_ms", "lease_quorum", "controllers_index", "min_in_sync_replicas", "incarnation", "stopping", "ack_mode", "degraded", "degraded_reasons", "append_ms", "fsync_ms", "loop_lag_ms", "diverged", "feature_level", "version", "zone", "min_in_sync_zones", "produce_per_s", "consume_per_s", "topic_rates")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ELECTION_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CLEAN_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_QUORUM_FIELD_NUMBER: _ClassVar[int]
    CONTROLLERS_INDEX_FIELD_NUMBER: _ClassVar[int]
    MIN_IN_SYNC_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    STOPPING_FIELD_NUMBER: _ClassVar[int]
    ACK_MODE_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASONS_FIELD_NUMBER: _ClassVar[int]
    APPEND_MS_FIELD_NUMBER: _ClassVar[int]
    FSYNC_MS_FIELD_NUMBER: _ClassVar[int]
    LOOP_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    DIVERGED_FIELD_NUMBER: _ClassVar[int]
    FEATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    MIN_IN_SYNC_ZONES_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_PER_S_FIELD_NUMBER: _ClassVar[int]
    CONSUME_PER_S_FIELD_NUMBER: _ClassVar[int]
    TOPIC_RATES_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int
    clean_shutdown: bool
    heartbeat_timeout_ms: int
    lease_quorum: int
    controllers_index: int
    min_in_sync_replicas: int
    incarnation: str
    stopping: bool
    ack_mode: str
    degraded: bool
    degraded_reasons: _containers.RepeatedScalarFieldContainer[str]
    append_ms: float
    fsync_ms: float
    loop_lag_ms: float
    diverged: bool
    feature_level: int
    version: str
    zone: str
    min_in_sync_zones: int
    produce_per_s: float
    consume_per_s: float
    topic_rates: _containers.RepeatedCompositeFieldContainer[TopicRate]
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_address: _Optional[str] = ..., epoch: _Optional[int] = ..., max_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., election_priority: _Optional[int] = ..., clean_shutdown: _Optional[bool] = ..., heartbeat_timeout_ms: _Optional[int] = ..., lease_quorum: _Optional[int] = ..., controllers_index: _Optional[int] = ..., min_in_sync_replicas: _Optional[int] = ..., incarnation: _Optional[str] = ..., stopping: _Optional[bool] = ..., ack_mode: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reasons: _Optional[_Iterable[str]] = ..., append_ms: _Optional[float] = ..., fsync_ms: _Optional[float] = ..., loop_lag_ms: _Optional[float] = ..., diverged: _Optional[bool] = ..., feature_level: _Optional[int] = ..., version: _Optional[str] = ..., zone: _Optional[str] = ..., min_in_sync_zones: _Optional[int] = ..., produce_per_s: _Optional[float] = ..., consume_per_s: _Optional[float] = ..., topic_rates: _Optional[_Iterable[_Union[TopicRate, _Mapping]]] = ...) -> None: ...

class TopicRate(_message.Message):
    __slots__ = ("topic", "produce_per_s", "consume_per_s")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_PER_S_FIELD_NUMBER: _ClassVar[int]
    CONSUME_PER_S_FIELD_NUMBER: _ClassVar[int]
    topic: str
    produce_per_s: float
    consume_per_s: float
    def __init__(self, topic: _Optional[str] = ..., produce_per_s: _Optional[float] = ..., consume_per_s: _Optional[float] = ...) -> None: ...

class BrokerHeartbeatReply(_message.Message):
    __slots__ = ("header", "is_leader", "raft_term", "lease_granted", "master_epoch", "master_broker_id", "controllers", "controllers_index", "feature_level")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    RAFT_TERM_FIELD_NUMBER: _ClassVar[int]
    LEASE_GRANTED_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MASTER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLERS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLERS_INDEX_FIELD_NUMBER: _ClassVar[int]
    FEATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    is_leader: bool
    raft_term: int
    lease_granted: bool
    master_epoch: int
    master_broker_id: int
    controllers: _containers.RepeatedScalarFieldContainer[str]
    controllers_index: int
    feature_level: int
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., is_leader: _Optional[bool] = ..., raft_term: _Optional[int] = ..., lease_granted: _Optional[bool] = ..., master_epoch: _Optional[int] = ..., master_broker_id: _Optional[int] = ..., controllers: _Optional[_Iterable[str]] = ..., controllers_index: _Optional[int] = ..., feature_level: _Optional[int] = ...) -> None: ...

class BrokerHeartbeatBatchRequest(_message.Message):
    __slots__ = ("heartbeats",)
    HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    heartbeats: _containers.RepeatedCompositeFieldContainer[BrokerHeartbeatRequest]
    def __init__(self, heartbeats: _Optional[_Iterable[_Union[BrokerHeartbeatRequest, _Mapping]]] = ...) -> None: ...

class BrokerHeartbeatBatchReply(_message.Message):
    __slots__ = ("header", "replies")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    replies: _containers.RepeatedCompositeFieldContainer[BrokerHeartbeatReply]
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., replies: _Optional[_Iterable[_Union[BrokerHeartbeatReply, _Mapping]]] = ...) -> None: ...

class ElectMasterRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "designate_elect", "handover_from", "expect_master_epoch", "expect_sync_state_set_epoch", "requested_by", "dry_run", "unclean_recovery")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    DESIGNATE_ELECT_FIELD_NUMBER: _ClassVar[int]
    HANDOVER_FROM_FIELD_NUMBER: _ClassVar[int]
    EXPECT_MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    EXPECT_SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    UNCLEAN_RECOVERY_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    designate_elect: bool
    handover_from: int
    expect_master_epoch: int
    expect_sync_state_set_epoch: int
    requested_by: str
    dry_run: bool
    unclean_recovery: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., designate_elect: _Optional[bool] = ..., handover_from: _Optional[int] = ..., expect_master_epoch: _Optional[int] = ..., expect_sync_state_set_epoch: _Optional[int] = ..., requested_by: _Optional[str] = ..., dry_run: _Optional[bool] = ..., unclean_recovery: _Optional[str] = ...) -> None: ...

class ElectMasterReply(_message.Message):
    __slots__ = ("header", "replica_info", "decision_json")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICA_INFO_FIELD_NUMBER: _ClassVar[int]
    DECISION_JSON_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    replica_info: ReplicaInfo
    decision_json: str
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., replica_info: _Optional[_Union[ReplicaInfo, _Mapping]] = ..., decision_json: _Optional[str] = ...) -> None: ...

class SetZonePreferenceRequest(_message.Message):
    __slots__ = ("broker_name", "zones")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    ZONES_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    zones: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, broker_name: _Optional[str] = ..., zones: _Optional[_Iterable[str]] = ...) -> None: ...

class SetZonePreferenceReply(_message.Message):
    __slots__ = ("header", "replica_info")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICA_INFO_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    replica_info: ReplicaInfo
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., replica_info: _Optional[_Union[ReplicaInfo, _Mapping]] = ...) -> None: ...

class ImportedBroker(_message.Message):
    __slots__ = ("broker_id", "address")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ...) -> None: ...

class ImportGroupRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "brokers", "master_broker_id", "master_epoch", "sync_state_set", "sync_state_set_epoch", "source")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    MASTER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    brokers: _containers.RepeatedCompositeFieldContainer[ImportedBroker]
    master_broker_id: int
    master_epoch: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    sync_state_set_epoch: int
    source: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., brokers: _Optional[_Iterable[_Union[ImportedBroker, _Mapping]]] = ..., master_broker_id: _Optional[int] = ..., master_epoch: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., sync_state_set_epoch: _Optional[int] = ..., source: _Optional[str] = ...) -> None: ...

class ImportGroupReply(_message.Message):
    __slots__ = ("header", "replica_info")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICA_INFO_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    replica_info: ReplicaInfo
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., replica_info: _Optional[_Union[ReplicaInfo, _Mapping]] = ...) -> None: ...

class ListAlarmsRequest(_message.Message):
    __slots__ = ("include_cleared",)
    INCLUDE_CLEARED_FIELD_NUMBER: _ClassVar[int]
    include_cleared: bool
    def __init__(self, include_cleared: _Optional[bool] = ...) -> None: ...

class Alarm(_message.Message):
    __slots__ = ("kind", "group", "epoch", "first_ms", "last_ms", "count", "detail_json", "cleared_ms", "cleared_by")
    KIND_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FIRST_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_MS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_JSON_FIELD_NUMBER: _ClassVar[int]
    CLEARED_MS_FIELD_NUMBER: _ClassVar[int]
    CLEARED_BY_FIELD_NUMBER: _ClassVar[int]
    kind: str
    group: str
    epoch: int
    first_ms: int
    last_ms: int
    count: int
    detail_json: str
    cleared_ms: int
    cleared_by: str
    def __init__(self, kind: _Optional[str] = ..., group: _Optional[str] = ..., epoch: _Optional[int] = ..., first_ms: _Optional[int] = ..., last_ms: _Optional[int] = ..., count: _Optional[int] = ..., detail_json: _Optional[str] = ..., cleared_ms: _Optional[int] = ..., cleared_by: _Optional[str] = ...) -> None: ...

class ListAlarmsReply(_message.Message):
    __slots__ = ("header", "alarms", "dropped")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ALARMS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    alarms: _containers.RepeatedCompositeFieldContainer[Alarm]
    dropped: int
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., alarms: _Optional[_Iterable[_Union[Alarm, _Mapping]]] = ..., dropped: _Optional[int] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("broker_name", "last")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    last: int
    def __init__(self, broker_name: _Optional[str] = ..., last: _Optional[int] = ...) -> None: ...

class ExplainReply(_message.Message):
    __slots__ = ("header", "decisions_json", "pending")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_JSON_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    decisions_json: _containers.RepeatedScalarFieldContainer[str]
    pending: str
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., decisions_json: _Optional[_Iterable[str]] = ..., pending: _Optional[str] = ...) -> None: ...

class AlterSyncStateSetRequest(_message.Message):
    __slots__ = ("broker_name", "master_broker_id", "master_epoch", "new_sync_state_set", "sync_state_set_epoch", "leaving")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    MASTER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEW_SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    master_broker_id: int
    master_epoch: int
    new_sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    sync_state_set_epoch: int
    leaving: _containers.RepeatedCompositeFieldContainer[LeavingMember]
    def __init__(self, broker_name: _Optional[str] = ..., master_broker_id: _Optional[int] = ..., master_epoch: _Optional[int] = ..., new_sync_state_set: _Optional[_Iterable[int]] = ..., sync_state_set_epoch: _Optional[int] = ..., leaving: _Optional[_Iterable[_Union[LeavingMember, _Mapping]]] = ...) -> None: ...

class LeavingMember(_message.Message):
    __slots__ = ("broker_id", "reason")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    reason: str
    def __init__(self, broker_id: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class AlterSyncStateSetReply(_message.Message):
    __slots__ = ("header", "sync_state_set", "sync_state_set_epoch")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    sync_state_set_epoch: int
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., sync_state_set_epoch: _Optional[int] = ...) -> None: ...

class SetPreferredMasterRequest(_message.Message):
    __slots__ = ("broker_name", "broker_id")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class SetPreferredMasterReply(_message.Message):
    __slots__ = ("header", "replica_info")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICA_INFO_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    replica_info: ReplicaInfo
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., replica_info: _Optional[_Union[ReplicaInfo, _Mapping]] = ...) -> None: ...

class SetMaintenanceRequest(_message.Message):
    __slots__ = ("broker_name", "broker_id", "on", "controller_node_id")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ON_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    on: bool
    controller_node_id: str
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., on: _Optional[bool] = ..., controller_node_id: _Optional[str] = ...) -> None: ...

class SetMaintenanceReply(_message.Message):
    __slots__ = ("header", "replica_info", "drain", "controller_maintenance")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICA_INFO_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_MAINTENANCE_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    replica_info: ReplicaInfo
    drain: str
    controller_maintenance: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., replica_info: _Optional[_Union[ReplicaInfo, _Mapping]] = ..., drain: _Optional[str] = ..., controller_maintenance: _Optional[_Iterable[str]] = ...) -> None: ...

class CleanBrokerDataRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_ids", "clean_living_broker")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_IDS_FIELD_NUMBER: _ClassVar[int]
    CLEAN_LIVING_BROKER_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_ids: _containers.RepeatedScalarFieldContainer[int]
    clean_living_broker: bool
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_ids: _Optional[_Iterable[int]] = ..., clean_living_broker: _Optional[bool] = ...) -> None: ...

class CleanBrokerDataReply(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ...) -> None: ...

class GetReplicaInfoRequest(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class GetReplicaInfoReply(_message.Message):
    __slots__ = ("header", "replica_info")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICA_INFO_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    replica_info: ReplicaInfo
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., replica_info: _Optional[_Union[ReplicaInfo, _Mapping]] = ...) -> None: ...

class ReplicaMember(_message.Message):
    __slots__ = ("broker_id", "address", "alive", "in_sync", "epoch", "max_offset", "last_heard_ms_ago", "incarnation", "degraded", "degraded_reasons", "append_ms", "fsync_ms", "loop_lag_ms", "diverged", "zone", "confirm_offset", "clean_shutdown", "produce_per_s", "consume_per_s", "topic_rates")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARD_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASONS_FIELD_NUMBER: _ClassVar[int]
    APPEND_MS_FIELD_NUMBER: _ClassVar[int]
    FSYNC_MS_FIELD_NUMBER: _ClassVar[int]
    LOOP_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    DIVERGED_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CLEAN_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_PER_S_FIELD_NUMBER: _ClassVar[int]
    CONSUME_PER_S_FIELD_NUMBER: _ClassVar[int]
    TOPIC_RATES_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    alive: bool
    in_sync: bool
    epoch: int
    max_offset: int
    last_heard_ms_ago: int
    incarnation: str
    degraded: bool
    degraded_reasons: _containers.RepeatedScalarFieldContainer[str]
    append_ms: float
    fsync_ms: float
    loop_lag_ms: float
    diverged: bool
    zone: str
    confirm_offset: int
    clean_shutdown: bool
    produce_per_s: float
    consume_per_s: float
    topic_rates: _containers.RepeatedCompositeFieldContainer[TopicRate]
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ..., alive: _Optional[bool] = ..., in_sync: _Optional[bool] = ..., epoch: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_heard_ms_ago: _Optional[int] = ..., incarnation: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reasons: _Optional[_Iterable[str]] = ..., append_ms: _Optional[float] = ..., fsync_ms: _Optional[float] = ..., loop_lag_ms: _Optional[float] = ..., diverged: _Optional[bool] = ..., zone: _Optional[str] = ..., confirm_offset: _Optional[int] = ..., clean_shutdown: _Optional[bool] = ..., produce_per_s: _Optional[float] = ..., consume_per_s: _Optional[float] = ..., topic_rates: _Optional[_Iterable[_Union[TopicRate, _Mapping]]] = ...) -> None: ...

class GroupSyncState(_message.Message):
    __slots__ = ("replica_info", "members")
    REPLICA_INFO_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    replica_info: ReplicaInfo
    members: _containers.RepeatedCompositeFieldContainer[ReplicaMember]
    def __init__(self, replica_info: _Optional[_Union[ReplicaInfo, _Mapping]] = ..., members: _Optional[_Iterable[_Union[ReplicaMember, _Mapping]]] = ...) -> None: ...

class GetSyncStateDataRequest(_message.Message):
    __slots__ = ("broker_names",)
    BROKER_NAMES_FIELD_NUMBER: _ClassVar[int]
    broker_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, broker_names: _Optional[_Iterable[str]] = ...) -> None: ...

class GetSyncStateDataReply(_message.Message):
    __slots__ = ("header", "groups")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    groups: _containers.RepeatedCompositeFieldContainer[GroupSyncState]
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., groups: _Optional[_Iterable[_Union[GroupSyncState, _Mapping]]] = ...) -> None: ...

class ControllerPeer(_message.Message):
    __slots__ = ("node_id", "address", "reachable", "match_index", "role")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    reachable: bool
    match_index: int
    role: str
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., reachable: _Optional[bool] = ..., match_index: _Optional[int] = ..., role: _Optional[str] = ...) -> None: ...

class ChangeMembershipRequest(_message.Message):
    __slots__ = ("action", "node_id", "address", "raft_address")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    action: str
    node_id: str
    address: str
    raft_address: str
    def __init__(self, action: _Optional[str] = ..., node_id: _Optional[str] = ..., address: _Optional[str] = ..., raft_address: _Optional[str] = ...) -> None: ...

class ChangeMembershipReply(_message.Message):
    __slots__ = ("header", "members", "cluster_id", "config_index")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_INDEX_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    members: _containers.RepeatedCompositeFieldContainer[ControllerPeer]
    cluster_id: str
    config_index: int
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., members: _Optional[_Iterable[_Union[ControllerPeer, _Mapping]]] = ..., cluster_id: _Optional[str] = ..., config_index: _Optional[int] = ...) -> None: ...

class MoveLeaderRequest(_message.Message):
    __slots__ = ("to_node_id", "timeout_ms")
    TO_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    to_node_id: str
    timeout_ms: int
    def __init__(self, to_node_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class MoveLeaderReply(_message.Message):
    __slots__ = ("header", "leader_id", "raft_term")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_TERM_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    leader_id: str
    raft_term: int
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., leader_id: _Optional[str] = ..., raft_term: _Optional[int] = ...) -> None: ...

class SaveSnapshotRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SaveSnapshotReply(_message.Message):
    __slots__ = ("header", "snapshot", "applied_index")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    snapshot: bytes
    applied_index: int
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., snapshot: _Optional[bytes] = ..., applied_index: _Optional[int] = ...) -> None: ...

class GetMetaDataRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMetaDataReply(_message.Message):
    __slots__ = ("header", "node_id", "is_leader", "leader_id", "leader_addr", "raft_term", "peers", "groups", "raft_role", "commit_index", "applied_index", "last_index", "cluster_id", "config_index", "version", "feature_level", "feature_level_supported", "lease_grants_paused_ms", "maintenance")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDR_FIELD_NUMBER: _ClassVar[int]
    RAFT_TERM_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ROLE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_INDEX_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FEATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    FEATURE_LEVEL_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    LEASE_GRANTS_PAUSED_MS_FIELD_NUMBER: _ClassVar[int]
    MAINTENANCE_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    node_id: str
    is_leader: bool
    leader_id: str
    leader_addr: str
    raft_term: int
    peers: _containers.RepeatedCompositeFieldContainer[ControllerPeer]
    groups: int
    raft_role: str
    commit_index: int
    applied_index: int
    last_index: int
    cluster_id: str
    config_index: int
    version: str
    feature_level: int
    feature_level_supported: int
    lease_grants_paused_ms: int
    maintenance: bool
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., node_id: _Optional[str] = ..., is_leader: _Optional[bool] = ..., leader_id: _Optional[str] = ..., leader_addr: _Optional[str] = ..., raft_term: _Optional[int] = ..., peers: _Optional[_Iterable[_Union[ControllerPeer, _Mapping]]] = ..., groups: _Optional[int] = ..., raft_role: _Optional[str] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., last_index: _Optional[int] = ..., cluster_id: _Optional[str] = ..., config_index: _Optional[int] = ..., version: _Optional[str] = ..., feature_level: _Optional[int] = ..., feature_level_supported: _Optional[int] = ..., lease_grants_paused_ms: _Optional[int] = ..., maintenance: _Optional[bool] = ...) -> None: ...

class FinalizeFeaturesRequest(_message.Message):
    __slots__ = ("level", "dry_run")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    level: int
    dry_run: bool
    def __init__(self, level: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class FeatureMember(_message.Message):
    __slots__ = ("name", "kind", "supported", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    supported: int
    version: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., supported: _Optional[int] = ..., version: _Optional[str] = ...) -> None: ...

class FinalizeFeaturesReply(_message.Message):
    __slots__ = ("header", "finalized", "previous", "supported_here", "members", "behind")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    FINALIZED_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_HERE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    BEHIND_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    finalized: int
    previous: int
    supported_here: int
    members: _containers.RepeatedCompositeFieldContainer[FeatureMember]
    behind: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., finalized: _Optional[int] = ..., previous: _Optional[int] = ..., supported_here: _Optional[int] = ..., members: _Optional[_Iterable[_Union[FeatureMember, _Mapping]]] = ..., behind: _Optional[_Iterable[str]] = ...) -> None: ...

class GetControllerConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetControllerConfigReply(_message.Message):
    __slots__ = ("header", "config")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    config: _containers.ScalarMap[str, str]
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateControllerConfigRequest(_message.Message):
    __slots__ = ("config",)
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _containers.ScalarMap[str, str]
    def __init__(self, config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateControllerConfigReply(_message.Message):
    __slots__ = ("header", "config")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    config: _containers.ScalarMap[str, str]
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WatchReplicaInfoRequest(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class ReplicaInfoEvent(_message.Message):
    __slots__ = ("header", "replica_info", "raft_index")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICA_INFO_FIELD_NUMBER: _ClassVar[int]
    RAFT_INDEX_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    replica_info: ReplicaInfo
    raft_index: int
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., replica_info: _Optional[_Union[ReplicaInfo, _Mapping]] = ..., raft_index: _Optional[int] = ...) -> None: ...

class BrokerKey(_message.Message):
    __slots__ = ("broker_name", "broker_id")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class LivenessOpinion(_message.Message):
    __slots__ = ("broker", "alive", "last_heard_ms_ago", "epoch", "max_offset", "confirm_offset", "election_priority", "clean_shutdown", "no_opinion", "crashed", "min_in_sync_replicas", "ack_mode", "incarnation", "diverged")
    BROKER_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARD_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ELECTION_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CLEAN_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    NO_OPINION_FIELD_NUMBER: _ClassVar[int]
    CRASHED_FIELD_NUMBER: _ClassVar[int]
    MIN_IN_SYNC_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ACK_MODE_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    DIVERGED_FIELD_NUMBER: _ClassVar[int]
    broker: BrokerKey
    alive: bool
    last_heard_ms_ago: int
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int
    clean_shutdown: bool
    no_opinion: bool
    crashed: bool
    min_in_sync_replicas: int
    ack_mode: str
    incarnation: str
    diverged: bool
    def __init__(self, broker: _Optional[_Union[BrokerKey, _Mapping]] = ..., alive: _Optional[bool] = ..., last_heard_ms_ago: _Optional[int] = ..., epoch: _Optional[int] = ..., max_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., election_priority: _Optional[int] = ..., clean_shutdown: _Optional[bool] = ..., no_opinion: _Optional[bool] = ..., crashed: _Optional[bool] = ..., min_in_sync_replicas: _Optional[int] = ..., ack_mode: _Optional[str] = ..., incarnation: _Optional[str] = ..., diverged: _Optional[bool] = ...) -> None: ...

class BrokerSessionRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "ack_mode", "incarnation")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ACK_MODE_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    ack_mode: str
    incarnation: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., ack_mode: _Optional[str] = ..., incarnation: _Optional[str] = ...) -> None: ...

class BrokerSessionEvent(_message.Message):
    __slots__ = ("header", "tracked")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TRACKED_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    tracked: bool
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., tracked: _Optional[bool] = ...) -> None: ...

class WatchAlertsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AlertEvent(_message.Message):
    __slots__ = ("header", "kind", "group", "ts_ms", "json")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TS_MS_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    kind: str
    group: str
    ts_ms: int
    json: str
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., kind: _Optional[str] = ..., group: _Optional[str] = ..., ts_ms: _Optional[int] = ..., json: _Optional[str] = ...) -> None: ...

class QueryLivenessRequest(_message.Message):
    __slots__ = ("brokers", "asking_node")
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    ASKING_NODE_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerKey]
    asking_node: str
    def __init__(self, brokers: _Optional[_Iterable[_Union[BrokerKey, _Mapping]]] = ..., asking_node: _Optional[str] = ...) -> None: ...

class GetStateHashRequest(_message.Message):
    __slots__ = ("index",)
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class GetStateHashReply(_message.Message):
    __slots__ = ("header", "found", "hash", "applied_index", "corrupt")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    CORRUPT_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    found: bool
    hash: str
    applied_index: int
    corrupt: str
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., found: _Optional[bool] = ..., hash: _Optional[str] = ..., applied_index: _Optional[int] = ..., corrupt: _Optional[str] = ...) -> None: ...

class QueryLivenessReply(_message.Message):
    __slots__ = ("header", "opinions", "max_assumed_timeout_ms")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    OPINIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_ASSUMED_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    opinions: _containers.RepeatedCompositeFieldContainer[LivenessOpinion]
    max_assumed_timeout_ms: int
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., opinions: _Optional[_Iterable[_Union[LivenessOpinion, _Mapping]]] = ..., max_assumed_timeout_ms: _Optional[int] = ...) -> None: ...

class ExportEventsRequest(_message.Message):
    __slots__ = ("from_line", "max_lines")
    FROM_LINE_FIELD_NUMBER: _ClassVar[int]
    MAX_LINES_FIELD_NUMBER: _ClassVar[int]
    from_line: int
    max_lines: int
    def __init__(self, from_line: _Optional[int] = ..., max_lines: _Optional[int] = ...) -> None: ...

class ExportEventsReply(_message.Message):
    __slots__ = ("header", "lines", "next_line", "eof")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    NEXT_LINE_FIELD_NUMBER: _ClassVar[int]
    EOF_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    lines: _containers.RepeatedScalarFieldContainer[str]
    next_line: int
    eof: bool
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., lines: _Optional[_Iterable[str]] = ..., next_line: _Optional[int] = ..., eof: _Optional[bool] = ...) -> None: ...

class BatchCall(_message.Message):
    __slots__ = ("method", "request")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    method: str
    request: bytes
    def __init__(self, method: _Optional[str] = ..., request: _Optional[bytes] = ...) -> None: ...

class BatchCallReply(_message.Message):
    __slots__ = ("reply", "code", "message")
    REPLY_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reply: bytes
    code: int
    message: str
    def __init__(self, reply: _Optional[bytes] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class BatchRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[BatchCall]
    def __init__(self, calls: _Optional[_Iterable[_Union[BatchCall, _Mapping]]] = ...) -> None: ...

class BatchReply(_message.Message):
    __slots__ = ("header", "replies")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    header: ReplyHeader
    replies: _containers.RepeatedCompositeFieldContainer[BatchCallReply]
    def __init__(self, header: _Optional[_Union[ReplyHeader, _Mapping]] = ..., replies: _Optional[_Iterable[_Union[BatchCallReply, _Mapping]]] = ...) -> None: ...
