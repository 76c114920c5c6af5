from schedd_proto import logs_pb2 as _logs_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ShellHandler(_message.Message):
    __slots__ = ("command", "argv", "workdir", "env", "inherit_env")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    INHERIT_ENV_FIELD_NUMBER: _ClassVar[int]
    command: str
    argv: _containers.RepeatedScalarFieldContainer[str]
    workdir: str
    env: _containers.ScalarMap[str, str]
    inherit_env: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, command: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., workdir: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., inherit_env: _Optional[_Iterable[str]] = ...) -> None: ...

class HttpHandler(_message.Message):
    __slots__ = ("method", "url", "headers", "body", "insecure_skip_verify")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METHOD_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    INSECURE_SKIP_VERIFY_FIELD_NUMBER: _ClassVar[int]
    method: str
    url: str
    headers: _containers.ScalarMap[str, str]
    body: str
    insecure_skip_verify: bool
    def __init__(self, method: _Optional[str] = ..., url: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., body: _Optional[str] = ..., insecure_skip_verify: _Optional[bool] = ...) -> None: ...

class PythonHandler(_message.Message):
    __slots__ = ("name", "args_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    args_json: str
    def __init__(self, name: _Optional[str] = ..., args_json: _Optional[str] = ...) -> None: ...

class ContainerHandler(_message.Message):
    __slots__ = ("image", "command", "args", "env", "workdir", "user", "network", "cpu", "memory", "pids", "read_only", "mounts", "pull")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    PULL_FIELD_NUMBER: _ClassVar[int]
    image: str
    command: str
    args: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    workdir: str
    user: str
    network: str
    cpu: float
    memory: str
    pids: int
    read_only: bool
    mounts: _containers.RepeatedCompositeFieldContainer[ContainerMount]
    pull: str
    def __init__(self, image: _Optional[str] = ..., command: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., workdir: _Optional[str] = ..., user: _Optional[str] = ..., network: _Optional[str] = ..., cpu: _Optional[float] = ..., memory: _Optional[str] = ..., pids: _Optional[int] = ..., read_only: _Optional[bool] = ..., mounts: _Optional[_Iterable[_Union[ContainerMount, _Mapping]]] = ..., pull: _Optional[str] = ...) -> None: ...

class ContainerMount(_message.Message):
    __slots__ = ("source", "target", "read_only")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    source: str
    target: str
    read_only: bool
    def __init__(self, source: _Optional[str] = ..., target: _Optional[str] = ..., read_only: _Optional[bool] = ...) -> None: ...

class Handler(_message.Message):
    __slots__ = ("shell", "http", "python", "container")
    SHELL_FIELD_NUMBER: _ClassVar[int]
    HTTP_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    shell: ShellHandler
    http: HttpHandler
    python: PythonHandler
    container: ContainerHandler
    def __init__(self, shell: _Optional[_Union[ShellHandler, _Mapping]] = ..., http: _Optional[_Union[HttpHandler, _Mapping]] = ..., python: _Optional[_Union[PythonHandler, _Mapping]] = ..., container: _Optional[_Union[ContainerHandler, _Mapping]] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff_seconds", "max_backoff_seconds", "multiplier")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff_seconds: float
    max_backoff_seconds: float
    multiplier: float
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff_seconds: _Optional[float] = ..., max_backoff_seconds: _Optional[float] = ..., multiplier: _Optional[float] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("name", "team", "schedule", "timezone", "handler", "description", "labels", "retry", "timeout_seconds", "overlap", "catchup", "priority", "pool", "paused", "history_limit", "delivery", "worker_labels", "max_active", "queue_limit", "concurrency_key", "concurrency_limit", "catchup_window_seconds", "catchup_max", "catchup_order", "starting_deadline_seconds", "jitter_seconds", "dst_gap", "dst_fold", "sla", "history_max_age_seconds", "env_secret", "limits", "params", "calendar", "on_blackout", "window")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class WorkerLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class EnvSecretEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    HANDLER_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    HISTORY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    WORKER_LABELS_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_MAX_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_ORDER_FIELD_NUMBER: _ClassVar[int]
    STARTING_DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    JITTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DST_GAP_FIELD_NUMBER: _ClassVar[int]
    DST_FOLD_FIELD_NUMBER: _ClassVar[int]
    SLA_FIELD_NUMBER: _ClassVar[int]
    HISTORY_MAX_AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ENV_SECRET_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    ON_BLACKOUT_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    name: str
    team: str
    schedule: str
    timezone: str
    handler: Handler
    description: str
    labels: _containers.ScalarMap[str, str]
    retry: RetryPolicy
    timeout_seconds: float
    overlap: str
    catchup: str
    priority: int
    pool: str
    paused: bool
    history_limit: int
    delivery: str
    worker_labels: _containers.ScalarMap[str, str]
    max_active: int
    queue_limit: int
    concurrency_key: str
    concurrency_limit: int
    catchup_window_seconds: float
    catchup_max: int
    catchup_order: str
    starting_deadline_seconds: float
    jitter_seconds: float
    dst_gap: str
    dst_fold: str
    sla: SlaSpec
    history_max_age_seconds: float
    env_secret: _containers.ScalarMap[str, str]
    limits: ResourceLimits
    params: _containers.ScalarMap[str, str]
    calendar: JobCalendar
    on_blackout: str
    window: JobWindow
    def __init__(self, name: _Optional[str] = ..., team: _Optional[str] = ..., schedule: _Optional[str] = ..., timezone: _Optional[str] = ..., handler: _Optional[_Union[Handler, _Mapping]] = ..., description: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., timeout_seconds: _Optional[float] = ..., overlap: _Optional[str] = ..., catchup: _Optional[str] = ..., priority: _Optional[int] = ..., pool: _Optional[str] = ..., paused: _Optional[bool] = ..., history_limit: _Optional[int] = ..., delivery: _Optional[str] = ..., worker_labels: _Optional[_Mapping[str, str]] = ..., max_active: _Optional[int] = ..., queue_limit: _Optional[int] = ..., concurrency_key: _Optional[str] = ..., concurrency_limit: _Optional[int] = ..., catchup_window_seconds: _Optional[float] = ..., catchup_max: _Optional[int] = ..., catchup_order: _Optional[str] = ..., starting_deadline_seconds: _Optional[float] = ..., jitter_seconds: _Optional[float] = ..., dst_gap: _Optional[str] = ..., dst_fold: _Optional[str] = ..., sla: _Optional[_Union[SlaSpec, _Mapping]] = ..., history_max_age_seconds: _Optional[float] = ..., env_secret: _Optional[_Mapping[str, str]] = ..., limits: _Optional[_Union[ResourceLimits, _Mapping]] = ..., params: _Optional[_Mapping[str, str]] = ..., calendar: _Optional[_Union[JobCalendar, _Mapping]] = ..., on_blackout: _Optional[str] = ..., window: _Optional[_Union[JobWindow, _Mapping]] = ...) -> None: ...

class JobWindow(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: str
    end: str
    def __init__(self, start: _Optional[str] = ..., end: _Optional[str] = ...) -> None: ...

class JobCalendar(_message.Message):
    __slots__ = ("skip", "only", "on_skip")
    SKIP_FIELD_NUMBER: _ClassVar[int]
    ONLY_FIELD_NUMBER: _ClassVar[int]
    ON_SKIP_FIELD_NUMBER: _ClassVar[int]
    skip: _containers.RepeatedScalarFieldContainer[str]
    only: _containers.RepeatedScalarFieldContainer[str]
    on_skip: str
    def __init__(self, skip: _Optional[_Iterable[str]] = ..., only: _Optional[_Iterable[str]] = ..., on_skip: _Optional[str] = ...) -> None: ...

class ResourceLimits(_message.Message):
    __slots__ = ("memory_mb", "cpu_seconds", "open_files", "processes")
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OPEN_FILES_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    memory_mb: int
    cpu_seconds: float
    open_files: int
    processes: int
    def __init__(self, memory_mb: _Optional[int] = ..., cpu_seconds: _Optional[float] = ..., open_files: _Optional[int] = ..., processes: _Optional[int] = ...) -> None: ...

class SlaSpec(_message.Message):
    __slots__ = ("within_seconds", "by", "timezone", "webhook")
    WITHIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    within_seconds: float
    by: str
    timezone: str
    webhook: str
    def __init__(self, within_seconds: _Optional[float] = ..., by: _Optional[str] = ..., timezone: _Optional[str] = ..., webhook: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("spec", "version", "paused", "next_fire_ms", "upcoming_ms", "created_ms", "updated_ms", "created_by", "last_scheduled_ms", "last_execution_id", "last_state", "executions_total", "summary", "upcoming_fires", "effective_dst_gap", "effective_dst_fold", "last_run_ms", "schedule_words", "recent")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    UPCOMING_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    LAST_SCHEDULED_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_STATE_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    UPCOMING_FIRES_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_DST_GAP_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_DST_FOLD_FIELD_NUMBER: _ClassVar[int]
    LAST_RUN_MS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_WORDS_FIELD_NUMBER: _ClassVar[int]
    RECENT_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    version: int
    paused: bool
    next_fire_ms: int
    upcoming_ms: _containers.RepeatedScalarFieldContainer[int]
    created_ms: int
    updated_ms: int
    created_by: str
    last_scheduled_ms: int
    last_execution_id: str
    last_state: str
    executions_total: int
    summary: bool
    upcoming_fires: _containers.RepeatedCompositeFieldContainer[UpcomingFire]
    effective_dst_gap: str
    effective_dst_fold: str
    last_run_ms: int
    schedule_words: str
    recent: _containers.RepeatedCompositeFieldContainer[RunOutcome]
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ..., version: _Optional[int] = ..., paused: _Optional[bool] = ..., next_fire_ms: _Optional[int] = ..., upcoming_ms: _Optional[_Iterable[int]] = ..., created_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ..., created_by: _Optional[str] = ..., last_scheduled_ms: _Optional[int] = ..., last_execution_id: _Optional[str] = ..., last_state: _Optional[str] = ..., executions_total: _Optional[int] = ..., summary: _Optional[bool] = ..., upcoming_fires: _Optional[_Iterable[_Union[UpcomingFire, _Mapping]]] = ..., effective_dst_gap: _Optional[str] = ..., effective_dst_fold: _Optional[str] = ..., last_run_ms: _Optional[int] = ..., schedule_words: _Optional[str] = ..., recent: _Optional[_Iterable[_Union[RunOutcome, _Mapping]]] = ...) -> None: ...

class UpcomingFire(_message.Message):
    __slots__ = ("local", "zone_abbreviation", "dst_note", "calendar_note", "window_note", "placed_ms")
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    ZONE_ABBREVIATION_FIELD_NUMBER: _ClassVar[int]
    DST_NOTE_FIELD_NUMBER: _ClassVar[int]
    CALENDAR_NOTE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_NOTE_FIELD_NUMBER: _ClassVar[int]
    PLACED_MS_FIELD_NUMBER: _ClassVar[int]
    local: str
    zone_abbreviation: str
    dst_note: str
    calendar_note: str
    window_note: str
    placed_ms: int
    def __init__(self, local: _Optional[str] = ..., zone_abbreviation: _Optional[str] = ..., dst_note: _Optional[str] = ..., calendar_note: _Optional[str] = ..., window_note: _Optional[str] = ..., placed_ms: _Optional[int] = ...) -> None: ...

class PutJobRequest(_message.Message):
    __slots__ = ("job", "create_only", "request_id", "expected_version")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CREATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    job: JobSpec
    create_only: bool
    request_id: str
    expected_version: int
    def __init__(self, job: _Optional[_Union[JobSpec, _Mapping]] = ..., create_only: _Optional[bool] = ..., request_id: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class PutJobResponse(_message.Message):
    __slots__ = ("job", "created", "version", "warnings")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    job: Job
    created: bool
    version: int
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., created: _Optional[bool] = ..., version: _Optional[int] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class PutJobsRequest(_message.Message):
    __slots__ = ("jobs", "request_id", "create_only")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobSpec]
    request_id: str
    create_only: bool
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobSpec, _Mapping]]] = ..., request_id: _Optional[str] = ..., create_only: _Optional[bool] = ...) -> None: ...

class PutJobsResponse(_message.Message):
    __slots__ = ("created", "updated", "warnings")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    created: int
    updated: int
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, created: _Optional[int] = ..., updated: _Optional[int] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("name", "upcoming")
    NAME_FIELD_NUMBER: _ClassVar[int]
    UPCOMING_FIELD_NUMBER: _ClassVar[int]
    name: str
    upcoming: int
    def __init__(self, name: _Optional[str] = ..., upcoming: _Optional[int] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("team", "state", "page_size", "page_token", "full", "name_contains", "pool", "recent", "batch")
    TEAM_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    NAME_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    RECENT_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    team: str
    state: str
    page_size: int
    page_token: str
    full: bool
    name_contains: str
    pool: str
    recent: int
    batch: bool
    def __init__(self, team: _Optional[str] = ..., state: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., full: _Optional[bool] = ..., name_contains: _Optional[str] = ..., pool: _Optional[str] = ..., recent: _Optional[int] = ..., batch: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token", "total")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    total: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class JobRef(_message.Message):
    __slots__ = ("name", "request_id", "catch_up")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    catch_up: bool
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ..., catch_up: _Optional[bool] = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("number", "worker", "fencing_token", "started_ms", "ended_ms", "exit_code", "http_status", "error", "output_tail", "state", "rejected")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_MS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    number: int
    worker: str
    fencing_token: int
    started_ms: int
    ended_ms: int
    exit_code: int
    http_status: int
    error: str
    output_tail: str
    state: str
    rejected: str
    def __init__(self, number: _Optional[int] = ..., worker: _Optional[str] = ..., fencing_token: _Optional[int] = ..., started_ms: _Optional[int] = ..., ended_ms: _Optional[int] = ..., exit_code: _Optional[int] = ..., http_status: _Optional[int] = ..., error: _Optional[str] = ..., output_tail: _Optional[str] = ..., state: _Optional[str] = ..., rejected: _Optional[str] = ...) -> None: ...

class Execution(_message.Message):
    __slots__ = ("id", "job", "scheduled_ms", "state", "trigger", "created_ms", "term", "reason", "attempts", "updated_ms", "log_index", "retry_at_ms", "cancel_requested", "due_ms", "events", "lane", "params")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    RETRY_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    DUE_MS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    id: str
    job: str
    scheduled_ms: int
    state: str
    trigger: str
    created_ms: int
    term: int
    reason: str
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    updated_ms: int
    log_index: int
    retry_at_ms: int
    cancel_requested: bool
    due_ms: int
    events: _containers.RepeatedCompositeFieldContainer[ExecutionEvent]
    lane: str
    params: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., job: _Optional[str] = ..., scheduled_ms: _Optional[int] = ..., state: _Optional[str] = ..., trigger: _Optional[str] = ..., created_ms: _Optional[int] = ..., term: _Optional[int] = ..., reason: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., updated_ms: _Optional[int] = ..., log_index: _Optional[int] = ..., retry_at_ms: _Optional[int] = ..., cancel_requested: _Optional[bool] = ..., due_ms: _Optional[int] = ..., events: _Optional[_Iterable[_Union[ExecutionEvent, _Mapping]]] = ..., lane: _Optional[str] = ..., params: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ExecutionEvent(_message.Message):
    __slots__ = ("time_ms", "kind", "message")
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    time_ms: int
    kind: str
    message: str
    def __init__(self, time_ms: _Optional[int] = ..., kind: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ListExecutionsRequest(_message.Message):
    __slots__ = ("job", "state", "page_size", "page_token", "oldest_first", "batch")
    JOB_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OLDEST_FIRST_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    job: str
    state: str
    page_size: int
    page_token: str
    oldest_first: bool
    batch: bool
    def __init__(self, job: _Optional[str] = ..., state: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., oldest_first: _Optional[bool] = ..., batch: _Optional[bool] = ...) -> None: ...

class ListExecutionsResponse(_message.Message):
    __slots__ = ("executions", "next_page_token", "total", "note")
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    executions: _containers.RepeatedCompositeFieldContainer[Execution]
    next_page_token: str
    total: int
    note: str
    def __init__(self, executions: _Optional[_Iterable[_Union[Execution, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ..., note: _Optional[str] = ...) -> None: ...

class GetExecutionRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class TriggerJobRequest(_message.Message):
    __slots__ = ("name", "request_id", "force", "params")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    force: bool
    params: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ..., force: _Optional[bool] = ..., params: _Optional[_Mapping[str, str]] = ...) -> None: ...

class BackfillRequest(_message.Message):
    __slots__ = ("name", "from_ms", "to_ms", "request_id", "dry_run")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    name: str
    from_ms: int
    to_ms: int
    request_id: str
    dry_run: bool
    def __init__(self, name: _Optional[str] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ..., request_id: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class BackfillResponse(_message.Message):
    __slots__ = ("instants", "created", "duplicates", "first_ms", "last_ms")
    INSTANTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    FIRST_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_MS_FIELD_NUMBER: _ClassVar[int]
    instants: int
    created: int
    duplicates: int
    first_ms: int
    last_ms: int
    def __init__(self, instants: _Optional[int] = ..., created: _Optional[int] = ..., duplicates: _Optional[int] = ..., first_ms: _Optional[int] = ..., last_ms: _Optional[int] = ...) -> None: ...

class ListInstantsRequest(_message.Message):
    __slots__ = ("job", "from_ms", "to_ms", "limit", "page_token")
    JOB_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job: str
    from_ms: int
    to_ms: int
    limit: int
    page_token: str
    def __init__(self, job: _Optional[str] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class InstantRecord(_message.Message):
    __slots__ = ("instant_ms", "disposition", "detail", "execution")
    INSTANT_MS_FIELD_NUMBER: _ClassVar[int]
    DISPOSITION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    instant_ms: int
    disposition: str
    detail: str
    execution: Execution
    def __init__(self, instant_ms: _Optional[int] = ..., disposition: _Optional[str] = ..., detail: _Optional[str] = ..., execution: _Optional[_Union[Execution, _Mapping]] = ...) -> None: ...

class ListInstantsResponse(_message.Message):
    __slots__ = ("instants", "next_page_token")
    INSTANTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    instants: _containers.RepeatedCompositeFieldContainer[InstantRecord]
    next_page_token: str
    def __init__(self, instants: _Optional[_Iterable[_Union[InstantRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Quota(_message.Message):
    __slots__ = ("key", "limit", "running")
    KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    key: str
    limit: int
    running: int
    def __init__(self, key: _Optional[str] = ..., limit: _Optional[int] = ..., running: _Optional[int] = ...) -> None: ...

class SetQuotaRequest(_message.Message):
    __slots__ = ("key", "limit", "request_id", "share", "unset")
    KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    UNSET_FIELD_NUMBER: _ClassVar[int]
    key: str
    limit: int
    request_id: str
    share: bool
    unset: bool
    def __init__(self, key: _Optional[str] = ..., limit: _Optional[int] = ..., request_id: _Optional[str] = ..., share: _Optional[bool] = ..., unset: _Optional[bool] = ...) -> None: ...

class ListQuotasRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListQuotasResponse(_message.Message):
    __slots__ = ("quotas",)
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    quotas: _containers.RepeatedCompositeFieldContainer[Quota]
    def __init__(self, quotas: _Optional[_Iterable[_Union[Quota, _Mapping]]] = ...) -> None: ...

class CancelExecutionRequest(_message.Message):
    __slots__ = ("id", "request_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    request_id: str
    def __init__(self, id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class WorkerHello(_message.Message):
    __slots__ = ("name", "slots", "pool", "labels", "running_tokens", "version", "max_term_seen", "incarnation", "batches", "ahead", "counts_reads", "handlers", "serves_logs", "total_slots")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_TERM_SEEN_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    AHEAD_FIELD_NUMBER: _ClassVar[int]
    COUNTS_READS_FIELD_NUMBER: _ClassVar[int]
    HANDLERS_FIELD_NUMBER: _ClassVar[int]
    SERVES_LOGS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SLOTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    slots: int
    pool: str
    labels: _containers.ScalarMap[str, str]
    running_tokens: _containers.RepeatedScalarFieldContainer[int]
    version: str
    max_term_seen: int
    incarnation: str
    batches: bool
    ahead: int
    counts_reads: bool
    handlers: _containers.RepeatedScalarFieldContainer[str]
    serves_logs: bool
    total_slots: int
    def __init__(self, name: _Optional[str] = ..., slots: _Optional[int] = ..., pool: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., running_tokens: _Optional[_Iterable[int]] = ..., version: _Optional[str] = ..., max_term_seen: _Optional[int] = ..., incarnation: _Optional[str] = ..., batches: _Optional[bool] = ..., ahead: _Optional[int] = ..., counts_reads: _Optional[bool] = ..., handlers: _Optional[_Iterable[str]] = ..., serves_logs: _Optional[bool] = ..., total_slots: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("running_tokens", "draining", "messages_read")
    RUNNING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_READ_FIELD_NUMBER: _ClassVar[int]
    running_tokens: _containers.RepeatedScalarFieldContainer[int]
    draining: bool
    messages_read: int
    def __init__(self, running_tokens: _Optional[_Iterable[int]] = ..., draining: _Optional[bool] = ..., messages_read: _Optional[int] = ...) -> None: ...

class AttemptResult(_message.Message):
    __slots__ = ("execution_id", "fencing_token", "state", "exit_code", "http_status", "error", "output_tail", "started_ms", "ended_ms")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_MS_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    fencing_token: int
    state: str
    exit_code: int
    http_status: int
    error: str
    output_tail: str
    started_ms: int
    ended_ms: int
    def __init__(self, execution_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., state: _Optional[str] = ..., exit_code: _Optional[int] = ..., http_status: _Optional[int] = ..., error: _Optional[str] = ..., output_tail: _Optional[str] = ..., started_ms: _Optional[int] = ..., ended_ms: _Optional[int] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ("hello", "heartbeat", "result", "batch", "log_page")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    LOG_PAGE_FIELD_NUMBER: _ClassVar[int]
    hello: WorkerHello
    heartbeat: Heartbeat
    result: AttemptResult
    batch: WorkerBatch
    log_page: _logs_pb2.LogPage
    def __init__(self, hello: _Optional[_Union[WorkerHello, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., result: _Optional[_Union[AttemptResult, _Mapping]] = ..., batch: _Optional[_Union[WorkerBatch, _Mapping]] = ..., log_page: _Optional[_Union[_logs_pb2.LogPage, _Mapping]] = ...) -> None: ...

class WorkerBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[WorkerMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[WorkerMessage, _Mapping]]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("leader_id", "term", "lease_ms", "batches", "members", "shards", "shard")
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    leader_id: str
    term: int
    lease_ms: int
    batches: bool
    members: _containers.RepeatedScalarFieldContainer[str]
    shards: int
    shard: int
    def __init__(self, leader_id: _Optional[str] = ..., term: _Optional[int] = ..., lease_ms: _Optional[int] = ..., batches: _Optional[bool] = ..., members: _Optional[_Iterable[str]] = ..., shards: _Optional[int] = ..., shard: _Optional[int] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("execution_id", "job", "scheduled_ms", "attempt", "fencing_token", "term", "due_ms", "handler_json", "timeout_seconds", "labels", "team", "secret_env", "limits", "params")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SecretEnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    DUE_MS_FIELD_NUMBER: _ClassVar[int]
    HANDLER_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    SECRET_ENV_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    job: str
    scheduled_ms: int
    attempt: int
    fencing_token: int
    term: int
    due_ms: int
    handler_json: str
    timeout_seconds: float
    labels: _containers.ScalarMap[str, str]
    team: str
    secret_env: _containers.ScalarMap[str, str]
    limits: ResourceLimits
    params: _containers.ScalarMap[str, str]
    def __init__(self, execution_id: _Optional[str] = ..., job: _Optional[str] = ..., scheduled_ms: _Optional[int] = ..., attempt: _Optional[int] = ..., fencing_token: _Optional[int] = ..., term: _Optional[int] = ..., due_ms: _Optional[int] = ..., handler_json: _Optional[str] = ..., timeout_seconds: _Optional[float] = ..., labels: _Optional[_Mapping[str, str]] = ..., team: _Optional[str] = ..., secret_env: _Optional[_Mapping[str, str]] = ..., limits: _Optional[_Union[ResourceLimits, _Mapping]] = ..., params: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CancelAttempt(_message.Message):
    __slots__ = ("execution_id", "fencing_token")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    fencing_token: int
    def __init__(self, execution_id: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class ResultAck(_message.Message):
    __slots__ = ("fencing_token", "outcome")
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    fencing_token: int
    outcome: str
    def __init__(self, fencing_token: _Optional[int] = ..., outcome: _Optional[str] = ...) -> None: ...

class LeaderMessage(_message.Message):
    __slots__ = ("welcome", "assignment", "cancel", "ack", "batch", "log_request")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    LOG_REQUEST_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    assignment: Assignment
    cancel: CancelAttempt
    ack: ResultAck
    batch: LeaderBatch
    log_request: _logs_pb2.LogRequest
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., assignment: _Optional[_Union[Assignment, _Mapping]] = ..., cancel: _Optional[_Union[CancelAttempt, _Mapping]] = ..., ack: _Optional[_Union[ResultAck, _Mapping]] = ..., batch: _Optional[_Union[LeaderBatch, _Mapping]] = ..., log_request: _Optional[_Union[_logs_pb2.LogRequest, _Mapping]] = ...) -> None: ...

class LeaderBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[LeaderMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[LeaderMessage, _Mapping]]] = ...) -> None: ...

class NodeWorkerMessage(_message.Message):
    __slots__ = ("stream", "shard", "message", "closed")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    stream: int
    shard: int
    message: WorkerMessage
    closed: SubStreamClosed
    def __init__(self, stream: _Optional[int] = ..., shard: _Optional[int] = ..., message: _Optional[_Union[WorkerMessage, _Mapping]] = ..., closed: _Optional[_Union[SubStreamClosed, _Mapping]] = ...) -> None: ...

class NodeLeaderMessage(_message.Message):
    __slots__ = ("stream", "shard", "message", "closed")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    stream: int
    shard: int
    message: LeaderMessage
    closed: SubStreamClosed
    def __init__(self, stream: _Optional[int] = ..., shard: _Optional[int] = ..., message: _Optional[_Union[LeaderMessage, _Mapping]] = ..., closed: _Optional[_Union[SubStreamClosed, _Mapping]] = ...) -> None: ...

class SubStreamClosed(_message.Message):
    __slots__ = ("code", "details")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: int
    details: str
    def __init__(self, code: _Optional[int] = ..., details: _Optional[str] = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("name", "slots", "pool", "labels", "running", "connected_ms", "last_heartbeat_ms", "draining", "peer", "handlers")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    HANDLERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    slots: int
    pool: str
    labels: _containers.ScalarMap[str, str]
    running: _containers.RepeatedScalarFieldContainer[str]
    connected_ms: int
    last_heartbeat_ms: int
    draining: bool
    peer: str
    handlers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., slots: _Optional[int] = ..., pool: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., running: _Optional[_Iterable[str]] = ..., connected_ms: _Optional[int] = ..., last_heartbeat_ms: _Optional[int] = ..., draining: _Optional[bool] = ..., peer: _Optional[str] = ..., handlers: _Optional[_Iterable[str]] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers",)
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ...) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("id", "raft_address", "grpc_address", "role", "term", "commit_index", "applied_index", "lag", "has_quorum", "state_hash", "uptime_seconds", "error", "leader_epoch", "state_digest", "digest_index", "at_digest", "replicas", "writable", "not_writable_reason", "version", "protocol", "entry_codec", "max_feature_level", "feature_level", "snapshot_formats", "snapshot_format", "tzdata", "croniter", "halted", "members", "membership_source", "membership_change", "config_disagreement", "learners", "dispatch_backlog", "dispatch_lag_ms", "accepts_pings_ms", "leader_grpc_address", "history_digest", "history_index", "history_rows", "history_gap", "unserved_pools", "leader_terms", "shards", "shard")
    ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    HAS_QUORUM_FIELD_NUMBER: _ClassVar[int]
    STATE_HASH_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DIGEST_INDEX_FIELD_NUMBER: _ClassVar[int]
    AT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    NOT_WRITABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    ENTRY_CODEC_FIELD_NUMBER: _ClassVar[int]
    MAX_FEATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    FEATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FORMATS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TZDATA_FIELD_NUMBER: _ClassVar[int]
    CRONITER_FIELD_NUMBER: _ClassVar[int]
    HALTED_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_SOURCE_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_CHANGE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_DISAGREEMENT_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_BACKLOG_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_PINGS_MS_FIELD_NUMBER: _ClassVar[int]
    LEADER_GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    HISTORY_INDEX_FIELD_NUMBER: _ClassVar[int]
    HISTORY_ROWS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_GAP_FIELD_NUMBER: _ClassVar[int]
    UNSERVED_POOLS_FIELD_NUMBER: _ClassVar[int]
    LEADER_TERMS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    id: str
    raft_address: str
    grpc_address: str
    role: str
    term: int
    commit_index: int
    applied_index: int
    lag: int
    has_quorum: bool
    state_hash: str
    uptime_seconds: int
    error: str
    leader_epoch: int
    state_digest: str
    digest_index: int
    at_digest: str
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaProgress]
    writable: bool
    not_writable_reason: str
    version: str
    protocol: int
    entry_codec: int
    max_feature_level: int
    feature_level: int
    snapshot_formats: _containers.RepeatedScalarFieldContainer[int]
    snapshot_format: int
    tzdata: str
    croniter: str
    halted: str
    members: _containers.RepeatedCompositeFieldContainer[MemberInfo]
    membership_source: str
    membership_change: str
    config_disagreement: str
    learners: int
    dispatch_backlog: int
    dispatch_lag_ms: int
    accepts_pings_ms: int
    leader_grpc_address: str
    history_digest: str
    history_index: int
    history_rows: int
    history_gap: str
    unserved_pools: _containers.RepeatedCompositeFieldContainer[UnservedPool]
    leader_terms: _containers.RepeatedCompositeFieldContainer[LeaderTerm]
    shards: int
    shard: int
    def __init__(self, id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., lag: _Optional[int] = ..., has_quorum: _Optional[bool] = ..., state_hash: _Optional[str] = ..., uptime_seconds: _Optional[int] = ..., error: _Optional[str] = ..., leader_epoch: _Optional[int] = ..., state_digest: _Optional[str] = ..., digest_index: _Optional[int] = ..., at_digest: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[ReplicaProgress, _Mapping]]] = ..., writable: _Optional[bool] = ..., not_writable_reason: _Optional[str] = ..., version: _Optional[str] = ..., protocol: _Optional[int] = ..., entry_codec: _Optional[int] = ..., max_feature_level: _Optional[int] = ..., feature_level: _Optional[int] = ..., snapshot_formats: _Optional[_Iterable[int]] = ..., snapshot_format: _Optional[int] = ..., tzdata: _Optional[str] = ..., croniter: _Optional[str] = ..., halted: _Optional[str] = ..., members: _Optional[_Iterable[_Union[MemberInfo, _Mapping]]] = ..., membership_source: _Optional[str] = ..., membership_change: _Optional[str] = ..., config_disagreement: _Optional[str] = ..., learners: _Optional[int] = ..., dispatch_backlog: _Optional[int] = ..., dispatch_lag_ms: _Optional[int] = ..., accepts_pings_ms: _Optional[int] = ..., leader_grpc_address: _Optional[str] = ..., history_digest: _Optional[str] = ..., history_index: _Optional[int] = ..., history_rows: _Optional[int] = ..., history_gap: _Optional[str] = ..., unserved_pools: _Optional[_Iterable[_Union[UnservedPool, _Mapping]]] = ..., leader_terms: _Optional[_Iterable[_Union[LeaderTerm, _Mapping]]] = ..., shards: _Optional[int] = ..., shard: _Optional[int] = ...) -> None: ...

class MemberInfo(_message.Message):
    __slots__ = ("id", "raft_address", "grpc_address", "voter")
    ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    id: str
    raft_address: str
    grpc_address: str
    voter: bool
    def __init__(self, id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., voter: _Optional[bool] = ...) -> None: ...

class ReplicaProgress(_message.Message):
    __slots__ = ("peer", "peer_id", "match_index", "last_index", "lag", "stuck", "progress_ms")
    PEER_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    STUCK_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_MS_FIELD_NUMBER: _ClassVar[int]
    peer: str
    peer_id: str
    match_index: int
    last_index: int
    lag: int
    stuck: bool
    progress_ms: int
    def __init__(self, peer: _Optional[str] = ..., peer_id: _Optional[str] = ..., match_index: _Optional[int] = ..., last_index: _Optional[int] = ..., lag: _Optional[int] = ..., stuck: _Optional[bool] = ..., progress_ms: _Optional[int] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ("with_digest",)
    WITH_DIGEST_FIELD_NUMBER: _ClassVar[int]
    with_digest: bool
    def __init__(self, with_digest: _Optional[bool] = ...) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("leader_id", "leader_grpc_address", "term", "commit_index", "nodes", "jobs", "executions", "answered_by", "warnings", "feature_level", "supported_feature_level", "members", "membership_change", "last_membership_change")
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    FEATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_FEATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_CHANGE_FIELD_NUMBER: _ClassVar[int]
    LAST_MEMBERSHIP_CHANGE_FIELD_NUMBER: _ClassVar[int]
    leader_id: str
    leader_grpc_address: str
    term: int
    commit_index: int
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    jobs: int
    executions: int
    answered_by: str
    warnings: _containers.RepeatedScalarFieldContainer[str]
    feature_level: int
    supported_feature_level: int
    members: _containers.RepeatedCompositeFieldContainer[MemberInfo]
    membership_change: str
    last_membership_change: str
    def __init__(self, leader_id: _Optional[str] = ..., leader_grpc_address: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ..., jobs: _Optional[int] = ..., executions: _Optional[int] = ..., answered_by: _Optional[str] = ..., warnings: _Optional[_Iterable[str]] = ..., feature_level: _Optional[int] = ..., supported_feature_level: _Optional[int] = ..., members: _Optional[_Iterable[_Union[MemberInfo, _Mapping]]] = ..., membership_change: _Optional[str] = ..., last_membership_change: _Optional[str] = ...) -> None: ...

class NodeInfoRequest(_message.Message):
    __slots__ = ("with_digest", "digest_at")
    WITH_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DIGEST_AT_FIELD_NUMBER: _ClassVar[int]
    with_digest: bool
    digest_at: int
    def __init__(self, with_digest: _Optional[bool] = ..., digest_at: _Optional[int] = ...) -> None: ...

class ListShardsRequest(_message.Message):
    __slots__ = ("shard", "quota_keys")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    QUOTA_KEYS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    quota_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, shard: _Optional[int] = ..., quota_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class QuotaUse(_message.Message):
    __slots__ = ("key", "has_share", "share", "version", "running", "waiting")
    KEY_FIELD_NUMBER: _ClassVar[int]
    HAS_SHARE_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    key: str
    has_share: bool
    share: int
    version: int
    running: int
    waiting: int
    def __init__(self, key: _Optional[str] = ..., has_share: _Optional[bool] = ..., share: _Optional[int] = ..., version: _Optional[int] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ...) -> None: ...

class ShardStatus(_message.Message):
    __slots__ = ("shard", "leader_id", "leader_grpc_address", "replicas", "term", "jobs", "lag", "commit_index", "applied_index", "raft_address", "executions", "answered_by", "quota_uses")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    QUOTA_USES_FIELD_NUMBER: _ClassVar[int]
    shard: int
    leader_id: str
    leader_grpc_address: str
    replicas: _containers.RepeatedScalarFieldContainer[str]
    term: int
    jobs: int
    lag: int
    commit_index: int
    applied_index: int
    raft_address: str
    executions: int
    answered_by: str
    quota_uses: _containers.RepeatedCompositeFieldContainer[QuotaUse]
    def __init__(self, shard: _Optional[int] = ..., leader_id: _Optional[str] = ..., leader_grpc_address: _Optional[str] = ..., replicas: _Optional[_Iterable[str]] = ..., term: _Optional[int] = ..., jobs: _Optional[int] = ..., lag: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., raft_address: _Optional[str] = ..., executions: _Optional[int] = ..., answered_by: _Optional[str] = ..., quota_uses: _Optional[_Iterable[_Union[QuotaUse, _Mapping]]] = ...) -> None: ...

class ListShardsResponse(_message.Message):
    __slots__ = ("shards", "items", "answered_by", "map_version")
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    MAP_VERSION_FIELD_NUMBER: _ClassVar[int]
    shards: int
    items: _containers.RepeatedCompositeFieldContainer[ShardStatus]
    answered_by: str
    map_version: int
    def __init__(self, shards: _Optional[int] = ..., items: _Optional[_Iterable[_Union[ShardStatus, _Mapping]]] = ..., answered_by: _Optional[str] = ..., map_version: _Optional[int] = ...) -> None: ...

class MoveShardRequest(_message.Message):
    __slots__ = ("shard", "from_node", "to_node")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    TO_NODE_FIELD_NUMBER: _ClassVar[int]
    shard: int
    from_node: str
    to_node: str
    def __init__(self, shard: _Optional[int] = ..., from_node: _Optional[str] = ..., to_node: _Optional[str] = ...) -> None: ...

class MoveShardResponse(_message.Message):
    __slots__ = ("steps", "seconds", "map_version", "replicas")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAP_VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedScalarFieldContainer[str]
    seconds: float
    map_version: int
    replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, steps: _Optional[_Iterable[str]] = ..., seconds: _Optional[float] = ..., map_version: _Optional[int] = ..., replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class RetryExecutionRequest(_message.Message):
    __slots__ = ("id", "request_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    request_id: str
    def __init__(self, id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class WatchEvent(_message.Message):
    __slots__ = ("type", "key", "job", "execution", "worker", "events")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    type: str
    key: str
    job: Job
    execution: Execution
    worker: WorkerInfo
    events: _containers.RepeatedCompositeFieldContainer[WatchEvent]
    def __init__(self, type: _Optional[str] = ..., key: _Optional[str] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., execution: _Optional[_Union[Execution, _Mapping]] = ..., worker: _Optional[_Union[WorkerInfo, _Mapping]] = ..., events: _Optional[_Iterable[_Union[WatchEvent, _Mapping]]] = ...) -> None: ...

class DiffJobsRequest(_message.Message):
    __slots__ = ("jobs", "actions_only")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_ONLY_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobSpec]
    actions_only: bool
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobSpec, _Mapping]]] = ..., actions_only: _Optional[bool] = ...) -> None: ...

class JobChange(_message.Message):
    __slots__ = ("name", "action", "version", "current", "proposed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_FIELD_NUMBER: _ClassVar[int]
    name: str
    action: str
    version: int
    current: JobSpec
    proposed: JobSpec
    def __init__(self, name: _Optional[str] = ..., action: _Optional[str] = ..., version: _Optional[int] = ..., current: _Optional[_Union[JobSpec, _Mapping]] = ..., proposed: _Optional[_Union[JobSpec, _Mapping]] = ...) -> None: ...

class DiffJobsResponse(_message.Message):
    __slots__ = ("changes",)
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[JobChange]
    def __init__(self, changes: _Optional[_Iterable[_Union[JobChange, _Mapping]]] = ...) -> None: ...

class UnservedPool(_message.Message):
    __slots__ = ("pool", "runs")
    POOL_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    pool: str
    runs: int
    def __init__(self, pool: _Optional[str] = ..., runs: _Optional[int] = ...) -> None: ...

class RunOutcome(_message.Message):
    __slots__ = ("execution_id", "scheduled_ms", "state")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    scheduled_ms: int
    state: str
    def __init__(self, execution_id: _Optional[str] = ..., scheduled_ms: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...

class LeaderTerm(_message.Message):
    __slots__ = ("term", "since_ms", "until_ms")
    TERM_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    term: int
    since_ms: int
    until_ms: int
    def __init__(self, term: _Optional[int] = ..., since_ms: _Optional[int] = ..., until_ms: _Optional[int] = ...) -> None: ...

class ForecastRequest(_message.Message):
    __slots__ = ("from_ms", "to_ms", "by", "top")
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    from_ms: int
    to_ms: int
    by: str
    top: int
    def __init__(self, from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ..., by: _Optional[str] = ..., top: _Optional[int] = ...) -> None: ...

class ForecastContributor(_message.Message):
    __slots__ = ("schedule", "timezone", "jobs", "examples")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    schedule: str
    timezone: str
    jobs: int
    examples: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, schedule: _Optional[str] = ..., timezone: _Optional[str] = ..., jobs: _Optional[int] = ..., examples: _Optional[_Iterable[str]] = ...) -> None: ...

class ForecastPeak(_message.Message):
    __slots__ = ("at_ms", "width_ms", "due", "over", "contributors")
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    WIDTH_MS_FIELD_NUMBER: _ClassVar[int]
    DUE_FIELD_NUMBER: _ClassVar[int]
    OVER_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTORS_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    width_ms: int
    due: int
    over: bool
    contributors: _containers.RepeatedCompositeFieldContainer[ForecastContributor]
    def __init__(self, at_ms: _Optional[int] = ..., width_ms: _Optional[int] = ..., due: _Optional[int] = ..., over: _Optional[bool] = ..., contributors: _Optional[_Iterable[_Union[ForecastContributor, _Mapping]]] = ...) -> None: ...

class ForecastGroup(_message.Message):
    __slots__ = ("key", "jobs", "instants", "slots", "quota_key", "quota", "peak_seconds", "peak_minutes", "skipped", "moved", "deferred")
    KEY_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    INSTANTS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_KEY_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    PEAK_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PEAK_MINUTES_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_FIELD_NUMBER: _ClassVar[int]
    key: str
    jobs: int
    instants: int
    slots: int
    quota_key: str
    quota: int
    peak_seconds: _containers.RepeatedCompositeFieldContainer[ForecastPeak]
    peak_minutes: _containers.RepeatedCompositeFieldContainer[ForecastPeak]
    skipped: int
    moved: int
    deferred: int
    def __init__(self, key: _Optional[str] = ..., jobs: _Optional[int] = ..., instants: _Optional[int] = ..., slots: _Optional[int] = ..., quota_key: _Optional[str] = ..., quota: _Optional[int] = ..., peak_seconds: _Optional[_Iterable[_Union[ForecastPeak, _Mapping]]] = ..., peak_minutes: _Optional[_Iterable[_Union[ForecastPeak, _Mapping]]] = ..., skipped: _Optional[int] = ..., moved: _Optional[int] = ..., deferred: _Optional[int] = ...) -> None: ...

class ForecastResponse(_message.Message):
    __slots__ = ("from_ms", "to_ms", "by", "jobs", "instants", "groups", "note", "skipped", "moved", "deferred")
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    INSTANTS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_FIELD_NUMBER: _ClassVar[int]
    from_ms: int
    to_ms: int
    by: str
    jobs: int
    instants: int
    groups: _containers.RepeatedCompositeFieldContainer[ForecastGroup]
    note: str
    skipped: int
    moved: int
    deferred: int
    def __init__(self, from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ..., by: _Optional[str] = ..., jobs: _Optional[int] = ..., instants: _Optional[int] = ..., groups: _Optional[_Iterable[_Union[ForecastGroup, _Mapping]]] = ..., note: _Optional[str] = ..., skipped: _Optional[int] = ..., moved: _Optional[int] = ..., deferred: _Optional[int] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("id", "job", "at_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    job: str
    at_ms: int
    def __init__(self, id: _Optional[str] = ..., job: _Optional[str] = ..., at_ms: _Optional[int] = ...) -> None: ...

class ExplainFinding(_message.Message):
    __slots__ = ("kind", "text", "at_ms", "details")
    class DetailsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    text: str
    at_ms: int
    details: _containers.ScalarMap[str, str]
    def __init__(self, kind: _Optional[str] = ..., text: _Optional[str] = ..., at_ms: _Optional[int] = ..., details: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Explanation(_message.Message):
    __slots__ = ("id", "job", "instant_ms", "disposition", "summary", "findings", "index")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    INSTANT_MS_FIELD_NUMBER: _ClassVar[int]
    DISPOSITION_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    FINDINGS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    job: str
    instant_ms: int
    disposition: str
    summary: str
    findings: _containers.RepeatedCompositeFieldContainer[ExplainFinding]
    index: int
    def __init__(self, id: _Optional[str] = ..., job: _Optional[str] = ..., instant_ms: _Optional[int] = ..., disposition: _Optional[str] = ..., summary: _Optional[str] = ..., findings: _Optional[_Iterable[_Union[ExplainFinding, _Mapping]]] = ..., index: _Optional[int] = ...) -> None: ...
