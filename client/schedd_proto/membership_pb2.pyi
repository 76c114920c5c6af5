from schedd_proto import scheduler_pb2 as _scheduler_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AddNodeRequest(_message.Message):
    __slots__ = ("id", "raft_address", "grpc_address", "wait_caught_up_s")
    ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    WAIT_CAUGHT_UP_S_FIELD_NUMBER: _ClassVar[int]
    id: str
    raft_address: str
    grpc_address: str
    wait_caught_up_s: float
    def __init__(self, id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., wait_caught_up_s: _Optional[float] = ...) -> None: ...

class RemoveNodeRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class JoinClusterRequest(_message.Message):
    __slots__ = ("id", "raft_address", "grpc_address", "tzdata", "croniter", "prepare", "max_feature_level", "snapshot_formats", "version", "shards", "raft_ports")
    ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TZDATA_FIELD_NUMBER: _ClassVar[int]
    CRONITER_FIELD_NUMBER: _ClassVar[int]
    PREPARE_FIELD_NUMBER: _ClassVar[int]
    MAX_FEATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FORMATS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    RAFT_PORTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    raft_address: str
    grpc_address: str
    tzdata: str
    croniter: str
    prepare: bool
    max_feature_level: int
    snapshot_formats: _containers.RepeatedScalarFieldContainer[int]
    version: str
    shards: int
    raft_ports: str
    def __init__(self, id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., tzdata: _Optional[str] = ..., croniter: _Optional[str] = ..., prepare: _Optional[bool] = ..., max_feature_level: _Optional[int] = ..., snapshot_formats: _Optional[_Iterable[int]] = ..., version: _Optional[str] = ..., shards: _Optional[int] = ..., raft_ports: _Optional[str] = ...) -> None: ...

class MembershipChangeResponse(_message.Message):
    __slots__ = ("members", "steps", "seconds", "caught_up", "already_member")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    CAUGHT_UP_FIELD_NUMBER: _ClassVar[int]
    ALREADY_MEMBER_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[_scheduler_pb2.MemberInfo]
    steps: _containers.RepeatedScalarFieldContainer[str]
    seconds: float
    caught_up: bool
    already_member: bool
    def __init__(self, members: _Optional[_Iterable[_Union[_scheduler_pb2.MemberInfo, _Mapping]]] = ..., steps: _Optional[_Iterable[str]] = ..., seconds: _Optional[float] = ..., caught_up: _Optional[bool] = ..., already_member: _Optional[bool] = ...) -> None: ...
