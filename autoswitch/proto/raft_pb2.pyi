from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Entry(_message.Message):
    __slots__ = ("index", "term", "kind", "data")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    index: int
    term: int
    kind: int
    data: bytes
    def __init__(self, index: _Optional[int] = ..., term: _Optional[int] = ..., kind: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class RaftMessage(_message.Message):
    __slots__ = ("type", "to", "term", "index", "log_term", "entries", "commit", "reject", "reject_hint", "reject_term", "vote_result", "seq", "transfer", "snap_index", "snap_term", "snap_offset", "snap_total", "snap_crc", "snap_done", "snap_data", "voters")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LOG_TERM_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    REJECT_FIELD_NUMBER: _ClassVar[int]
    REJECT_HINT_FIELD_NUMBER: _ClassVar[int]
    REJECT_TERM_FIELD_NUMBER: _ClassVar[int]
    VOTE_RESULT_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    SNAP_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAP_TERM_FIELD_NUMBER: _ClassVar[int]
    SNAP_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SNAP_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SNAP_CRC_FIELD_NUMBER: _ClassVar[int]
    SNAP_DONE_FIELD_NUMBER: _ClassVar[int]
    SNAP_DATA_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    type: int
    to: str
    term: int
    index: int
    log_term: int
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    commit: int
    reject: bool
    reject_hint: int
    reject_term: int
    vote_result: int
    seq: int
    transfer: bool
    snap_index: int
    snap_term: int
    snap_offset: int
    snap_total: int
    snap_crc: int
    snap_done: bool
    snap_data: bytes
    voters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, type: _Optional[int] = ..., to: _Optional[str] = ..., term: _Optional[int] = ..., index: _Optional[int] = ..., log_term: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., commit: _Optional[int] = ..., reject: _Optional[bool] = ..., reject_hint: _Optional[int] = ..., reject_term: _Optional[int] = ..., vote_result: _Optional[int] = ..., seq: _Optional[int] = ..., transfer: _Optional[bool] = ..., snap_index: _Optional[int] = ..., snap_term: _Optional[int] = ..., snap_offset: _Optional[int] = ..., snap_total: _Optional[int] = ..., snap_crc: _Optional[int] = ..., snap_done: _Optional[bool] = ..., snap_data: _Optional[bytes] = ..., voters: _Optional[_Iterable[str]] = ..., **kwargs) -> None: ...

class Batch(_message.Message):
    __slots__ = ("version", "cluster", "messages", "sender", "sender_member")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    SENDER_MEMBER_FIELD_NUMBER: _ClassVar[int]
    version: int
    cluster: str
    messages: _containers.RepeatedCompositeFieldContainer[RaftMessage]
    sender: str
    sender_member: str
    def __init__(self, version: _Optional[int] = ..., cluster: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[RaftMessage, _Mapping]]] = ..., sender: _Optional[str] = ..., sender_member: _Optional[str] = ...) -> None: ...

class StreamAck(_message.Message):
    __slots__ = ("batches",)
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: int
    def __init__(self, batches: _Optional[int] = ...) -> None: ...
