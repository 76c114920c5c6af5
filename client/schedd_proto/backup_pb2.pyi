from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SaveSnapshotRequest(_message.Message):
    __slots__ = ("shard",)
    SHARD_FIELD_NUMBER: _ClassVar[int]
    shard: int
    def __init__(self, shard: _Optional[int] = ...) -> None: ...

class SnapshotHeader(_message.Message):
    __slots__ = ("index", "term", "digest", "schedd_version", "snapshot_format", "tzdata", "croniter", "created_ms", "body_encoding", "body_length", "body_sha256", "file_header")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SCHEDD_VERSION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TZDATA_FIELD_NUMBER: _ClassVar[int]
    CRONITER_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    BODY_ENCODING_FIELD_NUMBER: _ClassVar[int]
    BODY_LENGTH_FIELD_NUMBER: _ClassVar[int]
    BODY_SHA256_FIELD_NUMBER: _ClassVar[int]
    FILE_HEADER_FIELD_NUMBER: _ClassVar[int]
    index: int
    term: int
    digest: str
    schedd_version: str
    snapshot_format: int
    tzdata: str
    croniter: str
    created_ms: int
    body_encoding: str
    body_length: int
    body_sha256: str
    file_header: bytes
    def __init__(self, index: _Optional[int] = ..., term: _Optional[int] = ..., digest: _Optional[str] = ..., schedd_version: _Optional[str] = ..., snapshot_format: _Optional[int] = ..., tzdata: _Optional[str] = ..., croniter: _Optional[str] = ..., created_ms: _Optional[int] = ..., body_encoding: _Optional[str] = ..., body_length: _Optional[int] = ..., body_sha256: _Optional[str] = ..., file_header: _Optional[bytes] = ...) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: SnapshotHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[SnapshotHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class CopyHistoryRequest(_message.Message):
    __slots__ = ("after", "upto")
    AFTER_FIELD_NUMBER: _ClassVar[int]
    UPTO_FIELD_NUMBER: _ClassVar[int]
    after: int
    upto: int
    def __init__(self, after: _Optional[int] = ..., upto: _Optional[int] = ...) -> None: ...

class HistoryRow(_message.Message):
    __slots__ = ("cols", "body", "applied")
    COLS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    cols: str
    body: bytes
    applied: int
    def __init__(self, cols: _Optional[str] = ..., body: _Optional[bytes] = ..., applied: _Optional[int] = ...) -> None: ...

class HistoryChunk(_message.Message):
    __slots__ = ("rows", "teams")
    class TeamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TEAMS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[HistoryRow]
    teams: _containers.ScalarMap[str, str]
    def __init__(self, rows: _Optional[_Iterable[_Union[HistoryRow, _Mapping]]] = ..., teams: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SaveHistoryRequest(_message.Message):
    __slots__ = ("shard",)
    SHARD_FIELD_NUMBER: _ClassVar[int]
    shard: int
    def __init__(self, shard: _Optional[int] = ...) -> None: ...
