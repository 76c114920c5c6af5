from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class SetClockOffsetRequest(_message.Message):
    __slots__ = ("offset_ms",)
    OFFSET_MS_FIELD_NUMBER: _ClassVar[int]
    offset_ms: int
    def __init__(self, offset_ms: _Optional[int] = ...) -> None: ...

class GetClockOffsetRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClockOffset(_message.Message):
    __slots__ = ("offset_ms", "previous_ms")
    OFFSET_MS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_MS_FIELD_NUMBER: _ClassVar[int]
    offset_ms: int
    previous_ms: int
    def __init__(self, offset_ms: _Optional[int] = ..., previous_ms: _Optional[int] = ...) -> None: ...
