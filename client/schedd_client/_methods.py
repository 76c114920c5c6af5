"""The public methods of ``Client`` and ``AsyncClient``, declared per area.

Each method is one builder of ``_plans`` (or of ``dags``, ``acl``, ``membership``) carried out:
the builder says what to send and how to read the answer, ``_transport`` sends it with the
failover of ``_failover``. ``JobsMixin`` and ``AsyncJobsMixin`` (and so on per area) declare the
same methods with the same signatures and documentation, blocking and awaited; list methods
return an iterator (an async iterator) that fetches pages lazily. tests/unit/test_sdk.py keeps
the two twins and their builders in step.

No ``from __future__ import annotations`` here: the annotations are the objects themselves, so
``inspect.signature`` (and ``help``) show the protobuf types a method returns.
"""

import os
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any

from schedd_proto import acl_pb2 as apb
from schedd_proto import calendars_pb2 as kpb
from schedd_proto import dags_pb2 as dpb
from schedd_proto import logs_pb2 as lpb
from schedd_proto import membership_pb2 as mpb
from schedd_proto import scheduler_pb2 as pb

from . import _plans
from . import waiting as _waiting
from . import watching as _watching
from . import acl as _acl
from . import backup as _backup
from . import calendars as _calendars
from . import dags as _dags
from . import job_sync as _job_sync
from . import membership as _membership
from . import run_logs as _run_logs
from ._transport import AsyncTransport, BlockingTransport
from .errors import SchedError
from .snapshot_file import SnapshotMeta

__all__ = [
    "JobsMixin", "RunsMixin", "DagsMixin", "AclMixin", "ClusterMixin",
    "AsyncJobsMixin", "AsyncRunsMixin", "AsyncDagsMixin", "AsyncAclMixin", "AsyncClusterMixin",
]


class JobsMixin(BlockingTransport):
    """Jobs: create, change, fire and list them; quotas."""

    def put_job(self, spec: pb.JobSpec, *, create_only: bool = False, expected_version: int = 0) -> pb.Job:
        """Create or update a job (build ``spec`` with ``job_spec`` or ``spec_from_dict``);
        returns the job as read after the write.

        ``create_only=True`` raises ``AlreadyExists`` instead of updating; ``expected_version=N``
        updates only if the job is at version N, else raises ``Conflict``. ``put_job_result``
        is the same call answering whether it created the job and the version it made.
        """
        return self._run(_plans.put_job(spec, create_only=create_only, expected_version=expected_version))

    def put_job_result(self, spec: pb.JobSpec, *, create_only: bool = False,
                       expected_version: int = 0) -> pb.PutJobResponse:
        """``put_job``, answering the write itself: ``created``, ``version`` (the version THIS
        write made) and ``job`` (read after the write: a later writer's version may show).
        """
        return self._run(_plans.put_job_result(spec, create_only=create_only, expected_version=expected_version))

    def put_jobs(self, specs: Iterable[pb.JobSpec], *, create_only: bool = False) -> pb.PutJobsResponse:
        """Create or update many jobs in one batch; returns the created and updated counts.

        All or nothing: every job commits, or none does (also when the answer is lost: retried with
        the same request id, it commits once). A refused job is named in the error, whose
        ``position`` is its 1-based place in ``specs``. ``create_only=True`` refuses the whole batch
        with ``AlreadyExists`` if any of its jobs exists. The node caps a call
        (``limits.max_jobs_per_call``, ``limits.max_bytes_per_call``: ``ResourceExhausted``); send
        more than that in several calls, each one all-or-nothing. In a sharded cluster a batch whose
        jobs live in several shards is checked whole first (a refused job commits nothing), then
        committed shard by shard, all or nothing within each shard.
        """
        return self._run(_plans.put_jobs(specs, create_only=create_only))

    def get_job(self, name: str, *, upcoming: int = 5, stale_ok: bool = False) -> pb.Job:
        """One job, with its next ``upcoming`` fire times (max 100) in ``upcoming_ms``."""
        return self._run(_plans.get_job(name, upcoming=upcoming, stale_ok=stale_ok))

    def diff_jobs(self, specs: Iterable[pb.JobSpec], *, stale_ok: bool = False) -> list[pb.JobChange]:
        """What ``put_jobs(specs)`` would change, job by job, committing nothing: one
        ``JobChange`` per spec (``action`` "create", "update" or "unchanged"; ``current`` (of an
        update) and ``proposed`` (of a create or an update) as the server stores them, secret
        values masked). The same checks and caps
        as ``put_jobs``: a bad spec raises ``ValidationError`` with its ``position``.
        ``job_sync.field_changes(c.current, c.proposed)`` lists the fields that differ.
        """
        return self._run(_plans.diff_jobs(specs, stale_ok=stale_ok))

    def apply_jobs(self, specs: Iterable[pb.JobSpec], *, dry_run: bool = False,
                   batch_jobs: int = _job_sync.DEFAULT_BATCH_JOBS,
                   progress: _job_sync.Progress | None = None) -> _job_sync.ApplyReport:
        """Create or update ``specs`` so the cluster holds them, leaving unchanged jobs untouched
        (no new version); returns a ``job_sync.ApplyReport`` (created, updated, unchanged names
        and each job's field changes). Any number of jobs: they go in calls of at most
        ``batch_jobs`` (halved when a node's ``[limits]`` refuse a call as too large). Every batch
        is checked (``diff_jobs``) before any is written, so a bad spec anywhere commits nothing;
        each write batch is all or nothing. ``dry_run=True`` only checks. ``progress(stage,
        done, total)`` is called after each call (stage "check" or "write").
        """
        steps = _job_sync.Driver(_job_sync.apply_steps(list(specs), dry_run=dry_run, batch_jobs=batch_jobs,
                                                       progress=progress, shards=self._shards))
        while (plan := steps.next()) is not None:
            try:
                steps.answer(self._run(plan))
            except SchedError as err:
                steps.fail(err)
        return steps.report

    def list_jobs(
        self, *, team: str = "", state: str = "", page_size: int = 500, full: bool = False, stale_ok: bool = False,
        name_contains: str = "", pool: str = "", recent: int = 0,
    ) -> Iterator[pb.Job]:
        """Every job, optionally of one ``team``, in one ``state`` ("active" or "paused"), whose
        name contains ``name_contains`` (any case) and of one worker ``pool``, fetched lazily, at
        most ``page_size`` per page (pages are also bounded in bytes).

        Jobs come as summaries (``job.summary`` is set): the spec holds name, team, schedule,
        timezone, pool, priority, paused and a short description; ``get_job`` has the rest, or pass
        ``full=True`` for whole specs. ``recent`` (0-20): each job's ``recent`` holds the outcomes of
        its last that many runs, oldest first.
        """
        return self._iterate(_plans.list_jobs(
            team=team, state=state, page_size=page_size, full=full, stale_ok=stale_ok, name_contains=name_contains,
            pool=pool, recent=recent,
        ))

    def watch_jobs(self, *, team: str = "", state: str = "", limit: int = 100) -> Iterator[pb.WatchEvent]:
        """The jobs (of ``team``, in ``state``; at most ``limit``, by name) and then each change, as
        WatchEvents (added, changed, removed; one "synced" after the listing), for as long as
        you iterate; served from the answering node's applied state."""
        return _watching.stream(self, _watching.jobs_call(team, state, limit))

    def pause_job(self, name: str) -> pb.Job:
        """Stop firing a job; returns it as paused."""
        return self._run(_plans.pause_job(name))

    def resume_job(self, name: str, *, catch_up: bool = False) -> pb.Job:
        """Fire a paused job again; returns it. The instants missed while paused are recorded
        "paused" and not run, unless ``catch_up``: then the job's catch-up policy decides."""
        return self._run(_plans.resume_job(name, catch_up=catch_up))

    def delete_job(self, name: str) -> None:
        """Delete a job; raises ``NotFound`` if there is none."""
        return self._run(_plans.delete_job(name))

    def trigger_job(
        self, name: str, *, force: bool = False, params: Mapping[str, str] | None = None, wait: bool = False,
        timeout: float | None = None,
    ) -> pb.Execution:
        """Fire a job now, outside its schedule; returns the new execution. It obeys the job's
        overlap policy (skipped or queued behind an active run) unless ``force``. ``params``
        are the run's parameters (a shell job sees ``SCHEDD_PARAM_<NAME>``). With ``wait``,
        returns the run once it has ended (``wait_for``: ``WaitTimeout`` after ``timeout`` s)."""
        run = self._run(_plans.trigger_job(name, force=force, params=params))
        return self.wait_for(run.id, timeout) if wait else run

    def wait_for(self, run_id: str, timeout: float | None = None) -> pb.Execution:
        """The run once it has ended (SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, SKIPPED, LOST),
        read again until then; raises ``WaitTimeout`` (the run goes on) after ``timeout`` seconds."""
        return _waiting.wait_until(lambda: self._run(_plans.get_execution(run_id)), _waiting.run_ended,
                                   timeout, f"run {run_id}")

    def backfill_job(self, name: str, start_ms: int, end_ms: int, *, dry_run: bool = False) -> pb.BackfillResponse:
        """Record executions for the instants of a job's schedule in [start_ms, end_ms] (past
        only) on the low-priority backfill lane; instants already recorded are left alone."""
        return self._run(_plans.backfill_job(name, start_ms, end_ms, dry_run=dry_run))

    def list_instants(
        self, job: str, *, start_ms: int = 0, end_ms: int = 0, limit: int = 1000, stale_ok: bool = False,
    ) -> list[pb.InstantRecord]:
        """Every nominal instant of a job in a window (default: the last 24 h), oldest first, with
        its disposition: ran, pending, skipped-overlap, skipped-deadline, paused, coalesced, ...
        At most ``limit`` (max 10,000); the pages (bounded in bytes) are followed to the end."""
        return list(self._iterate(_plans.list_instants(
            job, start_ms=start_ms, end_ms=end_ms, limit=limit, stale_ok=stale_ok
        )))

    def set_quota(self, key: str, limit: int) -> pb.Quota:
        """Cap running attempts of ``team:<name>``, ``pool:<name>`` or ``lane:backfill``; 0 removes."""
        return self._run(_plans.set_quota(key, limit))

    def list_quotas(self) -> list[pb.Quota]:
        """Every quota with its limit and the attempts holding it now."""
        return self._run(_plans.list_quotas())

    def forecast(self, *, start_ms: int = 0, end_ms: int = 0, by: str = "", top: int = 5,
                 stale_ok: bool = False) -> pb.ForecastResponse:
        """How many instants of the jobs' schedules fall due per second and per minute in
        [start_ms, end_ms) (default: the next 24 h; at most 7 days), computed by the cluster
        from its job table without firing anything: per group (``by`` "team" or "pool", "" for
        the whole table) the ``top`` busiest seconds and minutes, the schedules and jobs that
        make each, and the worker slots (``-1``: unknown) and quota that serve it (``over``: more
        runs due in one second than slots). Jobs of teams the caller may not read are left out."""
        return self._run(_plans.forecast(start_ms=start_ms, end_ms=end_ms, by=by, top=top, stale_ok=stale_ok))


class CalendarsMixin(BlockingTransport):
    """Calendars and blackout windows (``schedd_client.calendars``)."""

    def put_calendar(self, spec: kpb.CalendarSpec | Mapping[str, Any], *, create_only: bool = False
                     ) -> kpb.PutCalendarResponse:
        """Create or replace a calendar (a ``CalendarSpec``, see ``calendars.calendar_spec``, or a
        calendar document). Holidays and iCalendar events are expanded by the server; a change
        takes effect for instants not yet recorded (``note`` says so when jobs use it)."""
        return self._run(_calendars.put_calendar(spec, create_only=create_only))

    def get_calendar(self, name: str, *, stale_ok: bool = False) -> kpb.Calendar:
        """A calendar with its entries and the jobs that use it; raises ``NotFound`` if there is none."""
        return self._run(_calendars.get_calendar(name, stale_ok=stale_ok))

    def list_calendars(self, *, team: str = "", stale_ok: bool = False) -> list[kpb.Calendar]:
        """Every calendar the caller may read (a team's, and the cluster-wide ones), by name."""
        return self._run(_calendars.list_calendars(team=team, stale_ok=stale_ok))

    def delete_calendar(self, name: str) -> None:
        """Delete a calendar; refused with ``Conflict`` naming the jobs while any job uses it."""
        return self._run(_calendars.delete_calendar(name))

    def put_blackout(self, name: str, *, start_ms: int, end_ms: int, team: str = "",
                     labels: Mapping[str, str] | None = None, reason: str = "") -> kpb.Blackout:
        """A blackout window [start_ms, end_ms): jobs of ``team`` ("" = every team, needs operator)
        carrying every label of ``labels`` do not fire in it (their on_blackout: skip or defer)."""
        return self._run(_calendars.put_blackout(name, start_ms=start_ms, end_ms=end_ms, team=team,
                                                   labels=labels, reason=reason))

    def list_blackouts(self, *, team: str = "", stale_ok: bool = False) -> list[kpb.Blackout]:
        """Every blackout window the caller may read, by name."""
        return self._run(_calendars.list_blackouts(team=team, stale_ok=stale_ok))

    def delete_blackout(self, name: str) -> None:
        """Delete a blackout window; instants it already deferred keep their new due time."""
        return self._run(_calendars.delete_blackout(name))


class RunsMixin(BlockingTransport):
    """Executions: list, read and cancel them."""

    def list_executions(
        self, job: str = "", *, state: str = "", limit: int | None = None, oldest_first: bool = False,
        page_size: int = 500, stale_ok: bool = False,
    ) -> Iterator[pb.Execution]:
        """Executions of one job (or of all jobs), newest first unless ``oldest_first``, optionally in
        one ``state``; stops after ``limit`` items. Fetched lazily ``page_size`` at a time."""
        return self._iterate(_plans.list_executions(
            job, state=state, limit=limit, oldest_first=oldest_first, page_size=page_size, stale_ok=stale_ok
        ))

    def get_execution(self, id: str, *, stale_ok: bool = False) -> pb.Execution:
        """One execution with all its attempts; ``JOB@latest`` is the job's newest run."""
        job = _plans.latest_of(id)
        if job is not None:
            return self._run(_plans._latest_execution(job, stale_ok=stale_ok))
        return self._run(_plans.get_execution(id, stale_ok=stale_ok))

    def explain_run(self, id: str, *, stale_ok: bool = False) -> pb.Explanation:
        """Why the instant of execution ``id`` (``JOB@<RFC 3339 UTC>``) ran or did not, from the
        replicated state (the same answer on every node): an ``Explanation`` with its
        ``disposition`` (ran, skipped-overlap, paused, waiting-quota, not-an-instant, ...), a
        ``summary`` and ``findings`` in order (when and at which log index it was recorded, each
        attempt's claim with its worker and fencing token, outcomes, retries, the SLA verdict)."""
        return self._run(_plans.explain_run(id, stale_ok=stale_ok))

    def explain_instant(self, job: str, at_ms: int, *, stale_ok: bool = False) -> pb.Explanation:
        """``explain_run`` for instant ``at_ms`` of job ``job``, given by time: also an instant
        the schedule does not name (the nearest ones are given), one not due yet, or one before
        the job existed."""
        return self._run(_plans.explain_instant(job, at_ms, stale_ok=stale_ok))

    def retry_execution(self, id: str) -> pb.Execution:
        """A new attempt of a finished run (same id, a new fencing token); ``JOB@latest`` names
        the job's newest run. Refused (``NotFound``) for a run no longer held in the cluster's
        live tables, and (``Conflict``) for one still under way."""
        job = _plans.latest_of(id)
        if job is not None:
            id = self.get_execution(id).id
        return self._run(_plans.retry_execution(id))

    def watch_executions(self, job: str = "", *, state: str = "", limit: int = 50) -> Iterator[pb.WatchEvent]:
        """The newest ``limit`` runs (of ``job``, in ``state``) and then each change, as WatchEvents
        (a run that leaves the newest ``limit`` is "removed"), for as long as you iterate."""
        return _watching.stream(self, _watching.executions_call(job, state, limit))

    def cancel_execution(self, id: str) -> pb.Execution:
        """Cancel an execution: one not started yet ends CANCELLED at once; a running attempt is
        killed by its worker (process group) and then recorded CANCELLED."""
        return self._run(_plans.cancel_execution(id))

    def logs(
        self, run_id: str, *, attempt: int = 0, follow: bool = False, stream: str = "", tail: int = 0,
    ) -> Iterator[lpb.RunLogChunk]:
        """A run's full output as chunks (``schedd_client.run_logs``): ``output`` (``stream``,
        ``data``), ``dropped``, ``notice`` and a last ``end`` with the attempt's state. ``attempt``
        (default the latest), ``stream`` ``"stdout"`` or ``"stderr"`` (default both, in order),
        ``tail`` the last N lines; ``follow=True`` yields while the attempt runs and ends with it."""
        return _run_logs.read_logs(self, _run_logs.request(
            run_id, attempt=attempt, follow=follow, stream=stream, tail=tail))


class DagsMixin(BlockingTransport):
    """DAGs (``schedd_client.dags``)."""

    def put_dag(self, spec: dpb.DagSpec | Mapping[str, Any]) -> dpb.PutDagResponse:
        """Create or replace a DAG (a ``DagSpec`` or a DAG document). The server refuses a cycle
        (naming it), an unknown upstream or a duplicate task with ``ValidationError``; nothing is
        committed then."""
        return self._run(_dags.put_dag(spec))

    def get_dag(self, name: str, *, stale_ok: bool = False) -> dpb.Dag:
        """A DAG: its spec, version, next scheduled run and last run."""
        return self._run(_dags.get_dag(name, stale_ok=stale_ok))

    def list_dags(self, *, stale_ok: bool = False) -> dpb.ListDagsResponse:
        """Every DAG, by name."""
        return self._run(_dags.list_dags(stale_ok=stale_ok))

    def delete_dag(self, name: str) -> None:
        """Delete a DAG with its runs and its tasks' history; raises ``NotFound`` if there is none."""
        return self._run(_dags.delete_dag(name))

    def run_dag(
        self, name: str, *, params: Mapping[str, str] | None = None, wait: bool = False, timeout: float | None = None,
    ) -> dpb.DagRun:
        """Start a run of a DAG now (logical time = now); returns the new run. ``params`` reach
        every task. With ``wait``, returns the run once it has ended (``WaitTimeout`` after ``timeout`` s)."""
        run = self._run(_dags.run_dag(name, params=params))
        if not wait:
            return run
        return _waiting.wait_until(lambda: self._run(_dags.get_dag_run(name, run.run_id)), _waiting.dag_run_ended,
                                   timeout, f"DAG run {run.run_id}")

    def watch_dag_run(self, name: str, run_id: str = "") -> Iterator[dpb.DagRun]:
        """The run (by its id or time part; "" = the newest now) and again each time it changes,
        for as long as you iterate."""
        return _watching.stream(self, _watching.dag_run_call(name, run_id))

    def clear_dag_task(self, name: str, run_id: str, task: str, *, downstream: bool = False) -> dpb.DagRun:
        """Run a finished task of a run again (and, with ``downstream``, every task that depends
        on it), like Airflow's clear; returns the run. ``run_id`` "" is the newest run."""
        return self._run(_dags.clear_dag_task(name, run_id, task, downstream=downstream))

    def list_dag_runs(self, name: str, *, limit: int = 20, stale_ok: bool = False) -> dpb.ListDagRunsResponse:
        """The newest ``limit`` runs of a DAG, newest first, each with its tasks' states."""
        return self._run(_dags.list_dag_runs(name, limit=limit, stale_ok=stale_ok))

    def get_dag_run(self, name: str, run_id: str = "", *, stale_ok: bool = False) -> dpb.DagRun:
        """One run of a DAG (by its id, or the time part of it; "" = the newest), with every task's
        state, attempts, times and reason."""
        return self._run(_dags.get_dag_run(name, run_id, stale_ok=stale_ok))


class AclMixin(BlockingTransport):
    """Access control and the audit trail (``schedd_client.acl``)."""

    def acl_bootstrap(self) -> apb.TokenSecret:
        """The first management token (once per cluster; ``AlreadyExists`` afterwards)."""
        return self._run(_acl.acl_bootstrap())

    def acl_whoami(self) -> apb.WhoAmIResponse:
        """The principal this client's token authenticates as, with its grants."""
        return self._run(_acl.acl_whoami())

    def login_link(self, *, url_only: bool = False) -> str:
        """A one-time link that logs a browser in to the web dashboard as this client's token:
        ``https://<node>/login#code=<code>``, on the dashboard of the node that answered (it
        minted the code and alone can redeem it), usable once within a minute. ``url_only``:
        only that dashboard's address, no code minted. A token is needed: a client with only a
        certificate, or a worker token, gets ``PermissionDenied``."""
        return self._run(_acl.login_link(url_only=url_only))

    def acl_put_policy(self, name: str, rules: Mapping[str, Sequence[str]], description: str = "") -> apb.AclPolicy:
        """Create or replace a policy: ``rules`` maps a resource pattern (``cluster``,
        ``team:<glob>``, ``pool:<glob>``, ``*``) to the capabilities it grants."""
        return self._run(_acl.acl_put_policy(name, rules, description))

    def acl_get_policy(self, name: str) -> apb.AclPolicy:
        return self._run(_acl.acl_get_policy(name))

    def acl_list_policies(self) -> apb.ListPoliciesResponse:
        return self._run(_acl.acl_list_policies())

    def acl_delete_policy(self, name: str) -> apb.AclDeleted:
        return self._run(_acl.acl_delete_policy(name))

    def acl_put_role(self, name: str, policies: Sequence[str], description: str = "") -> apb.AclRole:
        """Create or replace a role: a named group of policies (every one must exist)."""
        return self._run(_acl.acl_put_role(name, policies, description))

    def acl_get_role(self, name: str) -> apb.AclRole:
        return self._run(_acl.acl_get_role(name))

    def acl_list_roles(self) -> apb.ListRolesResponse:
        return self._run(_acl.acl_list_roles())

    def acl_delete_role(self, name: str) -> apb.AclDeleted:
        return self._run(_acl.acl_delete_role(name))

    def acl_create_token(
        self, *, roles: Sequence[str] = (), policies: Sequence[str] = (), kind: str = "client", ttl_ms: int = 0,
        max_slots: int = 0, description: str = "",
    ) -> apb.TokenSecret:
        """A new token bound to ``roles`` and ``policies``; ``kind="worker"`` with ``max_slots`` for a
        worker. The result's ``secret`` (``<accessor>.<secret>``) is shown this once."""
        return self._run(_acl.acl_create_token(
            roles=roles, policies=policies, kind=kind, ttl_ms=ttl_ms, max_slots=max_slots,
            description=description
        ))

    def acl_get_token(self, accessor: str) -> apb.AclToken:
        return self._run(_acl.acl_get_token(accessor))

    def acl_list_tokens(self) -> apb.ListTokensResponse:
        return self._run(_acl.acl_list_tokens())

    def acl_delete_token(self, accessor: str) -> apb.AclDeleted:
        """Revoke a token: every node refuses it once the deletion is applied there."""
        return self._run(_acl.acl_delete_token(accessor))

    def acl_set_anonymous(self, policy: str) -> apb.SetAnonymousResponse:
        """What calls without a credential get ("" refuses them: the default)."""
        return self._run(_acl.acl_set_anonymous(policy))

    def audit_list(
        self, *, since_ms: int = 0, principal: str = "", target: str = "", action: str = "", outcome: str = "",
        limit: int = 0, address: str | None = None, until_ms: int = 0, newest_first: bool = False,
        before_seq: int = 0, shard: int | None = None,
    ) -> apb.ListAuditResponse:
        """Audit records matching every filter given, oldest first, from one node's replica
        (``address``: that node; default: any). ``until_ms``: before that time only;
        ``newest_first``: newest first, so ``limit`` keeps the newest; ``before_seq``: records
        with a lower seq only (the next page: the last page's lowest seq). A sharded cluster:
        ``shard`` lists that shard group's trail alone (seq and chain are per group); without
        it, every group's records by time, each with its ``shard``."""
        return self._run(_acl.audit_list(
            since_ms=since_ms, principal=principal, target=target, action=action, outcome=outcome,
            limit=limit, address=address, until_ms=until_ms, newest_first=newest_first, before_seq=before_seq,
            shard=shard,
        ))

    def audit_verify(self, *, address: str | None = None) -> apb.VerifyAuditResponse:
        """Whether one node's replicated trail verifies (its hash chain, from its anchor)."""
        return self._run(_acl.audit_verify(address=address))

    def audit_configure(
        self, *, max_age_ms: int, max_records: int, denied_burst: int = 20, denied_refill_ms: int = 3000,
    ) -> apb.AuditConfig:
        """Retention (by age and count; 0 = no bound) and the per-principal limit on denied records."""
        return self._run(_acl.audit_configure(
            max_age_ms=max_age_ms, max_records=max_records, denied_burst=denied_burst,
            denied_refill_ms=denied_refill_ms
        ))

    def audit_note(self, note: str) -> apb.AuditNoteResponse:
        """Record an operator's note in the audit trail ("draining n2 for the upgrade"). Needs
        cluster feature level 2: refused with FAILED_PRECONDITION until every node runs a build that
        supports it and the leader has raised the level (``schedctl cluster status`` shows it)."""
        return self._run(_acl.audit_note(note))


class ClusterMixin(BlockingTransport):
    """The cluster: its status, its workers, its membership (``schedd_client.membership``) and its
    snapshots (``schedd_client.backup``)."""

    def list_workers(self) -> pb.ListWorkersResponse:
        """The workers connected to the leader: slots, pool, labels and what each runs."""
        return self._run(_plans.list_workers())

    def watch_workers(self) -> Iterator[pb.WatchEvent]:
        """The leader's workers and then each change (connected, draining, running; heartbeats are
        not changes), as WatchEvents, for as long as you iterate."""
        return _watching.stream(self, _watching.workers_call())

    def cluster_status(self, *, stale_ok: bool = False, with_digest: bool = False) -> pb.ClusterStatus:
        """Leader, term, commit index and every node's status, as seen by the node that answers.
        ``with_digest``: each node also hashes its whole state (``state_digest`` at ``digest_index``;
        equal digests at equal indexes mean equal replicas), which costs O(state) on every node."""
        return self._run(_plans.cluster_status(stale_ok=stale_ok, with_digest=with_digest))

    def leader_changes(self, *, stale_ok: bool = False) -> list[_plans.LeaderChange]:
        """The cluster's recent leader changes, newest first: each node's record of the terms it
        led (node, term, since_ms, until_ms; 0 while it still leads), since that node started."""
        return self._run(_plans.leader_changes(stale_ok=stale_ok))

    def list_shards(self) -> pb.ListShardsResponse:
        """Every shard group of the cluster (one for an unsharded cluster) as the answering node's
        replica of it sees it: leader, replicas, term, jobs and that replica's lag."""
        return self._run(_plans.list_shards())

    def move_shard(self, shard: int, *, from_node: str, to_node: str,
                   timeout: float = _plans.MOVE_TIMEOUT_S) -> pb.MoveShardResponse:
        """Move one replica of ``shard`` from node ``from_node`` to node ``to_node`` (a node of the
        cluster: a new one joins first): ``to_node`` joins the shard's group and catches up, then
        ``from_node`` leaves it and drops its replica. Returns when done (within ``timeout``);
        asking again after a failure part-way resumes the move."""
        return self._run(_plans.move_shard(shard, from_node=from_node, to_node=to_node, timeout=timeout))

    def node_info(self, address: str, *, with_digest: bool = False) -> pb.NodeStatus:
        """The status of the node at ``address`` itself: no failover to another node."""
        return self._run(_plans.node_info(address, with_digest=with_digest))

    def add_node(
        self, id: str, *, raft_address: str, grpc_address: str, wait_caught_up_s: float = 0.0,
    ) -> mpb.MembershipChangeResponse:
        """Add a voter: its id and addresses are recorded, then pysyncobj's add is committed (the
        node votes from then on: start it right after, with the cluster's secret and these
        addresses). ``wait_caught_up_s`` > 0 also waits that long for it to catch up."""
        return self._run(_membership.add_node(
            id, raft_address=raft_address, grpc_address=grpc_address, wait_caught_up_s=wait_caught_up_s
        ))

    def remove_node(self, id: str) -> mpb.MembershipChangeResponse:
        """Remove a voter (the leader hands its leadership over first); stop the node afterwards."""
        return self._run(_membership.remove_node(id))

    def save_snapshot(self, path: str | os.PathLike[str], *, timeout: float | None = None,
                      history: bool = False) -> SnapshotMeta:
        """Save a consistent snapshot of the cluster to ``path``; returns its SnapshotMeta
        (``schedd_client.backup.save_snapshot``)."""
        return _backup.save_snapshot(self, path, timeout=timeout or _backup.SAVE_TIMEOUT_S, history=history)


class AsyncJobsMixin(AsyncTransport):
    """Jobs: create, change, fire and list them; quotas. Awaited."""

    async def put_job(self, spec: pb.JobSpec, *, create_only: bool = False, expected_version: int = 0) -> pb.Job:
        """Create or update a job (build ``spec`` with ``job_spec`` or ``spec_from_dict``);
        returns the job as read after the write.

        ``create_only=True`` raises ``AlreadyExists`` instead of updating; ``expected_version=N``
        updates only if the job is at version N, else raises ``Conflict``. ``put_job_result``
        is the same call answering whether it created the job and the version it made.
        """
        return await self._run(_plans.put_job(spec, create_only=create_only, expected_version=expected_version))

    async def put_job_result(self, spec: pb.JobSpec, *, create_only: bool = False,
                             expected_version: int = 0) -> pb.PutJobResponse:
        """``put_job``, answering the write itself: ``created``, ``version`` (the version THIS
        write made) and ``job`` (read after the write: a later writer's version may show).
        """
        return await self._run(_plans.put_job_result(spec, create_only=create_only,
                                                     expected_version=expected_version))

    async def put_jobs(self, specs: Iterable[pb.JobSpec], *, create_only: bool = False) -> pb.PutJobsResponse:
        """Create or update many jobs in one batch; returns the created and updated counts.

        All or nothing: every job commits, or none does (also when the answer is lost: retried with
        the same request id, it commits once). A refused job is named in the error, whose
        ``position`` is its 1-based place in ``specs``. ``create_only=True`` refuses the whole batch
        with ``AlreadyExists`` if any of its jobs exists. The node caps a call
        (``limits.max_jobs_per_call``, ``limits.max_bytes_per_call``: ``ResourceExhausted``); send
        more than that in several calls, each one all-or-nothing. In a sharded cluster a batch whose
        jobs live in several shards is checked whole first (a refused job commits nothing), then
        committed shard by shard, all or nothing within each shard.
        """
        return await self._run(_plans.put_jobs(specs, create_only=create_only))

    async def get_job(self, name: str, *, upcoming: int = 5, stale_ok: bool = False) -> pb.Job:
        """One job, with its next ``upcoming`` fire times (max 100) in ``upcoming_ms``."""
        return await self._run(_plans.get_job(name, upcoming=upcoming, stale_ok=stale_ok))

    async def diff_jobs(self, specs: Iterable[pb.JobSpec], *, stale_ok: bool = False) -> list[pb.JobChange]:
        """What ``put_jobs(specs)`` would change, job by job, committing nothing: one
        ``JobChange`` per spec (``action`` "create", "update" or "unchanged"; ``current`` (of an
        update) and ``proposed`` (of a create or an update) as the server stores them, secret
        values masked). The same checks and caps
        as ``put_jobs``: a bad spec raises ``ValidationError`` with its ``position``.
        ``job_sync.field_changes(c.current, c.proposed)`` lists the fields that differ.
        """
        return await self._run(_plans.diff_jobs(specs, stale_ok=stale_ok))

    async def apply_jobs(self, specs: Iterable[pb.JobSpec], *, dry_run: bool = False,
                         batch_jobs: int = _job_sync.DEFAULT_BATCH_JOBS,
                         progress: _job_sync.Progress | None = None) -> _job_sync.ApplyReport:
        """Create or update ``specs`` so the cluster holds them, leaving unchanged jobs untouched
        (no new version); returns a ``job_sync.ApplyReport`` (created, updated, unchanged names
        and each job's field changes). Any number of jobs: they go in calls of at most
        ``batch_jobs`` (halved when a node's ``[limits]`` refuse a call as too large). Every batch
        is checked (``diff_jobs``) before any is written, so a bad spec anywhere commits nothing;
        each write batch is all or nothing. ``dry_run=True`` only checks. ``progress(stage,
        done, total)`` is called after each call (stage "check" or "write").
        """
        steps = _job_sync.Driver(_job_sync.apply_steps(list(specs), dry_run=dry_run, batch_jobs=batch_jobs,
                                                       progress=progress, shards=self._shards))
        while (plan := steps.next()) is not None:
            try:
                steps.answer(await self._run(plan))
            except SchedError as err:
                steps.fail(err)
        return steps.report

    def list_jobs(
        self, *, team: str = "", state: str = "", page_size: int = 500, full: bool = False, stale_ok: bool = False,
        name_contains: str = "", pool: str = "", recent: int = 0,
    ) -> AsyncIterator[pb.Job]:
        """Every job, optionally of one ``team``, in one ``state`` ("active" or "paused"), whose
        name contains ``name_contains`` (any case) and of one worker ``pool``, fetched lazily, at
        most ``page_size`` per page (pages are also bounded in bytes).

        Jobs come as summaries (``job.summary`` is set): the spec holds name, team, schedule,
        timezone, pool, priority, paused and a short description; ``get_job`` has the rest, or pass
        ``full=True`` for whole specs. ``recent`` (0-20): each job's ``recent`` holds the outcomes of
        its last that many runs, oldest first.
        """
        return self._iterate(_plans.list_jobs(
            team=team, state=state, page_size=page_size, full=full, stale_ok=stale_ok, name_contains=name_contains,
            pool=pool, recent=recent,
        ))

    def watch_jobs(self, *, team: str = "", state: str = "", limit: int = 100) -> AsyncIterator[pb.WatchEvent]:
        """The jobs (of ``team``, in ``state``; at most ``limit``, by name) and then each change, as
        WatchEvents (added, changed, removed; one "synced" after the listing), for as long as
        you iterate; served from the answering node's applied state."""
        return _watching.stream_async(self, _watching.jobs_call(team, state, limit))

    async def pause_job(self, name: str) -> pb.Job:
        """Stop firing a job; returns it as paused."""
        return await self._run(_plans.pause_job(name))

    async def resume_job(self, name: str, *, catch_up: bool = False) -> pb.Job:
        """Fire a paused job again; returns it. The instants missed while paused are recorded
        "paused" and not run, unless ``catch_up``: then the job's catch-up policy decides."""
        return await self._run(_plans.resume_job(name, catch_up=catch_up))

    async def delete_job(self, name: str) -> None:
        """Delete a job; raises ``NotFound`` if there is none."""
        return await self._run(_plans.delete_job(name))

    async def trigger_job(
        self, name: str, *, force: bool = False, params: Mapping[str, str] | None = None, wait: bool = False,
        timeout: float | None = None,
    ) -> pb.Execution:
        """Fire a job now, outside its schedule; returns the new execution. It obeys the job's
        overlap policy (skipped or queued behind an active run) unless ``force``. ``params``
        are the run's parameters (a shell job sees ``SCHEDD_PARAM_<NAME>``). With ``wait``,
        returns the run once it has ended (``wait_for``: ``WaitTimeout`` after ``timeout`` s)."""
        run = await self._run(_plans.trigger_job(name, force=force, params=params))
        return await self.wait_for(run.id, timeout) if wait else run

    async def wait_for(self, run_id: str, timeout: float | None = None) -> pb.Execution:
        """The run once it has ended (SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, SKIPPED, LOST),
        read again until then; raises ``WaitTimeout`` (the run goes on) after ``timeout`` seconds."""
        return await _waiting.async_wait_until(lambda: self._run(_plans.get_execution(run_id)),
                                               _waiting.run_ended, timeout, f"run {run_id}")

    async def backfill_job(
        self, name: str, start_ms: int, end_ms: int, *, dry_run: bool = False,
    ) -> pb.BackfillResponse:
        """Record executions for the instants of a job's schedule in [start_ms, end_ms] (past
        only) on the low-priority backfill lane; instants already recorded are left alone."""
        return await self._run(_plans.backfill_job(name, start_ms, end_ms, dry_run=dry_run))

    async def list_instants(
        self, job: str, *, start_ms: int = 0, end_ms: int = 0, limit: int = 1000, stale_ok: bool = False,
    ) -> list[pb.InstantRecord]:
        """Every nominal instant of a job in a window (default: the last 24 h), oldest first, with
        its disposition: ran, pending, skipped-overlap, skipped-deadline, paused, coalesced, ...
        At most ``limit`` (max 10,000); the pages (bounded in bytes) are followed to the end."""
        return [item async for item in self._iterate(_plans.list_instants(
            job, start_ms=start_ms, end_ms=end_ms, limit=limit, stale_ok=stale_ok
        ))]

    async def set_quota(self, key: str, limit: int) -> pb.Quota:
        """Cap running attempts of ``team:<name>``, ``pool:<name>`` or ``lane:backfill``; 0 removes."""
        return await self._run(_plans.set_quota(key, limit))

    async def list_quotas(self) -> list[pb.Quota]:
        """Every quota with its limit and the attempts holding it now."""
        return await self._run(_plans.list_quotas())

    async def forecast(self, *, start_ms: int = 0, end_ms: int = 0, by: str = "", top: int = 5,
                       stale_ok: bool = False) -> pb.ForecastResponse:
        """How many instants of the jobs' schedules fall due per second and per minute in
        [start_ms, end_ms) (default: the next 24 h; at most 7 days), computed by the cluster
        from its job table without firing anything: per group (``by`` "team" or "pool", "" for
        the whole table) the ``top`` busiest seconds and minutes, the schedules and jobs that
        make each, and the worker slots (``-1``: unknown) and quota that serve it (``over``: more
        runs due in one second than slots). Jobs of teams the caller may not read are left out."""
        return await self._run(_plans.forecast(start_ms=start_ms, end_ms=end_ms, by=by, top=top,
                                               stale_ok=stale_ok))


class AsyncCalendarsMixin(AsyncTransport):
    """Calendars and blackout windows (``schedd_client.calendars``). Awaited."""

    async def put_calendar(self, spec: kpb.CalendarSpec | Mapping[str, Any], *, create_only: bool = False
                     ) -> kpb.PutCalendarResponse:
        """Create or replace a calendar (a ``CalendarSpec``, see ``calendars.calendar_spec``, or a
        calendar document). Holidays and iCalendar events are expanded by the server; a change
        takes effect for instants not yet recorded (``note`` says so when jobs use it)."""
        return await self._run(_calendars.put_calendar(spec, create_only=create_only))

    async def get_calendar(self, name: str, *, stale_ok: bool = False) -> kpb.Calendar:
        """A calendar with its entries and the jobs that use it; raises ``NotFound`` if there is none."""
        return await self._run(_calendars.get_calendar(name, stale_ok=stale_ok))

    async def list_calendars(self, *, team: str = "", stale_ok: bool = False) -> list[kpb.Calendar]:
        """Every calendar the caller may read (a team's, and the cluster-wide ones), by name."""
        return await self._run(_calendars.list_calendars(team=team, stale_ok=stale_ok))

    async def delete_calendar(self, name: str) -> None:
        """Delete a calendar; refused with ``Conflict`` naming the jobs while any job uses it."""
        return await self._run(_calendars.delete_calendar(name))

    async def put_blackout(self, name: str, *, start_ms: int, end_ms: int, team: str = "",
                     labels: Mapping[str, str] | None = None, reason: str = "") -> kpb.Blackout:
        """A blackout window [start_ms, end_ms): jobs of ``team`` ("" = every team, needs operator)
        carrying every label of ``labels`` do not fire in it (their on_blackout: skip or defer)."""
        return await self._run(_calendars.put_blackout(name, start_ms=start_ms, end_ms=end_ms, team=team,
                                                   labels=labels, reason=reason))

    async def list_blackouts(self, *, team: str = "", stale_ok: bool = False) -> list[kpb.Blackout]:
        """Every blackout window the caller may read, by name."""
        return await self._run(_calendars.list_blackouts(team=team, stale_ok=stale_ok))

    async def delete_blackout(self, name: str) -> None:
        """Delete a blackout window; instants it already deferred keep their new due time."""
        return await self._run(_calendars.delete_blackout(name))


class AsyncRunsMixin(AsyncTransport):
    """Executions: list, read and cancel them. Awaited."""

    def list_executions(
        self, job: str = "", *, state: str = "", limit: int | None = None, oldest_first: bool = False,
        page_size: int = 500, stale_ok: bool = False,
    ) -> AsyncIterator[pb.Execution]:
        """Executions of one job (or of all jobs), newest first unless ``oldest_first``, optionally in
        one ``state``; stops after ``limit`` items. Fetched lazily ``page_size`` at a time."""
        return self._iterate(_plans.list_executions(
            job, state=state, limit=limit, oldest_first=oldest_first, page_size=page_size, stale_ok=stale_ok
        ))

    async def get_execution(self, id: str, *, stale_ok: bool = False) -> pb.Execution:
        """One execution with all its attempts; ``JOB@latest`` is the job's newest run."""
        job = _plans.latest_of(id)
        if job is not None:
            return await self._run(_plans._latest_execution(job, stale_ok=stale_ok))
        return await self._run(_plans.get_execution(id, stale_ok=stale_ok))

    async def explain_run(self, id: str, *, stale_ok: bool = False) -> pb.Explanation:
        """Why the instant of execution ``id`` (``JOB@<RFC 3339 UTC>``) ran or did not, from the
        replicated state (the same answer on every node): an ``Explanation`` with its
        ``disposition`` (ran, skipped-overlap, paused, waiting-quota, not-an-instant, ...), a
        ``summary`` and ``findings`` in order (when and at which log index it was recorded, each
        attempt's claim with its worker and fencing token, outcomes, retries, the SLA verdict)."""
        return await self._run(_plans.explain_run(id, stale_ok=stale_ok))

    async def explain_instant(self, job: str, at_ms: int, *, stale_ok: bool = False) -> pb.Explanation:
        """``explain_run`` for instant ``at_ms`` of job ``job``, given by time: also an instant
        the schedule does not name (the nearest ones are given), one not due yet, or one before
        the job existed."""
        return await self._run(_plans.explain_instant(job, at_ms, stale_ok=stale_ok))

    async def retry_execution(self, id: str) -> pb.Execution:
        """A new attempt of a finished run (same id, a new fencing token); ``JOB@latest`` names
        the job's newest run. Refused (``NotFound``) for a run no longer held in the cluster's
        live tables, and (``Conflict``) for one still under way."""
        job = _plans.latest_of(id)
        if job is not None:
            id = (await self.get_execution(id)).id
        return await self._run(_plans.retry_execution(id))

    def watch_executions(self, job: str = "", *, state: str = "", limit: int = 50) -> AsyncIterator[pb.WatchEvent]:
        """The newest ``limit`` runs (of ``job``, in ``state``) and then each change, as WatchEvents
        (a run that leaves the newest ``limit`` is "removed"), for as long as you iterate."""
        return _watching.stream_async(self, _watching.executions_call(job, state, limit))

    async def cancel_execution(self, id: str) -> pb.Execution:
        """Cancel an execution: one not started yet ends CANCELLED at once; a running attempt is
        killed by its worker (process group) and then recorded CANCELLED."""
        return await self._run(_plans.cancel_execution(id))

    def logs(
        self, run_id: str, *, attempt: int = 0, follow: bool = False, stream: str = "", tail: int = 0,
    ) -> AsyncIterator[lpb.RunLogChunk]:
        """A run's full output as chunks (``schedd_client.run_logs``): ``output`` (``stream``,
        ``data``), ``dropped``, ``notice`` and a last ``end`` with the attempt's state. ``attempt``
        (default the latest), ``stream`` ``"stdout"`` or ``"stderr"`` (default both, in order),
        ``tail`` the last N lines; ``follow=True`` yields while the attempt runs and ends with it."""
        return _run_logs.read_logs_async(self, _run_logs.request(
            run_id, attempt=attempt, follow=follow, stream=stream, tail=tail))


class AsyncDagsMixin(AsyncTransport):
    """DAGs (``schedd_client.dags``). Awaited."""

    async def put_dag(self, spec: dpb.DagSpec | Mapping[str, Any]) -> dpb.PutDagResponse:
        """Create or replace a DAG (a ``DagSpec`` or a DAG document). The server refuses a cycle
        (naming it), an unknown upstream or a duplicate task with ``ValidationError``; nothing is
        committed then."""
        return await self._run(_dags.put_dag(spec))

    async def get_dag(self, name: str, *, stale_ok: bool = False) -> dpb.Dag:
        """A DAG: its spec, version, next scheduled run and last run."""
        return await self._run(_dags.get_dag(name, stale_ok=stale_ok))

    async def list_dags(self, *, stale_ok: bool = False) -> dpb.ListDagsResponse:
        """Every DAG, by name."""
        return await self._run(_dags.list_dags(stale_ok=stale_ok))

    async def delete_dag(self, name: str) -> None:
        """Delete a DAG with its runs and its tasks' history; raises ``NotFound`` if there is none."""
        return await self._run(_dags.delete_dag(name))

    async def run_dag(
        self, name: str, *, params: Mapping[str, str] | None = None, wait: bool = False, timeout: float | None = None,
    ) -> dpb.DagRun:
        """Start a run of a DAG now (logical time = now); returns the new run. ``params`` reach
        every task. With ``wait``, returns the run once it has ended (``WaitTimeout`` after ``timeout`` s)."""
        run = await self._run(_dags.run_dag(name, params=params))
        if not wait:
            return run
        return await _waiting.async_wait_until(lambda: self._run(_dags.get_dag_run(name, run.run_id)),
                                               _waiting.dag_run_ended, timeout, f"DAG run {run.run_id}")

    def watch_dag_run(self, name: str, run_id: str = "") -> AsyncIterator[dpb.DagRun]:
        """The run (by its id or time part; "" = the newest now) and again each time it changes,
        for as long as you iterate."""
        return _watching.stream_async(self, _watching.dag_run_call(name, run_id))

    async def clear_dag_task(self, name: str, run_id: str, task: str, *, downstream: bool = False) -> dpb.DagRun:
        """Run a finished task of a run again (and, with ``downstream``, every task that depends
        on it), like Airflow's clear; returns the run. ``run_id`` "" is the newest run."""
        return await self._run(_dags.clear_dag_task(name, run_id, task, downstream=downstream))

    async def list_dag_runs(self, name: str, *, limit: int = 20, stale_ok: bool = False) -> dpb.ListDagRunsResponse:
        """The newest ``limit`` runs of a DAG, newest first, each with its tasks' states."""
        return await self._run(_dags.list_dag_runs(name, limit=limit, stale_ok=stale_ok))

    async def get_dag_run(self, name: str, run_id: str = "", *, stale_ok: bool = False) -> dpb.DagRun:
        """One run of a DAG (by its id, or the time part of it; "" = the newest), with every task's
        state, attempts, times and reason."""
        return await self._run(_dags.get_dag_run(name, run_id, stale_ok=stale_ok))


class AsyncAclMixin(AsyncTransport):
    """Access control and the audit trail (``schedd_client.acl``). Awaited."""

    async def acl_bootstrap(self) -> apb.TokenSecret:
        """The first management token (once per cluster; ``AlreadyExists`` afterwards)."""
        return await self._run(_acl.acl_bootstrap())

    async def acl_whoami(self) -> apb.WhoAmIResponse:
        """The principal this client's token authenticates as, with its grants."""
        return await self._run(_acl.acl_whoami())

    async def login_link(self, *, url_only: bool = False) -> str:
        """A one-time link that logs a browser in to the web dashboard as this client's token:
        ``https://<node>/login#code=<code>``, on the dashboard of the node that answered (it
        minted the code and alone can redeem it), usable once within a minute. ``url_only``:
        only that dashboard's address, no code minted. A token is needed: a client with only a
        certificate, or a worker token, gets ``PermissionDenied``."""
        return await self._run(_acl.login_link(url_only=url_only))

    async def acl_put_policy(
        self, name: str, rules: Mapping[str, Sequence[str]], description: str = "",
    ) -> apb.AclPolicy:
        """Create or replace a policy: ``rules`` maps a resource pattern (``cluster``,
        ``team:<glob>``, ``pool:<glob>``, ``*``) to the capabilities it grants."""
        return await self._run(_acl.acl_put_policy(name, rules, description))

    async def acl_get_policy(self, name: str) -> apb.AclPolicy:
        return await self._run(_acl.acl_get_policy(name))

    async def acl_list_policies(self) -> apb.ListPoliciesResponse:
        return await self._run(_acl.acl_list_policies())

    async def acl_delete_policy(self, name: str) -> apb.AclDeleted:
        return await self._run(_acl.acl_delete_policy(name))

    async def acl_put_role(self, name: str, policies: Sequence[str], description: str = "") -> apb.AclRole:
        """Create or replace a role: a named group of policies (every one must exist)."""
        return await self._run(_acl.acl_put_role(name, policies, description))

    async def acl_get_role(self, name: str) -> apb.AclRole:
        return await self._run(_acl.acl_get_role(name))

    async def acl_list_roles(self) -> apb.ListRolesResponse:
        return await self._run(_acl.acl_list_roles())

    async def acl_delete_role(self, name: str) -> apb.AclDeleted:
        return await self._run(_acl.acl_delete_role(name))

    async def acl_create_token(
        self, *, roles: Sequence[str] = (), policies: Sequence[str] = (), kind: str = "client", ttl_ms: int = 0,
        max_slots: int = 0, description: str = "",
    ) -> apb.TokenSecret:
        """A new token bound to ``roles`` and ``policies``; ``kind="worker"`` with ``max_slots`` for a
        worker. The result's ``secret`` (``<accessor>.<secret>``) is shown this once."""
        return await self._run(_acl.acl_create_token(
            roles=roles, policies=policies, kind=kind, ttl_ms=ttl_ms, max_slots=max_slots,
            description=description
        ))

    async def acl_get_token(self, accessor: str) -> apb.AclToken:
        return await self._run(_acl.acl_get_token(accessor))

    async def acl_list_tokens(self) -> apb.ListTokensResponse:
        return await self._run(_acl.acl_list_tokens())

    async def acl_delete_token(self, accessor: str) -> apb.AclDeleted:
        """Revoke a token: every node refuses it once the deletion is applied there."""
        return await self._run(_acl.acl_delete_token(accessor))

    async def acl_set_anonymous(self, policy: str) -> apb.SetAnonymousResponse:
        """What calls without a credential get ("" refuses them: the default)."""
        return await self._run(_acl.acl_set_anonymous(policy))

    async def audit_list(
        self, *, since_ms: int = 0, principal: str = "", target: str = "", action: str = "", outcome: str = "",
        limit: int = 0, address: str | None = None, until_ms: int = 0, newest_first: bool = False,
        before_seq: int = 0, shard: int | None = None,
    ) -> apb.ListAuditResponse:
        """Audit records matching every filter given, oldest first, from one node's replica
        (``address``: that node; default: any). ``until_ms``: before that time only;
        ``newest_first``: newest first, so ``limit`` keeps the newest; ``before_seq``: records
        with a lower seq only (the next page: the last page's lowest seq). A sharded cluster:
        ``shard`` lists that shard group's trail alone (seq and chain are per group); without
        it, every group's records by time, each with its ``shard``."""
        return await self._run(_acl.audit_list(
            since_ms=since_ms, principal=principal, target=target, action=action, outcome=outcome,
            limit=limit, address=address, until_ms=until_ms, newest_first=newest_first, before_seq=before_seq,
            shard=shard,
        ))

    async def audit_verify(self, *, address: str | None = None) -> apb.VerifyAuditResponse:
        """Whether one node's replicated trail verifies (its hash chain, from its anchor)."""
        return await self._run(_acl.audit_verify(address=address))

    async def audit_configure(
        self, *, max_age_ms: int, max_records: int, denied_burst: int = 20, denied_refill_ms: int = 3000,
    ) -> apb.AuditConfig:
        """Retention (by age and count; 0 = no bound) and the per-principal limit on denied records."""
        return await self._run(_acl.audit_configure(
            max_age_ms=max_age_ms, max_records=max_records, denied_burst=denied_burst,
            denied_refill_ms=denied_refill_ms
        ))

    async def audit_note(self, note: str) -> apb.AuditNoteResponse:
        """Record an operator's note in the audit trail ("draining n2 for the upgrade"). Needs
        cluster feature level 2: refused with FAILED_PRECONDITION until every node runs a build that
        supports it and the leader has raised the level (``schedctl cluster status`` shows it)."""
        return await self._run(_acl.audit_note(note))


class AsyncClusterMixin(AsyncTransport):
    """The cluster: its status, its workers, its membership (``schedd_client.membership``) and its
    snapshots (``schedd_client.backup``). Awaited."""

    async def list_workers(self) -> pb.ListWorkersResponse:
        """The workers connected to the leader: slots, pool, labels and what each runs."""
        return await self._run(_plans.list_workers())

    def watch_workers(self) -> AsyncIterator[pb.WatchEvent]:
        """The leader's workers and then each change (connected, draining, running; heartbeats are
        not changes), as WatchEvents, for as long as you iterate."""
        return _watching.stream_async(self, _watching.workers_call())

    async def cluster_status(self, *, stale_ok: bool = False, with_digest: bool = False) -> pb.ClusterStatus:
        """Leader, term, commit index and every node's status, as seen by the node that answers.
        ``with_digest``: each node also hashes its whole state (``state_digest`` at ``digest_index``;
        equal digests at equal indexes mean equal replicas), which costs O(state) on every node."""
        return await self._run(_plans.cluster_status(stale_ok=stale_ok, with_digest=with_digest))

    async def leader_changes(self, *, stale_ok: bool = False) -> list[_plans.LeaderChange]:
        """The cluster's recent leader changes, newest first: each node's record of the terms it
        led (node, term, since_ms, until_ms; 0 while it still leads), since that node started."""
        return await self._run(_plans.leader_changes(stale_ok=stale_ok))

    async def list_shards(self) -> pb.ListShardsResponse:
        """Every shard group of the cluster (one for an unsharded cluster) as the answering node's
        replica of it sees it: leader, replicas, term, jobs and that replica's lag."""
        return await self._run(_plans.list_shards())

    async def move_shard(self, shard: int, *, from_node: str, to_node: str,
                         timeout: float = _plans.MOVE_TIMEOUT_S) -> pb.MoveShardResponse:
        """Move one replica of ``shard`` from node ``from_node`` to node ``to_node`` (a node of the
        cluster: a new one joins first): ``to_node`` joins the shard's group and catches up, then
        ``from_node`` leaves it and drops its replica. Returns when done (within ``timeout``);
        asking again after a failure part-way resumes the move."""
        return await self._run(_plans.move_shard(shard, from_node=from_node, to_node=to_node, timeout=timeout))

    async def node_info(self, address: str, *, with_digest: bool = False) -> pb.NodeStatus:
        """The status of the node at ``address`` itself: no failover to another node."""
        return await self._run(_plans.node_info(address, with_digest=with_digest))

    async def add_node(
        self, id: str, *, raft_address: str, grpc_address: str, wait_caught_up_s: float = 0.0,
    ) -> mpb.MembershipChangeResponse:
        """Add a voter: its id and addresses are recorded, then pysyncobj's add is committed (the
        node votes from then on: start it right after, with the cluster's secret and these
        addresses). ``wait_caught_up_s`` > 0 also waits that long for it to catch up."""
        return await self._run(_membership.add_node(
            id, raft_address=raft_address, grpc_address=grpc_address, wait_caught_up_s=wait_caught_up_s
        ))

    async def remove_node(self, id: str) -> mpb.MembershipChangeResponse:
        """Remove a voter (the leader hands its leadership over first); stop the node afterwards."""
        return await self._run(_membership.remove_node(id))

    async def save_snapshot(self, path: str | os.PathLike[str], *, timeout: float | None = None,
                            history: bool = False) -> SnapshotMeta:
        """Save a consistent snapshot of the cluster to ``path``; returns its SnapshotMeta
        (``schedd_client.backup.save_snapshot_async``)."""
        return await _backup.save_snapshot_async(self, path, timeout=timeout or _backup.SAVE_TIMEOUT_S,
                                                 history=history)
