"""``schedctl job ...``: what each job command sends and how its answer is worded.

Separate from ``schedctl`` (the entry point: parse, connect, exit status) so that a change to
how a job is shown or created touches this module alone; the flags that build a job document
are ``job_flags``, the shared output and clock are ``Invocation``'s.
"""

from __future__ import annotations

import json
from typing import Any

from schedd_proto import scheduler_pb2 as pb

from ._cli import PROG, CommandError, UsageError, _fields, _table
from .convert import format_duration, format_time, to_dict
from .documents import Limits, read_input
from .errors import AlreadyExists, Conflict, SchedError, brief, clip
from .invocation import Invocation
from .job_flags import _flag_doc, _merge
from .watch_commands import watch_listing
from .specs import job_specs_from_bytes, spec_from_dict, spec_to_dict


def job_create(cmd: Invocation) -> None:
    args, flags = cmd.args, _flag_doc(cmd.args)
    if args.file:
        if args.name or flags:
            raise UsageError("job create -f FILE takes no NAME or job flags")
        _create_from_file(cmd, args.file)
        return
    if not args.name:
        raise UsageError("job create needs NAME (or -f FILE)")
    if not {"command", "argv", "http", "container"} & flags.keys():
        raise UsageError("job create needs a handler: --command, --argv, --http-url or --image")
    job = _create(cmd, spec_from_dict({"name": args.name, **flags}))
    cmd.emit(to_dict(job), lambda: _created_line(job))


def _create(cmd: Invocation, spec: pb.JobSpec) -> pb.Job:
    try:
        written = cmd.client.put_job_result(spec, create_only=True)
        cmd.warn(written.warnings)
        return written.job
    except AlreadyExists:
        raise CommandError(
            f"job {brief(spec.name)} already exists; change it with `{PROG} job update {clip(spec.name, 80)}"
            f" ...` or `{PROG} job apply -f FILE`"
        ) from None


def _create_from_file(cmd: Invocation, path: str) -> None:
    """One batch, create only: every job of the file is created, or none is."""
    located = _read_specs(path, cmd.file_limits())
    cmd.warn(_put_batch(cmd, located, create_only=True).warnings)
    cmd.emit({"created": len(located), "updated": 0},
              lambda: "\n".join(f"created job {spec.name} (version 1)" for _, spec in located))


def _put_batch(cmd: Invocation, located: list[tuple[str, pb.JobSpec]], *, create_only: bool) -> pb.PutJobsResponse:
    """PutJobs of the whole file, all or nothing; a refused job's position in the call is
    turned into its place in the file."""
    try:
        return cmd.client.put_jobs([spec for _, spec in located], create_only=create_only)
    except SchedError as err:
        if err.position is not None and 0 < err.position <= len(located):
            raise CommandError(f"{located[err.position - 1][0]}: {err.message}; nothing was committed") from None
        raise


def job_update(cmd: Invocation) -> None:
    changes = _flag_doc(cmd.args)
    if not changes:
        raise UsageError("job update needs at least one field flag to change")
    job = cmd.client.get_job(cmd.args.name, upcoming=1)
    spec = spec_from_dict(_merge(spec_to_dict(job.spec), changes))
    try:
        written = cmd.client.put_job_result(spec, expected_version=job.version)
        cmd.warn(written.warnings)
        updated = written.job
    except Conflict:
        raise CommandError(
            f"job {job.spec.name!r} changed while being updated (it is past version"
            f" {job.version}); run the command again"
        ) from None
    cmd.emit(to_dict(updated), lambda: f"updated job {updated.spec.name} (version {updated.version})")


#: What an empty `delivery` means (the server's default, which it stores as no value).
DEFAULT_DELIVERY = "at_least_once"


def job_get(cmd: Invocation) -> None:
    job = cmd.client.get_job(cmd.args.name, upcoming=cmd.args.next, stale_ok=cmd.args.stale)
    data = to_dict(job)
    data["spec"]["delivery"] = job.spec.delivery or DEFAULT_DELIVERY    # never empty (applies back as is)
    cmd.emit(data, lambda: _job_details(cmd, job))


def _job_details(cmd: Invocation, job: pb.Job) -> str:
    spec = job.spec
    next_runs = [
        "  ".join(filter(None, (_local_time(spec, fire), format_time(ms), cmd.ago(ms), fire.window_note,
                                fire.calendar_note)))
        for ms, fire in _upcoming(job)
    ]
    last_run = "-"
    if job.last_execution_id:
        last_run = f"{job.last_execution_id}  {job.last_state or '-'}  scheduled {cmd.when(job.last_scheduled_ms)}"
    created = cmd.when(job.created_ms) + (f" by {job.created_by}" if job.created_by else "")
    return _fields(
        ("Name", spec.name),
        ("Team", spec.team),
        ("Description", spec.description),
        ("Schedule", spec.schedule or "(on demand)"),
        ("In words", job.schedule_words),
        ("Time zone", spec.timezone or "UTC"),
        ("Handler", _describe_handler(spec)),
        ("State", _job_state(job)),
        ("Version", job.version),
        ("Labels", ", ".join(f"{k}={v}" for k, v in sorted(spec.labels.items()))),
        ("Worker labels", ", ".join(f"{k}={v}" for k, v in sorted(spec.worker_labels.items()))),
        ("Retry", _describe_retry(spec.retry)),
        ("Timeout", format_duration(spec.timeout_seconds) if spec.timeout_seconds else "none"),
        ("Limits", _describe_limits(spec)),
        ("Overlap", spec.overlap),
        ("Delivery", spec.delivery or DEFAULT_DELIVERY),
        ("Catch-up", spec.catchup),
        ("Priority", spec.priority or ""),
        ("Pool", spec.pool),
        ("History limit", spec.history_limit or ""),
        ("DST policy", _describe_dst(job)),
        ("Calendar", _describe_calendar(spec)),
        ("Window", _describe_window(spec)),
        ("SLA", _describe_sla(spec)),
        ("Created", created),
        ("Updated", cmd.when(job.updated_ms)),
        ("Executions", job.executions_total),
        ("Last run", last_run),
        ("Next run", cmd.when(job.next_fire_ms)),
        ("Next runs", "\n".join(next_runs)),
    )


def _describe_calendar(spec: pb.JobSpec) -> str:
    parts = []
    if spec.calendar.skip:
        parts.append("skip " + ", ".join(spec.calendar.skip))
    if spec.calendar.only:
        parts.append("only " + ", ".join(spec.calendar.only))
    if parts:
        parts.append(f"on_skip {spec.calendar.on_skip or 'skip'}")
    if spec.on_blackout:
        parts.append(f"on_blackout {spec.on_blackout}")
    return "; ".join(parts)


def _describe_window(spec: pb.JobSpec) -> str:
    if not spec.HasField("window"):
        return ""
    return (f"{spec.window.start}–{spec.window.end} {spec.timezone or 'UTC'}, each run placed at the "
            "least-loaded second; the end is its deadline")


def job_next(cmd: Invocation) -> None:
    job = cmd.client.get_job(cmd.args.name, upcoming=cmd.args.count, stale_ok=cmd.args.stale)
    spec = job.spec
    zone = spec.timezone or "UTC"
    rows: list[dict[str, Any]] = [
        {"time_ms": ms, "local": fire.local, "utc": format_time(ms), "dst": fire.dst_note,
         "calendar": fire.calendar_note, "window": fire.window_note, "placed_ms": fire.placed_ms}
        for ms, fire in _upcoming(job)
    ]
    policy = _describe_dst(job)
    marked = any(r["calendar"] for r in rows)         # a CALENDAR column only when a calendar takes one
    windowed = any(r["window"] for r in rows)         # a WINDOW column for a window job
    header = f"{spec.name}: {spec.schedule or '(on demand)'} in {zone}" + (f" (DST: {policy})" if policy else "")
    cmd.emit(
        {"name": spec.name, "schedule": spec.schedule, "timezone": zone,
         "dst_gap": job.effective_dst_gap, "dst_fold": job.effective_dst_fold, "fires": rows},
        lambda: header + "\n" + _table(
            ("#", f"LOCAL ({zone})", "UTC", "IN", "DST") + (("WINDOW",) if windowed else ())
            + (("CALENDAR",) if marked else ()),
            [(i, r["local"], r["utc"], cmd.ago(r["time_ms"]) or "-", r["dst"] or "-")
             + ((r["window"] or "-",) if windowed else ())
             + ((r["calendar"] or "-",) if marked else ())
             for i, r in enumerate(rows, 1)],
            empty="No coming fires (paused, on demand, or a one-off already past).",
        ),
    )


def job_list(cmd: Invocation) -> None:
    args = cmd.args
    if args.watch:
        events = cmd.client.watch_jobs(team=args.team, state=args.state)
        watch_listing(cmd, (e for e in events if args.all or not is_dag_row(e.key)), "job",
                      lambda jobs: jobs_table(cmd, jobs),
                      lambda job: f"{job.spec.name} {_job_state(job)} next={cmd.when(job.next_fire_ms)} "
                                  f"last={job.last_state or '-'}")
        return
    jobs = [job for job in cmd.client.list_jobs(team=args.team, state=args.state, stale_ok=args.stale,
                                                name_contains=args.name_contains, pool=args.pool)
            if args.all or not is_dag_row(job.spec.name)]
    cmd.emit([to_dict(job) for job in jobs], lambda: jobs_table(cmd, jobs))


def is_dag_row(name: str) -> bool:
    """A job row a DAG owns ("etl:load", and "etl:" for its schedule): `job list` hides them
    unless --all; `schedctl dag show DAG` shows its tasks."""
    return ":" in name


def last_run_ms(job: pb.Job) -> int:
    """When the job's last run was scheduled, by whatever trigger (a server that does not say:
    its schedule's last firing)."""
    return job.last_run_ms or job.last_scheduled_ms


def jobs_table(cmd: Invocation, jobs: list[pb.Job]) -> str:
    """`job list`'s table (also what `job list --watch` redraws)."""
    return _table(
            ("NAME", "TEAM", "SCHEDULE", "TZ", "STATE", "NEXT RUN", "LAST RUN", "LAST STATE"),
            [
                (
                    job.spec.name,
                    job.spec.team,
                    job.spec.schedule or "(on demand)",
                    job.spec.timezone or "UTC",
                    _job_state(job),
                    cmd.when(job.next_fire_ms),
                    cmd.when(last_run_ms(job)),
                    job.last_state or "-",
                )
                for job in jobs
            ],
            empty="No jobs found.",
        )


def job_pause(cmd: Invocation) -> None:
    job = cmd.client.pause_job(cmd.args.name)
    cmd.emit(to_dict(job), lambda: f"paused job {job.spec.name} (version {job.version})")


def job_resume(cmd: Invocation) -> None:
    job = cmd.client.resume_job(cmd.args.name, catch_up=cmd.args.catch_up)
    cmd.emit(
        to_dict(job),
        lambda: f"resumed job {job.spec.name} (version {job.version}, next run {cmd.when(job.next_fire_ms)})",
    )


def job_backfill(cmd: Invocation) -> None:
    args = cmd.args
    start, end = args.start(cmd.clock()), args.end(cmd.clock())
    r = cmd.client.backfill_job(args.name, start, end, dry_run=args.dry_run)
    span = f"{format_time(r.first_ms)} .. {format_time(r.last_ms)}" if r.instants else "none"
    cmd.emit(
        to_dict(r),
        lambda: (f"{r.instants} instants of {args.name} in range ({span})" if args.dry_run else
                 f"backfill of {args.name}: {r.created} executions recorded on the backfill lane, "
                 f"{r.duplicates} instants already recorded ({span})"),
    )


def _read_specs(path: str, limits: Limits) -> list[tuple[str, pb.JobSpec]]:
    """Every job in a YAML/JSON file, in document order, with where it was read ("jobs.yaml:
    document 3, item 2"), all checked before anything is sent (``DocumentError`` else)."""
    return job_specs_from_bytes(*read_input(path, limits), limits)


def _created_line(job: pb.Job) -> str:
    kind = "" if job.spec.schedule else f", on demand: run it with `{PROG} job trigger {clip(job.spec.name, 80)}`"
    return f"created job {job.spec.name} (version {job.version}{kind})"


def _describe_dst(job: pb.Job) -> str:
    """The DST policy in force and where it comes from ("" for a schedule without one)."""
    gap, fold = job.effective_dst_gap, job.effective_dst_fold
    if not gap:
        return ""
    if job.spec.dst_gap or job.spec.dst_fold:
        why = "named on the job"
    elif (gap, fold) == ("skip", "both"):
        why = "default: the hour repeats, so it follows real time"
    else:
        why = "default: fixed local times"
    return f"gap {gap}, fold {fold} ({why})"


def _describe_sla(spec: pb.JobSpec) -> str:
    if not spec.HasField("sla"):
        return ""
    sla = spec.sla
    parts = [f"within {format_duration(sla.within_seconds)}"] if sla.within_seconds else []
    if sla.by:
        parts.append(f"by {sla.by} {sla.timezone or spec.timezone or 'UTC'}")
    text = " and ".join(parts) or "-"
    return text + (f", webhook {sla.webhook}" if sla.webhook else "")


def _job_state(job: pb.Job) -> str:
    return "paused" if job.paused else "active"


def _upcoming(job: pb.Job) -> list[tuple[int, pb.UpcomingFire]]:
    """Each upcoming fire with how the server renders it in the job's zone (`UpcomingFire`); an
    older server sends none: then the UTC time stands for the local one and there is no DST note."""
    fires = list(job.upcoming_fires)
    if len(fires) != len(job.upcoming_ms):
        fires = [pb.UpcomingFire(local=format_time(ms) or "") for ms in job.upcoming_ms]
    return list(zip(job.upcoming_ms, fires))


def _local_time(spec: pb.JobSpec, fire: pb.UpcomingFire) -> str:
    """The time in the job's zone, ``2026-11-29T03:00:00+01:00 CET``; ``""`` for UTC jobs."""
    if spec.timezone in ("", "UTC") or not fire.zone_abbreviation:
        return ""
    return f"{fire.local} {fire.zone_abbreviation}"


def _describe_handler(spec: pb.JobSpec) -> str:
    kind = spec.handler.WhichOneof("kind")
    if kind == "shell":
        shell = spec.handler.shell
        text = f"exec {json.dumps(list(shell.argv))}" if shell.argv else f"sh -c {json.dumps(shell.command)}"
        if shell.workdir:
            text += f" in {shell.workdir}"
        if shell.env:
            text += " with " + " ".join(f"{k}={v}" for k, v in sorted(shell.env.items()))
        if shell.inherit_env:
            text += "; inherits " + ", ".join(shell.inherit_env)
        if spec.env_secret:
            text += "; secret " + " ".join(f"{k}={v}" for k, v in sorted(spec.env_secret.items()))
        return text
    if kind == "http":
        return f"{spec.handler.http.method or 'POST'} {spec.handler.http.url}"
    if kind == "python":
        python = spec.handler.python
        return f"python {python.name}" + (f" {python.args_json}" if python.args_json else "")
    if kind == "container":
        return _describe_container(spec)
    return "(none)"


def _describe_container(spec: pb.JobSpec) -> str:
    """One line of what the worker will run: image, command, then the isolation asked for."""
    c = spec.handler.container
    text = f"container {c.image}"
    if c.command:
        text += f" sh -c {json.dumps(c.command)}"
    elif c.args:
        text += f" exec {json.dumps(list(c.args))}"
    parts = [f"network {c.network or 'none'}",
             "read-only root" if not c.HasField("read_only") or c.read_only else "writable root"]
    parts += [f"{label} {value}" for label, value in (("cpus", f"{c.cpu:g}" if c.cpu else ""),
                                                     ("memory", c.memory), ("pids", c.pids or ""),
                                                     ("user", c.user), ("workdir", c.workdir),
                                                     ("pull", c.pull)) if value]
    parts += [f"mount {m.source}:{m.target}" + ("" if not m.HasField("read_only") or m.read_only else ":rw")
              for m in c.mounts]
    if c.env:
        parts.append("with " + " ".join(f"{k}={v}" for k, v in sorted(c.env.items())))
    if spec.env_secret:
        parts.append("secret " + " ".join(f"{k}={v}" for k, v in sorted(spec.env_secret.items())))
    return text + "; " + ", ".join(parts)


def _describe_limits(spec: pb.JobSpec) -> str:
    """Per-attempt limits, ``memory 512 MiB, cpu 60s, open files 256, processes 64`` ("" for none)."""
    if not spec.HasField("limits"):
        return ""
    lim = spec.limits
    parts = [f"{label} {value}" for label, value in (
        ("memory", f"{lim.memory_mb} MiB" if lim.memory_mb else ""),
        ("cpu", format_duration(lim.cpu_seconds) if lim.cpu_seconds else ""),
        ("open files", lim.open_files or ""), ("processes", lim.processes or "")) if value]
    return ", ".join(parts)


def _describe_retry(policy: pb.RetryPolicy) -> str:
    if policy.max_attempts <= 1:
        return "no retry"
    text = f"{policy.max_attempts} attempts"
    if policy.initial_backoff_seconds or policy.max_backoff_seconds:
        text += (
            f", backoff {format_duration(policy.initial_backoff_seconds)}"
            f" to {format_duration(policy.max_backoff_seconds)}"
        )
    if policy.multiplier:
        text += f" x{policy.multiplier:g}"
    return text
