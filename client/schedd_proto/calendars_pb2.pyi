from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CalendarEntry(_message.Message):
    __slots__ = ("date", "last", "name")
    DATE_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    date: str
    last: str
    name: str
    def __init__(self, date: _Optional[str] = ..., last: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class CalendarSpec(_message.Message):
    __slots__ = ("name", "team", "description", "entries", "weekdays", "country", "subdiv", "year_from", "year_to", "ics", "ics_name")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    WEEKDAYS_FIELD_NUMBER: _ClassVar[int]
    COUNTRY_FIELD_NUMBER: _ClassVar[int]
    SUBDIV_FIELD_NUMBER: _ClassVar[int]
    YEAR_FROM_FIELD_NUMBER: _ClassVar[int]
    YEAR_TO_FIELD_NUMBER: _ClassVar[int]
    ICS_FIELD_NUMBER: _ClassVar[int]
    ICS_NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    team: str
    description: str
    entries: _containers.RepeatedCompositeFieldContainer[CalendarEntry]
    weekdays: _containers.RepeatedScalarFieldContainer[str]
    country: str
    subdiv: str
    year_from: int
    year_to: int
    ics: str
    ics_name: str
    def __init__(self, name: _Optional[str] = ..., team: _Optional[str] = ..., description: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[CalendarEntry, _Mapping]]] = ..., weekdays: _Optional[_Iterable[str]] = ..., country: _Optional[str] = ..., subdiv: _Optional[str] = ..., year_from: _Optional[int] = ..., year_to: _Optional[int] = ..., ics: _Optional[str] = ..., ics_name: _Optional[str] = ...) -> None: ...

class Calendar(_message.Message):
    __slots__ = ("spec", "version", "updated_ms", "updated_by", "sources", "used_by")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_BY_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    USED_BY_FIELD_NUMBER: _ClassVar[int]
    spec: CalendarSpec
    version: int
    updated_ms: int
    updated_by: str
    sources: _containers.RepeatedScalarFieldContainer[str]
    used_by: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, spec: _Optional[_Union[CalendarSpec, _Mapping]] = ..., version: _Optional[int] = ..., updated_ms: _Optional[int] = ..., updated_by: _Optional[str] = ..., sources: _Optional[_Iterable[str]] = ..., used_by: _Optional[_Iterable[str]] = ...) -> None: ...

class PutCalendarRequest(_message.Message):
    __slots__ = ("calendar", "request_id", "create_only")
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    calendar: CalendarSpec
    request_id: str
    create_only: bool
    def __init__(self, calendar: _Optional[_Union[CalendarSpec, _Mapping]] = ..., request_id: _Optional[str] = ..., create_only: _Optional[bool] = ...) -> None: ...

class PutCalendarResponse(_message.Message):
    __slots__ = ("calendar", "created", "note")
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    calendar: Calendar
    created: bool
    note: str
    def __init__(self, calendar: _Optional[_Union[Calendar, _Mapping]] = ..., created: _Optional[bool] = ..., note: _Optional[str] = ...) -> None: ...

class GetCalendarRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListCalendarsRequest(_message.Message):
    __slots__ = ("team",)
    TEAM_FIELD_NUMBER: _ClassVar[int]
    team: str
    def __init__(self, team: _Optional[str] = ...) -> None: ...

class ListCalendarsResponse(_message.Message):
    __slots__ = ("calendars",)
    CALENDARS_FIELD_NUMBER: _ClassVar[int]
    calendars: _containers.RepeatedCompositeFieldContainer[Calendar]
    def __init__(self, calendars: _Optional[_Iterable[_Union[Calendar, _Mapping]]] = ...) -> None: ...

class DeleteCalendarRequest(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteCalendarResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Blackout(_message.Message):
    __slots__ = ("name", "start_ms", "end_ms", "team", "labels", "reason", "created_ms", "created_by")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    START_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    name: str
    start_ms: int
    end_ms: int
    team: str
    labels: _containers.ScalarMap[str, str]
    reason: str
    created_ms: int
    created_by: str
    def __init__(self, name: _Optional[str] = ..., start_ms: _Optional[int] = ..., end_ms: _Optional[int] = ..., team: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., reason: _Optional[str] = ..., created_ms: _Optional[int] = ..., created_by: _Optional[str] = ...) -> None: ...

class PutBlackoutRequest(_message.Message):
    __slots__ = ("blackout", "request_id")
    BLACKOUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    blackout: Blackout
    request_id: str
    def __init__(self, blackout: _Optional[_Union[Blackout, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ListBlackoutsRequest(_message.Message):
    __slots__ = ("team",)
    TEAM_FIELD_NUMBER: _ClassVar[int]
    team: str
    def __init__(self, team: _Optional[str] = ...) -> None: ...

class ListBlackoutsResponse(_message.Message):
    __slots__ = ("blackouts",)
    BLACKOUTS_FIELD_NUMBER: _ClassVar[int]
    blackouts: _containers.RepeatedCompositeFieldContainer[Blackout]
    def __init__(self, blackouts: _Optional[_Iterable[_Union[Blackout, _Mapping]]] = ...) -> None: ...

class DeleteBlackoutRequest(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteBlackoutResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...
