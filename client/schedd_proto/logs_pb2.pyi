from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReadRunLogsRequest(_message.Message):
    __slots__ = ("id", "attempt", "follow", "stream", "tail_lines")
    ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    id: str
    attempt: int
    follow: bool
    stream: str
    tail_lines: int
    def __init__(self, id: _Optional[str] = ..., attempt: _Optional[int] = ..., follow: _Optional[bool] = ..., stream: _Optional[str] = ..., tail_lines: _Optional[int] = ...) -> None: ...

class RunLogChunk(_message.Message):
    __slots__ = ("kind", "stream", "data", "time_ms", "dropped_bytes", "message", "state", "exit_code", "attempt", "worker", "from_raft")
    KIND_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    FROM_RAFT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    stream: str
    data: bytes
    time_ms: int
    dropped_bytes: int
    message: str
    state: str
    exit_code: int
    attempt: int
    worker: str
    from_raft: bool
    def __init__(self, kind: _Optional[str] = ..., stream: _Optional[str] = ..., data: _Optional[bytes] = ..., time_ms: _Optional[int] = ..., dropped_bytes: _Optional[int] = ..., message: _Optional[str] = ..., state: _Optional[str] = ..., exit_code: _Optional[int] = ..., attempt: _Optional[int] = ..., worker: _Optional[str] = ..., from_raft: _Optional[bool] = ...) -> None: ...

class LogRequest(_message.Message):
    __slots__ = ("request_id", "fencing_token", "offset", "max_bytes", "stream", "tail_lines", "wait_ms", "execution_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    fencing_token: int
    offset: int
    max_bytes: int
    stream: str
    tail_lines: int
    wait_ms: int
    execution_id: str
    def __init__(self, request_id: _Optional[int] = ..., fencing_token: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., stream: _Optional[str] = ..., tail_lines: _Optional[int] = ..., wait_ms: _Optional[int] = ..., execution_id: _Optional[str] = ...) -> None: ...

class LogPage(_message.Message):
    __slots__ = ("request_id", "chunks", "next_offset", "at_end", "finished", "state", "exit_code", "missing", "total_bytes")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    AT_END_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    chunks: _containers.RepeatedCompositeFieldContainer[RunLogChunk]
    next_offset: int
    at_end: bool
    finished: bool
    state: str
    exit_code: int
    missing: str
    total_bytes: int
    def __init__(self, request_id: _Optional[int] = ..., chunks: _Optional[_Iterable[_Union[RunLogChunk, _Mapping]]] = ..., next_offset: _Optional[int] = ..., at_end: _Optional[bool] = ..., finished: _Optional[bool] = ..., state: _Optional[str] = ..., exit_code: _Optional[int] = ..., missing: _Optional[str] = ..., total_bytes: _Optional[int] = ...) -> None: ...
