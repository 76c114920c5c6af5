"""Proto <-> core conversion, in one place."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from zoneinfo import ZoneInfo

from google.protobuf.json_format import MessageToDict, ParseDict

from schedd.core import schedule as sched
from schedd.core.model import Attempt, Execution, Job
from schedd.core.state import SchedulerState, schedule_of
from schedd.api.secrets import masked
from schedd_proto import scheduler_pb2 as pb


def spec_to_dict(spec: pb.JobSpec) -> dict:
    return MessageToDict(spec, preserving_proto_field_name=True)


def spec_from_canonical(d: dict) -> pb.JobSpec:
    """The canonical spec's keys are the proto's field names, so the message is built with keyword
    arguments (10x faster than json_format.ParseDict, which matters for pages of 1,000 jobs);
    ParseDict remains the fallback for a spec written by a different version."""
    try:
        return pb.JobSpec(**d)
    except (ValueError, TypeError):
        return ParseDict(d, pb.JobSpec(), ignore_unknown_fields=True)


SUMMARY_KEYS = ("name", "team", "schedule", "timezone", "pool", "priority", "paused")
SUMMARY_DESCRIPTION_CHARS = 120


def _summary_spec(d: dict) -> pb.JobSpec:
    """What a listing shows of a spec: bounded in size whatever the spec holds (no handler, env,
    labels or SLA; the description cut short)."""
    spec = pb.JobSpec(**{k: d[k] for k in SUMMARY_KEYS if k in d})
    if d.get("description"):
        spec.description = d["description"][:SUMMARY_DESCRIPTION_CHARS]
    return spec


def job_to_pb(job: Job, state: SchedulerState, *, upcoming: int = 0, summary: bool = False) -> pb.Job:
    """The job as the API shows it; `summary` (listings) sets Job.summary and a bounded spec.
    Secret env values are never shown: each reads as its mask, "***(vN)"."""
    d = masked(job.spec_dict())
    out = pb.Job(spec=_summary_spec(d) if summary else spec_from_canonical(d), version=job.version,
                 paused=job.paused, next_fire_ms=job.next_fire or 0, created_ms=job.created_ms,
                 updated_ms=job.updated_ms, created_by=job.created_by,
                 last_scheduled_ms=job.last_fire or 0, executions_total=job.fired_total, summary=summary)
    last = state.last_execution(job.name)
    if last is not None:
        out.last_execution_id = last.id
        out.last_state = last.state
    if upcoming and job.next_fire is not None and not job.paused:
        times = [job.next_fire] + sched.next_n(schedule_of(job), job.next_fire, upcoming - 1)
        out.upcoming_ms.extend(times[:upcoming])
        out.upcoming_fires.extend(upcoming_fires(schedule_of(job), out.upcoming_ms))
    return out


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
                        lane=ex.lane, events=events_to_pb(ex.events))


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
