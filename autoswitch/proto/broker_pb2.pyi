from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[Status]
    NOT_MASTER: _ClassVar[Status]
    FENCED: _ClassVar[Status]
    IN_SYNC_REPLICAS_NOT_ENOUGH: _ClassVar[Status]
    FLUSH_SLAVE_TIMEOUT: _ClassVar[Status]
    MESSAGE_TOO_LARGE: _ClassVar[Status]
    BAD_REQUEST: _ClassVar[Status]
    STALE_EPOCH: _ClassVar[Status]
    INTERNAL: _ClassVar[Status]
    NOT_ALLOWED: _ClassVar[Status]
    STORAGE_FULL: _ClassVar[Status]
    OFFSET_OUT_OF_RANGE: _ClassVar[Status]
    HANDOVER_FAILED: _ClassVar[Status]
    NOT_FOUND: _ClassVar[Status]
OK: Status
NOT_MASTER: Status
FENCED: Status
IN_SYNC_REPLICAS_NOT_ENOUGH: Status
FLUSH_SLAVE_TIMEOUT: Status
MESSAGE_TOO_LARGE: Status
BAD_REQUEST: Status
STALE_EPOCH: Status
INTERNAL: Status
NOT_ALLOWED: Status
STORAGE_FULL: Status
OFFSET_OUT_OF_RANGE: Status
HANDOVER_FAILED: Status
NOT_FOUND: Status

class ProduceMessage(_message.Message):
    __slots__ = ("body", "msg_id", "born_ts_ms")
    BODY_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    BORN_TS_MS_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    msg_id: str
    born_ts_ms: int
    def __init__(self, body: _Optional[bytes] = ..., msg_id: _Optional[str] = ..., born_ts_ms: _Optional[int] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("topic", "messages", "expect_master_epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    EXPECT_MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    messages: _containers.RepeatedCompositeFieldContainer[ProduceMessage]
    expect_master_epoch: int
    def __init__(self, topic: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ProduceMessage, _Mapping]]] = ..., expect_master_epoch: _Optional[int] = ...) -> None: ...

class ProduceResult(_message.Message):
    __slots__ = ("msg_id", "phy_offset", "queue_offset", "epoch", "status")
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    phy_offset: int
    queue_offset: int
    epoch: int
    status: Status
    def __init__(self, msg_id: _Optional[str] = ..., phy_offset: _Optional[int] = ..., queue_offset: _Optional[int] = ..., epoch: _Optional[int] = ..., status: _Optional[_Union[Status, str]] = ...) -> None: ...

class ProduceReply(_message.Message):
    __slots__ = ("status", "error_message", "master_addr", "results", "group", "broker_id", "master_epoch")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    master_addr: str
    results: _containers.RepeatedCompositeFieldContainer[ProduceResult]
    group: str
    broker_id: int
    master_epoch: int
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., master_addr: _Optional[str] = ..., results: _Optional[_Iterable[_Union[ProduceResult, _Mapping]]] = ..., group: _Optional[str] = ..., broker_id: _Optional[int] = ..., master_epoch: _Optional[int] = ...) -> None: ...

class ConsumeRequest(_message.Message):
    __slots__ = ("topic", "queue_offset", "max_count", "record_runs", "min_count", "max_wait_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    RECORD_RUNS_FIELD_NUMBER: _ClassVar[int]
    MIN_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_offset: int
    max_count: int
    record_runs: bool
    min_count: int
    max_wait_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_offset: _Optional[int] = ..., max_count: _Optional[int] = ..., record_runs: _Optional[bool] = ..., min_count: _Optional[int] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class RecordRun(_message.Message):
    __slots__ = ("phy_offset", "records")
    PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    phy_offset: int
    records: bytes
    def __init__(self, phy_offset: _Optional[int] = ..., records: _Optional[bytes] = ...) -> None: ...

class ConsumedMessage(_message.Message):
    __slots__ = ("msg_id", "body", "queue_offset", "phy_offset", "born_ts_ms", "topic")
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BORN_TS_MS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    body: bytes
    queue_offset: int
    phy_offset: int
    born_ts_ms: int
    topic: str
    def __init__(self, msg_id: _Optional[str] = ..., body: _Optional[bytes] = ..., queue_offset: _Optional[int] = ..., phy_offset: _Optional[int] = ..., born_ts_ms: _Optional[int] = ..., topic: _Optional[str] = ...) -> None: ...

class ConsumeReply(_message.Message):
    __slots__ = ("status", "error_message", "messages", "next_queue_offset", "confirm_offset", "master_addr", "runs")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    messages: _containers.RepeatedCompositeFieldContainer[ConsumedMessage]
    next_queue_offset: int
    confirm_offset: int
    master_addr: str
    runs: _containers.RepeatedCompositeFieldContainer[RecordRun]
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ConsumedMessage, _Mapping]]] = ..., next_queue_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., master_addr: _Optional[str] = ..., runs: _Optional[_Iterable[_Union[RecordRun, _Mapping]]] = ...) -> None: ...

class EpochEntry(_message.Message):
    __slots__ = ("epoch", "start_offset", "end_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    end_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class GetBrokerEpochRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetBrokerEpochReply(_message.Message):
    __slots__ = ("group", "broker_id", "role", "master_epoch", "epochs", "min_offset", "max_offset", "confirm_offset", "sync_state_set", "sync_state_set_epoch")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    group: str
    broker_id: int
    role: str
    master_epoch: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    min_offset: int
    max_offset: int
    confirm_offset: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    sync_state_set_epoch: int
    def __init__(self, group: _Optional[str] = ..., broker_id: _Optional[int] = ..., role: _Optional[str] = ..., master_epoch: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., sync_state_set_epoch: _Optional[int] = ...) -> None: ...

class SwitchRoleRequest(_message.Message):
    __slots__ = ("role", "master_epoch", "master_ha_addr", "master_addr", "sync_state_set", "sync_state_set_epoch")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MASTER_HA_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    role: str
    master_epoch: int
    master_ha_addr: str
    master_addr: str
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    sync_state_set_epoch: int
    def __init__(self, role: _Optional[str] = ..., master_epoch: _Optional[int] = ..., master_ha_addr: _Optional[str] = ..., master_addr: _Optional[str] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., sync_state_set_epoch: _Optional[int] = ...) -> None: ...

class SwitchRoleReply(_message.Message):
    __slots__ = ("status", "error_message", "role", "master_epoch")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    role: str
    master_epoch: int
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., role: _Optional[str] = ..., master_epoch: _Optional[int] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SlaveInfo(_message.Message):
    __slots__ = ("broker_id", "addr", "ack_offset", "last_caught_up_time", "in_sync")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    ACK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_CAUGHT_UP_TIME_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    addr: str
    ack_offset: int
    last_caught_up_time: float
    in_sync: bool
    def __init__(self, broker_id: _Optional[int] = ..., addr: _Optional[str] = ..., ack_offset: _Optional[int] = ..., last_caught_up_time: _Optional[float] = ..., in_sync: _Optional[bool] = ...) -> None: ...

class GetStatusReply(_message.Message):
    __slots__ = ("group", "broker_id", "role", "master_epoch", "max_offset", "confirm_offset", "listen", "ha_listen", "master_ha_addr", "ack_mode", "flush", "sync_state_set", "slaves", "ha_state", "uptime_s", "produced_msgs", "consumed_msgs", "replicas_json", "fenced_reason", "digests_json", "health_json")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LISTEN_FIELD_NUMBER: _ClassVar[int]
    HA_LISTEN_FIELD_NUMBER: _ClassVar[int]
    MASTER_HA_ADDR_FIELD_NUMBER: _ClassVar[int]
    ACK_MODE_FIELD_NUMBER: _ClassVar[int]
    FLUSH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    SLAVES_FIELD_NUMBER: _ClassVar[int]
    HA_STATE_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_MSGS_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_MSGS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_JSON_FIELD_NUMBER: _ClassVar[int]
    FENCED_REASON_FIELD_NUMBER: _ClassVar[int]
    DIGESTS_JSON_FIELD_NUMBER: _ClassVar[int]
    HEALTH_JSON_FIELD_NUMBER: _ClassVar[int]
    group: str
    broker_id: int
    role: str
    master_epoch: int
    max_offset: int
    confirm_offset: int
    listen: str
    ha_listen: str
    master_ha_addr: str
    ack_mode: str
    flush: str
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    slaves: _containers.RepeatedCompositeFieldContainer[SlaveInfo]
    ha_state: str
    uptime_s: float
    produced_msgs: int
    consumed_msgs: int
    replicas_json: str
    fenced_reason: str
    digests_json: str
    health_json: str
    def __init__(self, group: _Optional[str] = ..., broker_id: _Optional[int] = ..., role: _Optional[str] = ..., master_epoch: _Optional[int] = ..., max_offset: _Optional[int] = ..., confirm_offset: _Optional[int] = ..., listen: _Optional[str] = ..., ha_listen: _Optional[str] = ..., master_ha_addr: _Optional[str] = ..., ack_mode: _Optional[str] = ..., flush: _Optional[str] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., slaves: _Optional[_Iterable[_Union[SlaveInfo, _Mapping]]] = ..., ha_state: _Optional[str] = ..., uptime_s: _Optional[float] = ..., produced_msgs: _Optional[int] = ..., consumed_msgs: _Optional[int] = ..., replicas_json: _Optional[str] = ..., fenced_reason: _Optional[str] = ..., digests_json: _Optional[str] = ..., health_json: _Optional[str] = ...) -> None: ...

class LogDigestRequest(_message.Message):
    __slots__ = ("from_offset", "to_offset")
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    from_offset: int
    to_offset: int
    def __init__(self, from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ...) -> None: ...

class LogDigestReply(_message.Message):
    __slots__ = ("status", "error_message", "from_offset", "to_offset", "sha256")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    from_offset: int
    to_offset: int
    sha256: str
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class LogRangesRequest(_message.Message):
    __slots__ = ("from_offset", "to_offset", "range_bytes")
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RANGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    from_offset: int
    to_offset: int
    range_bytes: int
    def __init__(self, from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ..., range_bytes: _Optional[int] = ...) -> None: ...

class RangeDigest(_message.Message):
    __slots__ = ("epoch", "start", "end", "digest")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start: int
    end: int
    digest: int
    def __init__(self, epoch: _Optional[int] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., digest: _Optional[int] = ...) -> None: ...

class LogRangesReply(_message.Message):
    __slots__ = ("status", "error_message", "ranges", "next_offset", "min_offset", "max_offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    ranges: _containers.RepeatedCompositeFieldContainer[RangeDigest]
    next_offset: int
    min_offset: int
    max_offset: int
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., ranges: _Optional[_Iterable[_Union[RangeDigest, _Mapping]]] = ..., next_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class CommitOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_offset", "operator_reset")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_RESET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_offset: int
    operator_reset: bool
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_offset: _Optional[int] = ..., operator_reset: _Optional[bool] = ...) -> None: ...

class CommitOffsetReply(_message.Message):
    __slots__ = ("status", "error_message", "master_addr", "group", "broker_id", "epoch")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    master_addr: str
    group: str
    broker_id: int
    epoch: int
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., master_addr: _Optional[str] = ..., group: _Optional[str] = ..., broker_id: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class FetchOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class CommittedOffset(_message.Message):
    __slots__ = ("topic", "found", "queue_offset", "log_end", "clamped", "committed_beyond", "consumer_group", "owner")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_FIELD_NUMBER: _ClassVar[int]
    CLAMPED_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_BEYOND_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    found: bool
    queue_offset: int
    log_end: int
    clamped: bool
    committed_beyond: int
    consumer_group: str
    owner: str
    def __init__(self, topic: _Optional[str] = ..., found: _Optional[bool] = ..., queue_offset: _Optional[int] = ..., log_end: _Optional[int] = ..., clamped: _Optional[bool] = ..., committed_beyond: _Optional[int] = ..., consumer_group: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class FetchOffsetReply(_message.Message):
    __slots__ = ("status", "error_message", "master_addr", "offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    master_addr: str
    offset: CommittedOffset
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., master_addr: _Optional[str] = ..., offset: _Optional[_Union[CommittedOffset, _Mapping]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopicInfo(_message.Message):
    __slots__ = ("topic", "min_queue_offset", "max_queue_offset", "internal", "configured", "max_message_bytes", "deleted", "created_by", "retention_hours")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MIN_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    RETENTION_HOURS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    min_queue_offset: int
    max_queue_offset: int
    internal: bool
    configured: bool
    max_message_bytes: int
    deleted: bool
    created_by: str
    retention_hours: float
    def __init__(self, topic: _Optional[str] = ..., min_queue_offset: _Optional[int] = ..., max_queue_offset: _Optional[int] = ..., internal: _Optional[bool] = ..., configured: _Optional[bool] = ..., max_message_bytes: _Optional[int] = ..., deleted: _Optional[bool] = ..., created_by: _Optional[str] = ..., retention_hours: _Optional[float] = ...) -> None: ...

class GetBrokerConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerConfigReply(_message.Message):
    __slots__ = ("status", "error_message", "config_json", "runtime_keys", "sources")
    class SourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_KEYS_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    config_json: str
    runtime_keys: _containers.RepeatedScalarFieldContainer[str]
    sources: _containers.ScalarMap[str, str]
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., config_json: _Optional[str] = ..., runtime_keys: _Optional[_Iterable[str]] = ..., sources: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateBrokerConfigRequest(_message.Message):
    __slots__ = ("changes",)
    class ChangesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.ScalarMap[str, str]
    def __init__(self, changes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("topic", "max_message_bytes", "retention_hours")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RETENTION_HOURS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    max_message_bytes: int
    retention_hours: float
    def __init__(self, topic: _Optional[str] = ..., max_message_bytes: _Optional[int] = ..., retention_hours: _Optional[float] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class TopicChangeReply(_message.Message):
    __slots__ = ("status", "error_message", "master_addr", "group", "broker_id", "epoch", "created")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    master_addr: str
    group: str
    broker_id: int
    epoch: int
    created: bool
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., master_addr: _Optional[str] = ..., group: _Optional[str] = ..., broker_id: _Optional[int] = ..., epoch: _Optional[int] = ..., created: _Optional[bool] = ...) -> None: ...

class ListTopicsReply(_message.Message):
    __slots__ = ("status", "error_message", "topics", "role", "master_epoch")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    role: str
    master_epoch: int
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ..., role: _Optional[str] = ..., master_epoch: _Optional[int] = ...) -> None: ...

class DeleteConsumerGroupRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class DeleteConsumerGroupReply(_message.Message):
    __slots__ = ("status", "error_message", "master_addr", "removed", "group", "broker_id", "epoch")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    master_addr: str
    removed: int
    group: str
    broker_id: int
    epoch: int
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., master_addr: _Optional[str] = ..., removed: _Optional[int] = ..., group: _Optional[str] = ..., broker_id: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class ListClientsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClientConnection(_message.Message):
    __slots__ = ("address", "agent", "via", "first_seen_ms", "last_seen_ms", "produce_calls", "consume_calls", "commit_calls", "topics", "consumer_groups", "names_truncated")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_CALLS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_CALLS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    NAMES_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    address: str
    agent: str
    via: str
    first_seen_ms: int
    last_seen_ms: int
    produce_calls: int
    consume_calls: int
    commit_calls: int
    topics: _containers.RepeatedScalarFieldContainer[str]
    consumer_groups: _containers.RepeatedScalarFieldContainer[str]
    names_truncated: bool
    def __init__(self, address: _Optional[str] = ..., agent: _Optional[str] = ..., via: _Optional[str] = ..., first_seen_ms: _Optional[int] = ..., last_seen_ms: _Optional[int] = ..., produce_calls: _Optional[int] = ..., consume_calls: _Optional[int] = ..., commit_calls: _Optional[int] = ..., topics: _Optional[_Iterable[str]] = ..., consumer_groups: _Optional[_Iterable[str]] = ..., names_truncated: _Optional[bool] = ...) -> None: ...

class ListClientsReply(_message.Message):
    __slots__ = ("group", "broker_id", "role", "clients")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CLIENTS_FIELD_NUMBER: _ClassVar[int]
    group: str
    broker_id: int
    role: str
    clients: _containers.RepeatedCompositeFieldContainer[ClientConnection]
    def __init__(self, group: _Optional[str] = ..., broker_id: _Optional[int] = ..., role: _Optional[str] = ..., clients: _Optional[_Iterable[_Union[ClientConnection, _Mapping]]] = ...) -> None: ...

class ConsumerProgressRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class ConsumerProgressReply(_message.Message):
    __slots__ = ("status", "error_message", "master_addr", "offsets")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    master_addr: str
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., master_addr: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class TransferMasterRequest(_message.Message):
    __slots__ = ("to_broker_id", "timeout_ms", "reason")
    TO_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    to_broker_id: int
    timeout_ms: int
    reason: str
    def __init__(self, to_broker_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class TransferMasterReply(_message.Message):
    __slots__ = ("status", "error_message", "target", "master_id", "master_epoch", "master_addr", "waited_ms")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    error_message: str
    target: int
    master_id: int
    master_epoch: int
    master_addr: str
    waited_ms: int
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., error_message: _Optional[str] = ..., target: _Optional[int] = ..., master_id: _Optional[int] = ..., master_epoch: _Optional[int] = ..., master_addr: _Optional[str] = ..., waited_ms: _Optional[int] = ...) -> None: ...
