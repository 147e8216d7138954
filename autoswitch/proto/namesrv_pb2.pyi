from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NamesrvReplyHeader(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class BrokerRoute(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "address", "role", "master_epoch", "age_ms", "ha_address", "fetch_address")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    AGE_MS_FIELD_NUMBER: _ClassVar[int]
    HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FETCH_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    role: str
    master_epoch: int
    age_ms: int
    ha_address: str
    fetch_address: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., address: _Optional[str] = ..., role: _Optional[str] = ..., master_epoch: _Optional[int] = ..., age_ms: _Optional[int] = ..., ha_address: _Optional[str] = ..., fetch_address: _Optional[str] = ...) -> None: ...

class RegisterRouteRequest(_message.Message):
    __slots__ = ("route", "ttl_ms")
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    route: BrokerRoute
    ttl_ms: int
    def __init__(self, route: _Optional[_Union[BrokerRoute, _Mapping]] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class RegisterRouteReply(_message.Message):
    __slots__ = ("header", "accepted_as_master", "group_master_epoch")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_AS_MASTER_FIELD_NUMBER: _ClassVar[int]
    GROUP_MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    header: NamesrvReplyHeader
    accepted_as_master: bool
    group_master_epoch: int
    def __init__(self, header: _Optional[_Union[NamesrvReplyHeader, _Mapping]] = ..., accepted_as_master: _Optional[bool] = ..., group_master_epoch: _Optional[int] = ...) -> None: ...

class UnregisterRouteRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class UnregisterRouteReply(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: NamesrvReplyHeader
    def __init__(self, header: _Optional[_Union[NamesrvReplyHeader, _Mapping]] = ...) -> None: ...

class LookupMasterRequest(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class LookupMasterReply(_message.Message):
    __slots__ = ("header", "master")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    header: NamesrvReplyHeader
    master: BrokerRoute
    def __init__(self, header: _Optional[_Union[NamesrvReplyHeader, _Mapping]] = ..., master: _Optional[_Union[BrokerRoute, _Mapping]] = ...) -> None: ...

class GetRoutesRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ...) -> None: ...

class GetRoutesReply(_message.Message):
    __slots__ = ("header", "routes")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    header: NamesrvReplyHeader
    routes: _containers.RepeatedCompositeFieldContainer[BrokerRoute]
    def __init__(self, header: _Optional[_Union[NamesrvReplyHeader, _Mapping]] = ..., routes: _Optional[_Iterable[_Union[BrokerRoute, _Mapping]]] = ...) -> None: ...
