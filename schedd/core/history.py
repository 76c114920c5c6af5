"""Which executions leave memory for the history stores, and what keeps "one record per (job,
scheduled time)" once they have.

From feature level HISTORY_LEVEL on, the replicated tables keep what decisions need: every
execution not finished yet, the newest KEEP_FINISHED finished ones of each job (what `job get`
shows as the last run, and what a retry starts again), and any finished one at or after the job's
next instant. The other finished executions leave `execs` and go, through the apply's outbox,
to every node's history store (schedd.history), which keeps them by the job's retention. Below
the level, a job keeps its newest `history_limit` executions in memory, as every build did.

Exactly once, with old records only on disk. Per job, `Tables.archived` holds (floor, index): the
newest scheduled time that left memory, and the log index of the last departure. Invariant:
every execution of the job scheduled after `floor` is in `execs`. The paths that record
executions keep to it:
- the schedule's own instants (fire, catch-up) come after `next_fire`, which is always after
  `floor`: only executions before `next_fire` leave memory, and a recomputed `next_fire` (a
  schedule change, a resume) starts after `Tables.recorded_floor`;
- a manual trigger is recorded after `floor` (at the entry's time, or just after `floor`);
- a backfill may name any past instant. For an instant at or before `floor`, apply cannot look at
  the disk, so the proposer does (the leader's store, once it holds the entries up to `index`)
  and says in the entry at which store index it found the instants absent (`checked`): apply
  records them only if no execution of the job left memory after that index (else the entry is
  refused as a conflict, and the proposer checks again); an entry without the check records
  none of them (counted as duplicates: never twice, and said).
A record that the store's retention has since deleted no longer blocks a new one: backfilling an
instant older than the retention records it again.

DAG task rows stay under their DAG's run retention (schedd.core.dags), in memory.
"""

from __future__ import annotations

from schedd.core.model import TERMINAL_STATES, Execution, Job
from schedd.core.naming import dag_of_job
from schedd.core.tables import Tables

HISTORY_LEVEL = 7          # the feature level from which finished executions leave memory
KEEP_FINISHED = 1          # finished executions of a job kept in memory (the newest)


def archives(st: Tables, job: Job) -> bool:
    """Whether the job's finished executions leave memory (else `history_limit` prunes them)."""
    return st.feature_level >= HISTORY_LEVEL and dag_of_job(job.name) is None


def retire(st: Tables, job: Job, index: int) -> None:
    """Move the job's finished executions that memory no longer keeps to the outbox, oldest
    first, and raise its floor. O(its executions in memory), which stay few: live ones, the
    newest finished one, and those at or after the next instant."""
    name = job.name
    times = st.by_job.get(name)
    if not times:
        return
    finished = len(times) - st.active.get(name, 0) - st.pending.get(name, 0)
    excess = finished - KEEP_FINISHED
    if excess <= 0:
        return
    limit = job.next_fire
    victims: list[Execution] = []
    for t in times:
        if len(victims) >= excess or (limit is not None and t >= limit):
            break
        ex = st.execs[(name, t)]
        if ex.state in TERMINAL_STATES:
            victims.append(ex)
    if not victims:
        return
    floor = st.archived.get(name, (victims[-1].scheduled_ms, index))[0]
    for ex in victims:
        st.drop_exec(ex)
        st.outbox.executions.append(ex)
    st.archived[name] = (max(floor, victims[-1].scheduled_ms), index)


def retire_settled(st: Tables, index: int) -> None:
    """After an entry finished executions: their jobs' finished runs that memory no longer keeps
    leave now, not at the job's next record (a paused or daily job would hold them for long)."""
    names, st.settled = st.settled, []
    for name in dict.fromkeys(names):
        job = st.jobs.get(name)
        if job is not None and archives(st, job):
            retire(st, job, index)


def may_be_archived(st: Tables, name: str, t: int) -> bool:
    """Whether an execution of `name` at `t` may exist in the history stores only."""
    a = st.archived.get(name)
    return a is not None and t <= a[0]


def trigger_time(st: Tables, name: str, now: int) -> int:
    """The instant a manual trigger records: the entry's time, or just after the job's floor,
    then the first free millisecond (two triggers in one millisecond are two runs)."""
    a = st.archived.get(name)
    t = now if a is None else max(now, a[0] + 1)
    while (name, t) in st.execs:
        t += 1
    return t
