"""Proto <-> core conversion of jobs and executions, in one place (DAGs: `dag_convert`).

A job spec comes in as a proto message and is validated into the typed spec the core keeps
(`job_spec_from_pb`: proto -> dict with the proto's field names -> `model.canonical_spec`, secret
values sealed on the way); it goes out as a message built from the typed spec's fields
(`job_spec_to_pb`), secret values masked.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from google.protobuf.json_format import MessageToDict, ParseDict, ParseError

from schedd.core import calendars
from schedd.core import windows
from schedd.core import params as run_params
from schedd.core import schedule as sched
from schedd.core import schedule_words
from schedd.core.model import Attempt, Execution, Job, canonical_spec, execution_id, mask_secret
from schedd.core.specs import (
    ContainerHandler, Handler, HttpHandler, JobSpec, PythonHandler, RawHandler, ResourceLimits, RetrySpec,
    SealedSecret, ShellHandler, SlaSpec,
)
from schedd.core.state import SchedulerState, schedule_of
from schedd.api.secrets import seal_spec_secrets
from schedd.security.secrets import EnvSealer
from schedd_proto import scheduler_pb2 as pb

StoredSecrets = Callable[[str], Mapping[str, SealedSecret]]   # job name -> its sealed env_secret now


def spec_to_dict(spec: pb.JobSpec) -> dict:
    """MessageToDict(spec, preserving_proto_field_name=True), the same dict several times faster
    (registration validates every spec of a batch with it): set fields only (ListFields, in C),
    maps as dicts, 64-bit integers as text, non-finite doubles as "NaN"/"Infinity"."""
    return _message_dict(spec)


_INT64_TYPES = frozenset({3, 4, 6, 16, 18})        # int64, uint64, fixed64, sfixed64, sint64
_PLAIN_TYPES = frozenset({1, 5, 7, 8, 9, 13, 15, 17}) | _INT64_TYPES   # + double, int32s, bool, string


def _message_dict(msg: Any) -> dict:
    plan = _plan(msg.DESCRIPTOR)
    if plan is None:
        return MessageToDict(msg, preserving_proto_field_name=True)
    out: dict[str, Any] = {}
    for fd, value in msg.ListFields():
        how = plan[fd.number]
        if how == "scalar":
            out[fd.name] = value if fd.type not in _SPECIAL_TYPES else _scalar(fd.type, value)
        elif how == "msg":
            out[fd.name] = _message_dict(value)
        elif how == "map":
            vfd = fd.message_type.fields_by_name["value"]
            out[fd.name] = ({k: _message_dict(v) for k, v in value.items()} if vfd.message_type is not None
                            else {k: _scalar(vfd.type, v) for k, v in value.items()})
        elif how == "repeated_msg":
            out[fd.name] = [_message_dict(v) for v in value]
        else:
            out[fd.name] = [_scalar(fd.type, v) for v in value]
    return out


_SPECIAL_TYPES = _INT64_TYPES | {1}


def _scalar(kind: int, v: Any) -> Any:
    if kind in _INT64_TYPES:
        return str(v)
    if kind == 1 and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


@functools.cache
def _plan(desc: Any) -> dict[int, str] | None:
    """How each field of a message type converts (by field number), or None when one of its
    fields is a kind MessageToDict treats specially (enums, bytes, floats, well-known types)."""
    return {fd.number: _how(fd) for fd in desc.fields} if _plain_message(desc) else None


def _how(fd: Any) -> str:
    if fd.message_type is None:
        return "repeated" if fd.is_repeated else "scalar"
    if fd.message_type.GetOptions().map_entry:
        return "map"
    return "repeated_msg" if fd.is_repeated else "msg"


@functools.cache
def _plain_message(desc: Any) -> bool:
    """True when every field (recursively) is a kind _message_dict converts exactly like
    MessageToDict: no enums, bytes, floats or well-known types (those go to MessageToDict)."""
    if desc.full_name.startswith("google.protobuf."):
        return False
    for fd in desc.fields:
        if fd.message_type is not None:
            if fd.message_type is not desc and not _plain_message(fd.message_type):
                return False
        elif fd.type not in _PLAIN_TYPES:
            return False
    return True


def job_spec_from_pb(msg: pb.JobSpec, stored_of: StoredSecrets | None = None,
                     sealer: EnvSealer | None = None) -> tuple[JobSpec, str]:
    """A request's spec validated into the typed spec and its committed text, its secret env
    sealed first (schedd.api.secrets: nothing proposed, logged or stored ever holds a plaintext
    secret; `stored_of` gives the values a write may keep by their mask). Raises ValidationError."""
    d = spec_to_dict(msg)
    if d.get("env_secret"):
        seal_spec_secrets(d, stored_of(msg.name) if stored_of is not None else {}, sealer)
    return canonical_spec(d)


def job_spec_to_pb(spec: JobSpec) -> pb.JobSpec:
    """The spec as reads show it, built from its fields. Secret env values are never shown: each
    reads as its mask, "***(vN)". What a hand-made entry holds beside the canonical fields
    (JobSpec.extra) stays in the state and is not shown."""
    p = spec.policies
    out = pb.JobSpec(
        name=spec.name, team=spec.team, schedule=spec.schedule, timezone=spec.timezone,
        description=spec.description, labels=dict(spec.labels), timeout_seconds=spec.timeout_seconds,
        overlap=p.overlap, catchup=p.catchup, priority=p.priority, pool=p.pool, paused=spec.paused,
        history_limit=spec.history_limit, delivery=p.delivery, worker_labels=dict(spec.worker_labels),
        max_active=p.max_active, queue_limit=p.queue_limit, concurrency_key=p.concurrency_key,
        concurrency_limit=p.concurrency_limit, catchup_window_seconds=p.catchup_window_seconds,
        catchup_max=p.catchup_max, catchup_order=p.catchup_order,
        starting_deadline_seconds=p.starting_deadline_seconds, jitter_seconds=p.jitter_seconds,
        dst_gap=spec.dst_gap, dst_fold=spec.dst_fold, history_max_age_seconds=p.history_max_age_seconds,
        env_secret={k: mask_secret(s.version) for k, s in spec.env_secret.items()}, params=dict(spec.params))
    if spec.calendar is not None:
        out.calendar.CopyFrom(pb.JobCalendar(skip=spec.calendar.skip, only=spec.calendar.only,
                                             on_skip=spec.calendar.on_skip))
    if spec.window is not None:
        out.window.CopyFrom(pb.JobWindow(start=spec.window.start, end=spec.window.end))
    out.on_blackout = spec.on_blackout
    handler = handler_to_pb(spec.handler) if spec.handler is not None else None
    if handler is not None:
        out.handler.CopyFrom(handler)
    if spec.retry is not None:
        out.retry.CopyFrom(retry_to_pb(spec.retry))
    if spec.sla is not None:
        out.sla.CopyFrom(sla_to_pb(spec.sla))
    if spec.limits is not None:
        out.limits.CopyFrom(limits_to_pb(spec.limits))
    return out


def handler_to_pb(handler: Handler) -> pb.Handler | None:
    """A job handler as the API says it (None: say none). A sensor (a DAG task's row) has no
    field of its own: an empty handler stands for it. A handler not in canonical form (an entry
    made by hand) is said as far as the message can say it, as reads always did."""
    if isinstance(handler, ShellHandler):
        return pb.Handler(shell=pb.ShellHandler(command=handler.command, argv=handler.argv,
                                                workdir=handler.workdir, env=dict(handler.env),
                                                inherit_env=handler.inherit_env))
    if isinstance(handler, HttpHandler):
        return pb.Handler(http=pb.HttpHandler(method=handler.method, url=handler.url, headers=dict(handler.headers),
                                              body=handler.body,
                                              insecure_skip_verify=handler.insecure_skip_verify))
    if isinstance(handler, PythonHandler):
        return pb.Handler(python=pb.PythonHandler(name=handler.name, args_json=handler.args_json))
    if isinstance(handler, ContainerHandler):
        return pb.Handler(container=_container_to_pb(handler))
    if isinstance(handler, RawHandler):
        return _raw_handler_to_pb(handler.value)
    return pb.Handler()


def _raw_handler_to_pb(value: Any) -> pb.Handler | None:
    if value is None:
        return None
    try:
        return ParseDict(value, pb.Handler(), ignore_unknown_fields=True)
    except (ParseError, TypeError, ValueError, AttributeError):
        return pb.Handler()


def _container_to_pb(c: ContainerHandler) -> pb.ContainerHandler:
    return pb.ContainerHandler(
        image=c.image, command=c.command, args=c.args, env=dict(c.env), workdir=c.workdir, user=c.user,
        network=c.network, cpu=c.cpu, memory=c.memory, pids=c.pids, read_only=c.read_only, pull=c.pull,
        mounts=[pb.ContainerMount(source=m.source, target=m.target, read_only=m.read_only) for m in c.mounts])


def retry_to_pb(r: RetrySpec) -> pb.RetryPolicy:
    return pb.RetryPolicy(max_attempts=r.max_attempts, initial_backoff_seconds=r.initial_backoff_seconds,
                          max_backoff_seconds=r.max_backoff_seconds, multiplier=r.multiplier)


def sla_to_pb(sla: SlaSpec) -> pb.SlaSpec:
    return pb.SlaSpec(within_seconds=sla.within_seconds, by=sla.by, timezone=sla.timezone, webhook=sla.webhook)


def limits_to_pb(limits: ResourceLimits) -> pb.ResourceLimits:
    return pb.ResourceLimits(memory_mb=limits.memory_mb, cpu_seconds=limits.cpu_seconds,
                             open_files=limits.open_files, processes=limits.processes)


SUMMARY_DESCRIPTION_CHARS = 120


def _summary_spec(spec: JobSpec) -> pb.JobSpec:
    """What a listing shows of a spec: bounded in size whatever the spec holds (no handler, env,
    labels or SLA; the description cut short)."""
    return pb.JobSpec(name=spec.name, team=spec.team, schedule=spec.schedule, timezone=spec.timezone,
                      pool=spec.policies.pool, priority=spec.policies.priority, paused=spec.paused,
                      description=spec.description[:SUMMARY_DESCRIPTION_CHARS])


@functools.lru_cache(maxsize=8192)
def run_id(job: str, scheduled_ms: int) -> str:
    """`execution_id`, cached (its time formatting costs about 20 us): a listing names each job's
    last runs, and a watch reads the same ones again every few hundred milliseconds."""
    return execution_id(job, scheduled_ms)


def job_to_pb(job: Job, state: SchedulerState, *, upcoming: int = 0, summary: bool = False,
              recent: Iterable[tuple[int, str]] = ()) -> pb.Job:
    """The job as the API shows it; `summary` (listings) sets Job.summary and a bounded spec;
    `recent`: its last runs as (scheduled_ms, state), for Job.recent. Secret env values are never shown: each reads as its
    mask, "***(vN)"."""
    spec = job.spec
    gap, _, fold = job.dst.partition("/")
    out = pb.Job(spec=_summary_spec(spec) if summary else job_spec_to_pb(spec), version=job.version,
                 paused=job.paused, next_fire_ms=job.next_fire or 0, created_ms=job.created_ms,
                 updated_ms=job.updated_ms, created_by=job.created_by,
                 last_scheduled_ms=job.last_fire or 0, executions_total=job.fired_total, summary=summary,
                 schedule_words=schedule_words.words(job.schedule, job.tz, job.name, gap, fold))
    out.recent.extend(pb.RunOutcome(execution_id=run_id(job.name, t), scheduled_ms=t, state=state)
                      for t, state in recent)
    last = state.last_execution(job.name)
    if last is not None:
        out.last_execution_id = run_id(last.job, last.scheduled_ms)
        out.last_state = last.state
        out.last_run_ms = last.scheduled_ms
    if not summary:
        s = schedule_of(job)
        if s.kind == "cron":
            out.effective_dst_gap, out.effective_dst_fold = s.gap, s.fold
    if upcoming and job.next_fire is not None and not job.paused:
        times = [job.next_fire] + sched.next_n(schedule_of(job), job.next_fire, upcoming - 1)
        out.upcoming_ms.extend(times[:upcoming])
        out.upcoming_fires.extend(upcoming_fires(schedule_of(job), out.upcoming_ms))
        for fire, ms in zip(out.upcoming_fires, out.upcoming_ms):
            fire.calendar_note = calendars.preview_note(state, job, ms)
            fire.placed_ms, fire.window_note = windows.preview(state, job, ms)
    return out


def job_pb_inputs(job: Job, state: SchedulerState, recent: tuple[tuple[int, str], ...]) -> tuple[Any, ...]:
    """Everything `job_to_pb` (without `upcoming`) reads, as one comparable value: equal inputs
    give an equal message, so a watch that reads the same jobs again and again builds a job's
    summary only when this changed (keep it in step with job_to_pb)."""
    last = state.last_execution(job.name)
    return (job.spec_t, job.team, job.schedule, job.tz, job.dst, job.version, job.paused, job.next_fire,
            job.created_ms, job.updated_ms, job.created_by, job.last_fire, job.fired_total,
            None if last is None else (last.scheduled_ms, last.state), recent)


def upcoming_fires(s: sched.Schedule, times_ms: Iterable[int]) -> list[pb.UpcomingFire]:
    """Each fire of `s` as it reads in the schedule's zone, with how a DST transition shaped it:
    what `schedctl job get/next` shows, rendered here so the client needs no schedule code."""
    zone = None if s.tz in ("", "UTC") else ZoneInfo(s.tz)

    def abbreviation(ms: int) -> str:
        return "UTC" if zone is None else datetime.fromtimestamp(ms / 1000, zone).tzname() or ""

    return [pb.UpcomingFire(local=sched.format_ms(ms, s.tz), zone_abbreviation=abbreviation(ms),
                            dst_note=sched.dst_note(s, ms))
            for ms in times_ms]


def attempt_to_pb(a: Attempt) -> pb.Attempt:
    return pb.Attempt(number=a.number, worker=a.worker, fencing_token=a.fencing_token,
                      started_ms=a.started_ms, ended_ms=a.ended_ms, exit_code=a.exit_code,
                      http_status=a.http_status, error=a.error, output_tail=a.output_tail,
                      state=a.state, rejected=a.rejected)


def execution_to_pb(ex: Execution) -> pb.Execution:
    return pb.Execution(id=ex.id, job=ex.job, scheduled_ms=ex.scheduled_ms, state=ex.state,
                        trigger=ex.trigger, created_ms=ex.created_ms, term=ex.term, reason=ex.reason,
                        attempts=[attempt_to_pb(a) for a in ex.attempts], updated_ms=ex.updated_ms,
                        log_index=ex.log_index, retry_at_ms=ex.retry_at or 0,
                        cancel_requested=ex.cancel_requested, due_ms=ex.due,
                        lane=ex.lane, events=events_to_pb(ex.events), params=run_params.of_events(ex.events))


def events_to_pb(events) -> list[pb.ExecutionEvent]:
    """Events of an execution or a DAG run (sla_missed, ...)."""
    return [pb.ExecutionEvent(time_ms=e.time_ms, kind=e.kind, message=e.message) for e in events]


def exec_token(key: tuple[int, str] | None) -> str:
    return f"{key[0]}:{key[1]}" if key else ""


def parse_exec_token(token: str) -> tuple[int, str] | None:
    if not token:
        return None
    t, sep, name = token.partition(":")
    try:
        return int(t), name
    except ValueError:
        raise ValueError(f"bad page_token {token!r}") from None
