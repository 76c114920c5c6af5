from schedd_proto import scheduler_pb2 as _scheduler_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SensorSpec(_message.Message):
    __slots__ = ("file", "http_url", "command", "poll_interval_seconds", "timeout_seconds")
    FILE_FIELD_NUMBER: _ClassVar[int]
    HTTP_URL_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    POLL_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    file: str
    http_url: str
    command: str
    poll_interval_seconds: float
    timeout_seconds: float
    def __init__(self, file: _Optional[str] = ..., http_url: _Optional[str] = ..., command: _Optional[str] = ..., poll_interval_seconds: _Optional[float] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class DagTask(_message.Message):
    __slots__ = ("name", "handler", "sensor", "upstream", "trigger_rule", "retry", "timeout_seconds", "pool", "worker_labels", "description")
    class WorkerLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    HANDLER_FIELD_NUMBER: _ClassVar[int]
    SENSOR_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_RULE_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    WORKER_LABELS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    handler: _scheduler_pb2.Handler
    sensor: SensorSpec
    upstream: _containers.RepeatedScalarFieldContainer[str]
    trigger_rule: str
    retry: _scheduler_pb2.RetryPolicy
    timeout_seconds: float
    pool: str
    worker_labels: _containers.ScalarMap[str, str]
    description: str
    def __init__(self, name: _Optional[str] = ..., handler: _Optional[_Union[_scheduler_pb2.Handler, _Mapping]] = ..., sensor: _Optional[_Union[SensorSpec, _Mapping]] = ..., upstream: _Optional[_Iterable[str]] = ..., trigger_rule: _Optional[str] = ..., retry: _Optional[_Union[_scheduler_pb2.RetryPolicy, _Mapping]] = ..., timeout_seconds: _Optional[float] = ..., pool: _Optional[str] = ..., worker_labels: _Optional[_Mapping[str, str]] = ..., description: _Optional[str] = ...) -> None: ...

class DagSpec(_message.Message):
    __slots__ = ("name", "team", "schedule", "timezone", "description", "tasks", "max_runs", "sla")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNS_FIELD_NUMBER: _ClassVar[int]
    SLA_FIELD_NUMBER: _ClassVar[int]
    name: str
    team: str
    schedule: str
    timezone: str
    description: str
    tasks: _containers.RepeatedCompositeFieldContainer[DagTask]
    max_runs: int
    sla: _scheduler_pb2.SlaSpec
    def __init__(self, name: _Optional[str] = ..., team: _Optional[str] = ..., schedule: _Optional[str] = ..., timezone: _Optional[str] = ..., description: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[DagTask, _Mapping]]] = ..., max_runs: _Optional[int] = ..., sla: _Optional[_Union[_scheduler_pb2.SlaSpec, _Mapping]] = ...) -> None: ...

class Dag(_message.Message):
    __slots__ = ("spec", "version", "created_ms", "updated_ms", "created_by", "next_fire_ms", "last_run_id", "last_run_state", "runs_total")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_RUN_STATE_FIELD_NUMBER: _ClassVar[int]
    RUNS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    spec: DagSpec
    version: int
    created_ms: int
    updated_ms: int
    created_by: str
    next_fire_ms: int
    last_run_id: str
    last_run_state: str
    runs_total: int
    def __init__(self, spec: _Optional[_Union[DagSpec, _Mapping]] = ..., version: _Optional[int] = ..., created_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ..., created_by: _Optional[str] = ..., next_fire_ms: _Optional[int] = ..., last_run_id: _Optional[str] = ..., last_run_state: _Optional[str] = ..., runs_total: _Optional[int] = ...) -> None: ...

class PutDagRequest(_message.Message):
    __slots__ = ("dag", "request_id")
    DAG_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    dag: DagSpec
    request_id: str
    def __init__(self, dag: _Optional[_Union[DagSpec, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class PutDagResponse(_message.Message):
    __slots__ = ("dag", "created")
    DAG_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    dag: Dag
    created: bool
    def __init__(self, dag: _Optional[_Union[Dag, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetDagRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListDagsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListDagsResponse(_message.Message):
    __slots__ = ("dags",)
    DAGS_FIELD_NUMBER: _ClassVar[int]
    dags: _containers.RepeatedCompositeFieldContainer[Dag]
    def __init__(self, dags: _Optional[_Iterable[_Union[Dag, _Mapping]]] = ...) -> None: ...

class DagRef(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteDagResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RunDagRequest(_message.Message):
    __slots__ = ("name", "request_id", "params")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    params: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ..., params: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DagTaskRun(_message.Message):
    __slots__ = ("task", "state", "execution_id", "upstream", "trigger_rule", "attempts", "started_ms", "ended_ms", "reason", "pending_upstream", "sensor")
    TASK_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_RULE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PENDING_UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    SENSOR_FIELD_NUMBER: _ClassVar[int]
    task: str
    state: str
    execution_id: str
    upstream: _containers.RepeatedScalarFieldContainer[str]
    trigger_rule: str
    attempts: int
    started_ms: int
    ended_ms: int
    reason: str
    pending_upstream: int
    sensor: bool
    def __init__(self, task: _Optional[str] = ..., state: _Optional[str] = ..., execution_id: _Optional[str] = ..., upstream: _Optional[_Iterable[str]] = ..., trigger_rule: _Optional[str] = ..., attempts: _Optional[int] = ..., started_ms: _Optional[int] = ..., ended_ms: _Optional[int] = ..., reason: _Optional[str] = ..., pending_upstream: _Optional[int] = ..., sensor: _Optional[bool] = ...) -> None: ...

class DagRun(_message.Message):
    __slots__ = ("run_id", "dag", "logical_ms", "state", "trigger", "created_ms", "ended_ms", "tasks", "dag_version", "events", "sla_deadline_ms", "params")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DAG_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_MS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    DAG_VERSION_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    SLA_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    dag: str
    logical_ms: int
    state: str
    trigger: str
    created_ms: int
    ended_ms: int
    tasks: _containers.RepeatedCompositeFieldContainer[DagTaskRun]
    dag_version: int
    events: _containers.RepeatedCompositeFieldContainer[_scheduler_pb2.ExecutionEvent]
    sla_deadline_ms: int
    params: _containers.ScalarMap[str, str]
    def __init__(self, run_id: _Optional[str] = ..., dag: _Optional[str] = ..., logical_ms: _Optional[int] = ..., state: _Optional[str] = ..., trigger: _Optional[str] = ..., created_ms: _Optional[int] = ..., ended_ms: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[DagTaskRun, _Mapping]]] = ..., dag_version: _Optional[int] = ..., events: _Optional[_Iterable[_Union[_scheduler_pb2.ExecutionEvent, _Mapping]]] = ..., sla_deadline_ms: _Optional[int] = ..., params: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListDagRunsRequest(_message.Message):
    __slots__ = ("name", "limit")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    name: str
    limit: int
    def __init__(self, name: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListDagRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[DagRun]
    def __init__(self, runs: _Optional[_Iterable[_Union[DagRun, _Mapping]]] = ...) -> None: ...

class GetDagRunRequest(_message.Message):
    __slots__ = ("name", "run_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    run_id: str
    def __init__(self, name: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class ClearDagTaskRequest(_message.Message):
    __slots__ = ("name", "run_id", "task", "downstream", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    DOWNSTREAM_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    run_id: str
    task: str
    downstream: bool
    request_id: str
    def __init__(self, name: _Optional[str] = ..., run_id: _Optional[str] = ..., task: _Optional[str] = ..., downstream: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...
