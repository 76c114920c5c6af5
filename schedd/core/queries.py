"""Queries: pages of jobs and executions read from the tables' indexes (the caller holds the
node lock). Read-only: nothing here changes a table or an index."""

from __future__ import annotations

from collections.abc import Container

from sortedcontainers import SortedList

from schedd.core.model import Execution, Job
from schedd.core.tables import Tables


def in_state_since(st: Tables, state: str, t: int) -> list[tuple[int, str]]:
    """(scheduled_ms, job) of executions in `state` scheduled at or after t, oldest first."""
    index = st.by_state.get(state)
    return list(index.irange((t, ""), None)) if index else []


def last_execution(st: Tables, name: str) -> Execution | None:
    times = st.by_job.get(name)
    return st.execs[(name, times[-1])] if times else None


def recent_runs(st: Tables, name: str, n: int) -> list[Execution]:
    """The job's last `n` executions this replica holds, oldest first (O(n))."""
    times = st.by_job.get(name)
    return [st.execs[(name, t)] for t in times[-n:]] if times and n > 0 else []


def list_jobs(st: Tables, *, team: str = "", state: str = "", after: str = "",
              limit: int = 100, visible: Container[str] | None = None,
              contains: str = "", pool: str = "") -> tuple[list[Job], str, int]:
    """A page of jobs ordered by name, starting after `after`; returns (jobs, next_after, total).
    Costs O(page) except when both team and state filter (then O(jobs in the team)). `visible`
    (the teams an ACL lets the caller read) keeps only those teams' jobs, `contains` only the
    jobs whose name contains it (any case) and `pool` only the jobs of that worker pool, each at
    O(jobs) cost."""
    if visible is not None or contains or pool:
        return _filtered_jobs(st, team=team, state=state, after=after, limit=limit, visible=visible,
                              contains=contains, pool=pool)
    empty: SortedList[str] = SortedList()
    if state == "paused":
        names = st.paused_names
        keep = (lambda job: job.team == team) if team else None
    else:
        names = st.by_team.get(team, empty) if team else st.names
        keep = (lambda job: not job.paused) if state == "active" else None
    start = names.bisect_right(after) if after else 0
    page: list[Job] = []
    i = start
    while i < len(names) and len(page) < limit:
        job = st.jobs[names[i]]
        if keep is None or keep(job):
            page.append(job)
        i += 1
    more = i < len(names) and (keep is None or any(keep(st.jobs[n]) for n in names.islice(i)))
    if keep is None:
        total = len(names)
    elif not team:
        total = len(st.names) - len(st.paused_names)
    else:
        total = sum(1 for n in names if keep(st.jobs[n]))
    return page, (page[-1].name if page and more else ""), total


def _filtered_jobs(st: Tables, *, team: str, state: str, after: str, limit: int,
                   visible: Container[str] | None, contains: str, pool: str = "") -> tuple[list[Job], str, int]:
    names = st.by_team.get(team, SortedList()) if team else st.names
    text = contains.casefold()

    def wanted(job: Job) -> bool:
        return ((visible is None or job.team in visible) and (not state or job.paused == (state == "paused"))
                and (not text or text in job.name.casefold()) and (not pool or st.policy(job).pool == pool))
    jobs = [st.jobs[n] for n in names.irange(minimum=after, inclusive=(False, True))] if after else \
        [st.jobs[n] for n in names]
    keep = [j for j in jobs if wanted(j)]
    total = sum(1 for n in names if wanted(st.jobs[n]))
    page = keep[:limit]
    return page, (page[-1].name if len(keep) > limit else ""), total


def list_executions(st: Tables, *, job: str = "", state: str = "", after: tuple[int, str] | None = None,
                    limit: int = 100, oldest_first: bool = False, visible: Container[str] | None = None,
                    ) -> tuple[list[Execution], tuple[int, str] | None, int]:
    """A page of executions ordered by (scheduled_ms, job), newest first unless asked; `visible`
    keeps only the executions of jobs of those teams (O(executions))."""
    if job:
        index = SortedList((t, job) for t in st.by_job.get(job, ()))
    else:
        index = st.by_time
    if state:
        index_state = st.by_state.get(state, SortedList())
        index = index_state if not job else SortedList(k for k in index if k in index_state)
    if visible is not None:
        index = SortedList(k for k in index if (j := st.jobs.get(k[1])) is not None and j.team in visible)
    total = len(index)
    if oldest_first:
        lo = index.bisect_right(after) if after else 0
        keys = list(index.islice(lo, lo + limit))
    else:
        hi = index.bisect_left(after) if after else len(index)
        keys = list(index.islice(max(0, hi - limit), hi))[::-1]
    page = [st.execs[(name, t)] for t, name in keys]
    more = bool(keys) and (index.bisect_right(keys[-1]) < len(index) if oldest_first
                           else index.bisect_left(keys[-1]) > 0)
    return page, (keys[-1] if more else None), total


