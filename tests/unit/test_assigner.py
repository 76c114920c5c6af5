"""The leader's admission decisions, with a fake Raft node that applies entries at once and an
injected clock: priorities, lanes, overlap skip, starting deadlines, quotas and waiting reasons."""

from __future__ import annotations

import asyncio

import pytest

from schedd.core import commands as C
from schedd.leader.assigner import Assigner
from schedd.leader.workers import WorkerConn, WorkerHub
from schedd.ports.fakes import FakeNode, Proposals
from tests.support.env import TestEnv
from tests.support.leader import add_worker, assigner_rig, step
from tests.support.state import T0, TOP_LEVEL, Harness, text


@pytest.fixture
def setup():
    h = Harness(level=TOP_LEVEL)          # a cluster of this build: batched claims and results
    return (h, *assigner_rig(h))


async def test_higher_priority_is_served_first_and_backfill_last(setup):
    h, node, hub, assigner, tasks = setup
    h.put(name="low", schedule="@every 60s", priority=-5)
    h.put(name="high", schedule="@every 60s", priority=10)
    h.put(name="daily", schedule="@every 60s")
    h.apply(C.BACKFILL, name="daily", times=[T0 - 60_000])
    h.plan_and_fire()
    add_worker(hub, h, slots=1)
    await step(assigner, tasks, h.now)
    running = [key for key, ex in h.state.execs.items() if ex.state == "RUNNING"]
    assert running == [("high", T0)]
    reason = assigner.waiting_reason("low", T0)
    assert reason.startswith("waiting for a free worker slot")


async def test_overlap_skip_is_recorded_at_the_due_time_even_without_workers(setup):
    h, node, hub, assigner, tasks = setup
    h.put(schedule="@every 10s", overlap="skip")
    h.plan_and_fire()
    h.apply(C.START, job="j1", scheduled_ms=T0, attempt=1, worker="w1")
    h.now = T0 + 10_000
    h.plan_and_fire()
    await step(assigner, tasks, h.now - 1_000)                    # not due yet: it waits
    assert h.state.execs[("j1", T0 + 10_000)].state == "SCHEDULED"
    assert "overlap skip" in assigner.waiting_reason("j1", T0 + 10_000)
    await step(assigner, tasks, h.now)
    ex = h.state.execs[("j1", T0 + 10_000)]
    assert ex.state == "SKIPPED" and "j1@2027-01-15T08:00:00Z (RUNNING) still active" in ex.reason


async def test_starting_deadline_skips_what_waited_too_long(setup):
    h, node, hub, assigner, tasks = setup
    h.put(schedule="@every 60s", starting_deadline_seconds=30)
    h.plan_and_fire()
    await step(assigner, tasks, T0 + 29_000)
    assert h.state.execs[("j1", T0)].state == "SCHEDULED"         # nobody to run it, yet in time
    assert assigner.waiting_reason("j1", T0) == "waiting: no worker is connected"
    await step(assigner, tasks, T0 + 31_000)
    ex = h.state.execs[("j1", T0)]
    assert ex.state == "SKIPPED" and ex.reason.startswith("deadline: not started within")


async def test_claims_in_flight_count_against_limits(setup):
    """Two claims proposed in one step must not both pass a limit of one."""
    h, node, hub, assigner, tasks = setup
    h.put(name="a", schedule="@every 60s", concurrency_key="db")
    h.put(name="b", schedule="@every 60s", concurrency_key="db")
    h.plan_and_fire()
    add_worker(hub, h, slots=4)
    assigner.step(h.now)
    assert len(tasks) == 1                                         # one claim, the other waits
    assert "concurrency key 'db' busy" in assigner.waiting_reason("b", T0)
    while tasks:
        await tasks.pop()


async def test_catch_up_runs_are_rate_limited(setup):
    h, node, hub, assigner, tasks = setup
    h.put(schedule="@every 60s")
    h.now = T0 + 10 * 60_000
    for _ in range(20):
        h.plan_and_fire()
    add_worker(hub, h, slots=20)
    await step(assigner, tasks, h.now)
    # the instant due now, and one of the ten missed (0..9 min), rate-limited to 2/s
    assert sum(ex.state == "RUNNING" for ex in h.state.execs.values()) == 2
    waiting = [r for r in assigner.waiting.values() if "catch-up runs start at most 2/s" in r]
    assert len(waiting) == 9
    await step(assigner, tasks, h.now + 500)
    assert sum(ex.state == "RUNNING" for ex in h.state.execs.values()) == 3


async def test_entries_carry_the_epoch_of_the_decision_not_a_term_read_later(setup):
    """A leader paused past an election resumes with pysyncobj at the new term while it still
    believes it leads: its stale decisions must carry the old epoch and be refused."""
    h, node, hub, assigner, tasks = setup
    h.put(schedule="@every 60s")
    h.plan_and_fire()
    add_worker(hub, h, slots=1)
    assigner.step(h.now)                     # decides to claim, in epoch 1
    node.term = 2                            # the tick thread moved on before the coroutine ran
    h.term = 2
    h.apply(C.EPOCH)                         # the new leader's epoch is applied
    while tasks:
        await tasks.pop()
    ex = h.state.execs[("j1", T0)]
    assert ex.state == "SCHEDULED" and not ex.attempts          # the claim was refused: stale term
    assert C.decode(h.entries[-1]).term == 1


async def test_a_stalled_loop_grants_running_attempts_a_lease(setup):
    h, node, hub, assigner, tasks = setup
    h.put(schedule="@every 60s")
    h.plan_and_fire()
    conn = add_worker(hub, h, slots=1)
    await step(assigner, tasks, h.now)
    token = h.state.execs[("j1", T0)].attempts[-1].fencing_token
    hub.book.vouch(token, h.now)
    h.now += 30_000                          # nothing ran for 30 s (SIGSTOP, a clock jump)
    conn.last_heartbeat_ms = h.now           # the worker is alive; its heartbeats are queued
    await step(assigner, tasks, h.now)
    assert h.state.execs[("j1", T0)].state == "RUNNING"          # not expired at once
    for k in range(1, 12):                   # then steps as usual, and no news from the worker
        await step(assigner, tasks, h.now + k * 1_000)
    assert h.state.execs[("j1", T0)].state == "RETRY_WAIT"       # expired after a lease of silence


async def test_a_short_outage_releases_every_late_instant_at_once(setup):
    """After a 7 s outage, 400 late instants of per-second jobs all start in one pass: they were
    delayed, not missed (docs/tour.md "Catch-up"); instants older than the missed grace still go
    through the catch-up rate."""
    h, node, hub, assigner, tasks = setup
    names = [f"j{i:02d}" for i in range(50)]
    for name in names:
        h.put(name=name, schedule="@every 1s")
    h.plan_and_fire()                                   # T0 recorded for every job, then no leader
    for ex in h.state.execs.values():
        h.apply(C.SKIP, items=[[ex.job, ex.scheduled_ms, "not under test"]])
    h.now = T0 + 8_000                                  # the leader is back 8 s later
    for _ in range(10):
        if not h.plan_and_fire():
            break
    late = [key for key, ex in h.state.execs.items() if ex.state == "SCHEDULED"]
    assert len(late) == 400                             # T0+1s .. T0+8s of 50 jobs
    add_worker(hub, h, slots=1_000)
    await step(assigner, tasks, h.now)
    assert sum(h.state.execs[k].state == "RUNNING" for k in late) == 400
    assert not [r for r in assigner.waiting.values() if "catch-up" in r]
    assert {h.state.execs[k].trigger for k in late} == {"schedule"}     # the normal lane


async def test_instants_older_than_the_grace_still_follow_the_catch_up_rate(setup):
    h, node, hub, assigner, tasks = setup
    h.put(schedule="@every 1s")
    h.now = T0 + 30_000                                 # down for 30 s: 20 instants were missed
    for _ in range(40):
        if not h.plan_and_fire():
            break
    triggers = [ex.trigger for ex in h.state.execs.values()]
    assert triggers.count("catchup") == 20 and triggers.count("schedule") == 11   # T0+20s..T0+30s
    add_worker(hub, h, slots=100)
    await step(assigner, tasks, h.now)
    running = [ex for ex in h.state.execs.values() if ex.state == "RUNNING"]
    assert sum(ex.trigger == "schedule" for ex in running) == 11
    assert sum(ex.trigger == "catchup" for ex in running) == 1             # 2/s in this fixture


# ---------------------------------------------------------------- claims inherited at a takeover

from schedd.leader.assigner import HELD, NOT_HELD, WAIT, inherited_claim_fate   # noqa: E402
from schedd_proto import scheduler_pb2 as pb                                         # noqa: E402


@pytest.mark.parametrize("reconnected, same_process, reported, holds, fate", [
    (False, False, False, False, WAIT),     # its worker is not back: it may run out of sight (lease)
    (True, True, False, False, WAIT),       # back, but resent results may still be on the stream
    (True, True, True, False, NOT_HELD),    # the same process heartbeats without it: never started
    (True, False, True, False, WAIT),       # a restarted worker: the old process may have started it
    (True, True, False, True, HELD),        # listed in its hello
    (True, True, True, True, HELD),
])
def test_what_became_of_an_inherited_claim(reconnected, same_process, reported, holds, fate):
    assert inherited_claim_fate(reconnected=reconnected, same_process=same_process, reported=reported,
                                holds=holds) == fate


def new_leader(h: Harness, node: FakeNode, assigner: Assigner) -> None:
    """The leader of term 1 died right after its claim committed; this node leads term 2."""
    h.term = node.term = 2
    h.apply(C.EPOCH)
    assigner.take_over(h.now)


def reconnect(hub: WorkerHub, h: Harness, name: str, tokens=(), slots=2, incarnation="") -> WorkerConn:
    conn = add_worker(hub, h, name=name, slots=slots)
    conn.incarnation = incarnation or f"{name}-1"
    hub._adopt(conn, list(tokens), h.now)
    return conn


def claim_for(h: Harness, name: str, worker: str) -> int:
    """A claim the leader of term 1 committed for `worker`'s first process."""
    return h.apply(C.START, job=name, scheduled_ms=T0, attempt=1, worker=worker,
                   worker_incarnation=f"{worker}-1").payload.token


async def test_a_claim_its_worker_reconnected_without_runs_again_at_once(setup):
    """No fresh lease of grace, no backoff, when the worker says it never got it."""
    h, node, hub, assigner, tasks = setup
    h.put(schedule="@every 60s")
    h.plan_and_fire()
    tok = claim_for(h, "j1", "w1")                   # committed, never pushed
    new_leader(h, node, assigner)
    conn = reconnect(hub, h, "w1")                   # its hello lists nothing
    h.now += 100
    await step(assigner, tasks, h.now)
    assert h.state.execs[("j1", T0)].state == "RUNNING"      # no heartbeat yet: results may follow
    hub.on_heartbeat(conn, pb.Heartbeat(running_tokens=[]), h.now)
    h.now += 100
    await step(assigner, tasks, h.now)               # expired as never started ...
    await step(assigner, tasks, h.now)               # ... and claimed again, in the same instant
    ex = h.state.execs[("j1", T0)]
    assert [a.state for a in ex.attempts] == ["REJECTED", "RUNNING"]
    assert ex.attempts[0].fencing_token == tok and "never started" in ex.attempts[0].error
    assert h.now - T0 < 1_000                        # not a lease, not a backoff


async def test_an_inherited_claim_running_out_of_sight_or_on_a_restarted_worker_keeps_its_lease(setup):
    h, node, hub, assigner, tasks = setup
    for name in ("held", "unseen", "reported", "restarted"):
        h.put(name=name, schedule="@every 60s")
    h.plan_and_fire()
    toks = {name: claim_for(h, name, f"w-{name}") for name in ("held", "unseen", "reported", "restarted")}
    new_leader(h, node, assigner)
    held = reconnect(hub, h, "w-held", [toks["held"]])         # still runs it
    rep = reconnect(hub, h, "w-reported")                      # finished it: resends the result first
    assigner.on_result(rep, pb.AttemptResult(execution_id=h.state.execs[("reported", T0)].id,
                                             fencing_token=toks["reported"], state="SUCCEEDED"))
    hub.on_heartbeat(rep, pb.Heartbeat(), h.now)
    hub.on_heartbeat(held, pb.Heartbeat(running_tokens=[toks["held"]]), h.now)
    again = reconnect(hub, h, "w-restarted", incarnation="w-restarted-2")   # a new process
    hub.on_heartbeat(again, pb.Heartbeat(), h.now)
    for k in range(1, 9):                                      # w-unseen never comes back
        await step(assigner, tasks, h.now + k * 1_000)
        hub.on_heartbeat(held, pb.Heartbeat(running_tokens=[toks["held"]]), h.now + k * 1_000)
    states = {name: h.state.execs[(name, T0)].state for name in toks}
    assert states == {"held": "RUNNING", "unseen": "RUNNING", "reported": "SUCCEEDED", "restarted": "RUNNING"}
    h.now += 11_000                                            # a lease after the takeover
    await step(assigner, tasks, h.now)
    assert h.state.execs[("unseen", T0)].state == "RETRY_WAIT"  # the lease rule, as before
    assert h.state.execs[("restarted", T0)].state == "RETRY_WAIT"
    assert h.state.execs[("held", T0)].state == "RUNNING"



# ---------------------------------------------------------------- a new stream of the same process

async def test_what_a_new_stream_of_the_same_process_leaves_out_of_its_hello_runs_again_at_once(setup):
    """The worker says hello again (a new share of its slots) on a new stream, and the leader has
    not changed: what it was pushed on its earlier stream and never read is not in the new
    hello. Once its first heartbeat (after any resent results) leaves it out too, it is expired
    as never started and claimed again at once, not a lease later. What the hello lists is
    kept, and so is a claim it reports a result for."""
    h, node, hub, assigner, tasks = setup
    for name in ("unread", "held", "finished"):
        h.put(name=name, schedule="@every 60s")
    h.plan_and_fire()
    first = reconnect(hub, h, "w1", slots=3)             # its first stream
    await step(assigner, tasks, h.now)
    toks = {name: h.state.execs[(name, T0)].attempts[-1].fencing_token for name in ("unread", "held", "finished")}
    assert all(first.running.get(t) for t in toks.values())
    hub._close(first)                                    # it says hello again: a new stream, same process
    second = reconnect(hub, h, "w1", [toks["held"]], slots=3)
    assigner.on_result(second, pb.AttemptResult(execution_id=h.state.execs[("finished", T0)].id,
                                                fencing_token=toks["finished"], state="SUCCEEDED"))
    h.now += 100
    await step(assigner, tasks, h.now)
    assert h.state.execs[("unread", T0)].state == "RUNNING"    # no heartbeat yet: a result may follow
    hub.on_heartbeat(second, pb.Heartbeat(running_tokens=[toks["held"]]), h.now)
    h.now += 100
    await step(assigner, tasks, h.now)                   # expired as never started ...
    await step(assigner, tasks, h.now)                   # ... and claimed again, on the new stream
    ex = h.state.execs[("unread", T0)]
    assert [a.state for a in ex.attempts] == ["REJECTED", "RUNNING"] and "never started" in ex.attempts[0].error
    assert ex.attempts[1].fencing_token in second.running
    assert h.state.execs[("held", T0)].state == "RUNNING" and len(h.state.execs[("held", T0)].attempts) == 1
    assert h.state.execs[("finished", T0)].state == "SUCCEEDED"
    assert h.now - T0 < 1_000                            # not a lease, not a backoff


async def test_a_claim_of_a_restarted_process_left_out_of_its_hello_keeps_its_lease(setup):
    """Another process of the same name (a restart) may have started it before it went."""
    h, node, hub, assigner, tasks = setup
    h.put(schedule="@every 60s")
    h.plan_and_fire()
    first = reconnect(hub, h, "w1")
    await step(assigner, tasks, h.now)
    hub._close(first)
    again = reconnect(hub, h, "w1", incarnation="w1-2")
    hub.on_heartbeat(again, pb.Heartbeat(), h.now)
    for k in range(1, 9):
        await step(assigner, tasks, h.now + k * 1_000)
        hub.on_heartbeat(again, pb.Heartbeat(), h.now + k * 1_000)
    assert h.state.execs[("j1", T0)].state == "RUNNING"


async def test_a_claim_whose_stream_ended_before_it_committed_runs_again_at_once(setup):
    """Its assignment was never sent (the stream had ended): nobody can be running it."""
    h, node, hub, assigner, tasks = setup
    h.put(schedule="@every 60s")
    h.plan_and_fire()
    conn = reconnect(hub, h, "w1")
    assigner.step(h.now)                                 # the claim is proposed ...
    hub._close(conn)                                     # ... the worker's stream ends ...
    while tasks:                                         # ... and the claim commits
        await tasks.pop()
    await step(assigner, tasks, h.now)                   # expired (in the tasks above), claimed again
    ex = h.state.execs[("j1", T0)]
    assert ex.attempts[0].state == "REJECTED" and "never started" in ex.attempts[0].error, ex.attempts
    assert not conn.running and h.now - T0 < 1_000


async def claimed_at_once(h, hub, assigner, tasks):
    """j1's instant at T0 claimed on a new worker w1: (its connection, the execution, the token)."""
    h.put(schedule="@every 60s")
    h.plan_and_fire()
    conn = add_worker(hub, h)
    await step(assigner, tasks, h.now)
    ex = h.state.execs[("j1", T0)]
    return conn, ex, ex.attempts[-1].fencing_token


async def test_a_result_is_committed_under_the_epoch_read_when_it_arrived(setup):
    """The epoch rule (Assigner.step) holds for results too: pysyncobj moving to a new term while
    the finish coroutine waits must not restamp the entry with that term."""
    h, node, hub, assigner, tasks = setup
    conn, ex, token = await claimed_at_once(h, hub, assigner, tasks)
    sent: list[C.Command] = []
    propose = node.propose

    async def recording(entry: str, *, timeout: float = 10.0) -> dict:
        sent.append(C.decode(entry))
        return await propose(entry, timeout=timeout)
    node.propose = recording
    assigner.on_result(conn, pb.AttemptResult(execution_id=ex.id, fencing_token=token, state="SUCCEEDED"))
    node.term = 2                         # an election happened before the coroutine ran
    while tasks:
        await tasks.pop()
    [finish] = [c for c in sent if c.kind == C.FINISH_MANY]          # results go in batches
    assert finish.term == 1
    assert h.state.execs[("j1", T0)].state == "SUCCEEDED"


def test_the_dispatcher_owns_its_sla_driver_and_shares_its_view():
    """The SLA driver is the dispatcher's collaborator, made with it (it was bolted on as an
    attribute by the first leader step), and reads the state through the dispatcher's view."""
    from schedd.leader import sla as leader_sla
    from schedd.leader.dispatcher import Dispatcher
    from schedd_client.net.policy import NetPolicy

    env = TestEnv(webhooks=NetPolicy())
    node = env.node
    d = Dispatcher(node, env.clock, metrics=None)
    assert isinstance(d.sla, leader_sla.SlaDriver) and d.sla.view is d.view
    assert d.sla.webhooks is node.cfg.webhooks
    assert not hasattr(leader_sla, "drive")


@pytest.mark.parametrize("counts_reads, heartbeat_read, lost", [
    (True, None, False),    # no heartbeat read for 30 s, results of other runs keep coming
    (True, 0, False),       # the heartbeat left it out, sent before the worker had its assignment
    (True, 1, True),        # sent after: the worker does not hold it
    (False, 0, True),       # an older worker does not say: a heartbeat that leaves it out loses it
])
async def test_only_silence_or_a_heartbeat_leaving_it_out_loses_an_attempt(setup, counts_reads, heartbeat_read, lost):
    """Past capacity an alive worker's heartbeats queue behind its results, or the leader's loop
    reads them late: its attempts were expired as lost and run again (the duplicated starts of
    an overloaded sustained run). An open stream that delivers vouches for what it
    holds; its attempts are lost after a lease of silence, or after a lease in which its
    heartbeats left out an attempt the worker had been sent."""
    h, node, hub, assigner, tasks = setup
    conn, ex, token = await claimed_at_once(h, hub, assigner, tasks)
    conn.counts_reads = counts_reads
    assert hub.book.sent_at(conn, token) == 1           # the first message on its stream
    start = h.now
    if heartbeat_read is not None:
        hub.on_heartbeat(conn, pb.Heartbeat(running_tokens=[], messages_read=heartbeat_read), start + 500)
    for k in range(1, 31):                              # 30 s, three leases
        conn.last_heartbeat_ms = start + k * 1_000      # a message every second
        await step(assigner, tasks, start + k * 1_000)
    first = h.state.execs[("j1", T0)].attempts[0]
    assert first.state == ("LOST" if lost else "RUNNING")
    if not lost:                                        # and then the stream falls silent
        for k in range(31, 43):
            await step(assigner, tasks, start + k * 1_000)
        first = h.state.execs[("j1", T0)].attempts[0]
        assert first.state == "LOST" and "no news for 10s" in first.error


class HoldFinish(Proposals):
    """Proposals that hold every `finish_many` until `release` is set (and count them)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.finishes = 0

    async def propose(self, node, entry):
        if C.decode(entry).kind == C.FINISH_MANY:
            self.finishes += 1
            await self.release.wait()
        return node.apply(entry)


async def test_a_result_resent_while_its_first_copy_is_committed_is_not_proposed_again():
    """A worker resends a result unacknowledged for a lease; when the log is that slow (an
    overload) the first copy is still on its way, and a second `finish` only adds load."""
    h = Harness(level=TOP_LEVEL)
    held = HoldFinish()
    node, hub, assigner, tasks = assigner_rig(h, proposals=held)
    conn, ex, token = await claimed_at_once(h, hub, assigner, tasks)
    result = pb.AttemptResult(execution_id=ex.id, fencing_token=token, state="SUCCEEDED")
    assigner.on_result(conn, result)
    for _ in range(3):
        await asyncio.sleep(0)
    assigner.on_result(conn, result)                    # the resend
    for _ in range(3):
        await asyncio.sleep(0)
    assert held.finishes == 1
    held.release.set()
    while tasks:
        await tasks.pop()
    assert h.state.execs[("j1", T0)].state == "SUCCEEDED"
    acks = [m.ack.outcome for m in drain(conn.out) if m is not None and m.HasField("ack")]
    assert acks == ["committed"]
    assigner.on_result(conn, result)                    # settled: a later copy is answered again
    while tasks:
        await tasks.pop()
    assert held.finishes == 2


def drain(q: asyncio.Queue) -> list:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


async def test_a_result_on_its_way_to_the_log_keeps_its_attempt_alive():
    """A claim made long before its due time (a herd pushed ahead) is older than a
    lease when its result arrives; while that result's finish is being committed the reaper
    must not expire the attempt as lost (it did: the arrival dropped the token's last news, the
    expiry committed first, the run was retried and ran twice, its result refused as stale)."""
    h = Harness(level=TOP_LEVEL)
    held = HoldFinish()
    node, hub, assigner, tasks = assigner_rig(h, proposals=held)
    conn, ex, token = await claimed_at_once(h, hub, assigner, tasks)
    for h.now in (T0 + 4_000, T0 + 8_000):          # the loop steps (no stall: no lease grace)
        assigner.step(h.now)
    h.now = T0 + 9_000
    conn.last_heartbeat_ms = h.now
    hub.on_heartbeat(conn, pb.Heartbeat(running_tokens=[token]), h.now)       # news at T0 + 9 s
    h.now = T0 + 11_000                    # a lease after the claim, 2 s after the last news
    conn.last_heartbeat_ms = h.now
    assigner.on_result(conn, pb.AttemptResult(execution_id=ex.id, fencing_token=token, state="SUCCEEDED"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)                 # the finish is proposed and held
    h.now = T0 + 12_000
    assigner.step(h.now)
    for _ in range(5):
        await asyncio.sleep(0)
    assert not any(rec.expiring for rec in assigner.book)
    assert not any(C.decode(e).kind == C.EXPIRE for e in node.proposed)
    held.release.set()
    while tasks:
        await tasks.pop()
    assert h.state.execs[("j1", T0)].state == "SUCCEEDED"


async def test_a_backlog_past_due_is_claimed_before_runs_not_due_yet(setup):
    """Every slot busy, ahead places left, runs past due waiting: they take the ahead places
    (the worker starts them oldest due first as its slots free) before a run not due yet does.
    Before, a run past due could take only a free slot; under a sustained overload the runs
    claimed ahead kept the worker above its slots and a fifth of 30,000 instants at 3,000
    fires/s were never claimed."""
    h, node, hub, assigner, tasks = setup
    for i in range(4):
        h.put(name=f"late{i}", schedule="@every 60s")
    h.plan_and_fire()                                  # four runs due at T0
    conn = add_worker(hub, h, slots=1)
    conn.reserved = 1                                  # its one slot is taken
    conn.ahead = 4
    h.put(name="next", schedule="at 2027-01-15T08:00:10Z")
    h.fire(*[("next", T0 + 10_000)])
    await step(assigner, tasks, h.now)
    running = sorted(k[0] for k, ex in h.state.execs.items() if ex.state == "RUNNING")
    assert running == ["late0", "late1", "late2", "late3"], running


async def test_the_reaper_reads_a_spec_only_once_a_timeout_could_have_passed(setup):
    """Held-ahead herds are tens of thousands of running attempts: the reaper must not parse
    each one's spec on every pass (it took a fifth of the leader's time after a 100k herd's
    instant); it still expires TIMED_OUT an attempt past its timeout whose worker keeps quiet."""
    h, node, hub, assigner, tasks = setup
    h.put(schedule="@every 60s", timeout_seconds=1)
    h.plan_and_fire()
    conn = add_worker(hub, h)
    await step(assigner, tasks, h.now)
    token = h.state.execs[("j1", T0)].attempts[-1].fencing_token
    looked: list[str] = []
    real = assigner._specs

    class Counting:
        def get(self, job):
            looked.append(job.name)
            return real.get(job)
    assigner._specs = Counting()
    t = T0
    while t < T0 + 14_000:                            # the worker heartbeats; no timeout could pass
        t += 2_000
        conn.last_heartbeat_ms = t
        hub.on_heartbeat(conn, pb.Heartbeat(running_tokens=[token]), t)
        assigner.step(t)
    assert looked == [] and not any(rec.expiring for rec in assigner.book)
    t += 3_000                                        # due + 1 s + 5 s grace + 10 s lease passed
    conn.last_heartbeat_ms = t
    hub.on_heartbeat(conn, pb.Heartbeat(running_tokens=[token]), t)
    h.now = t
    assigner.step(t)
    while tasks:
        await tasks.pop()
    assert looked == ["j1"]
    assert h.state.execs[("j1", T0)].attempts[-1].state == "TIMED_OUT"


async def claimed_ahead(setup):
    """j1's next instant (30 s on), claimed 10 s before it is due into a worker's ahead places."""
    h, node, hub, assigner, tasks = setup
    h.put(schedule="@every 60s")
    h.now += 30_000
    [[_, due, *_]] = h.plan_and_fire(lookahead=20_000)
    add_worker(hub, h).ahead = 10
    h.now = due - 10_000
    await step(assigner, tasks, h.now)
    return h.state.execs[("j1", due)]


@pytest.mark.parametrize("case, cancelled", [
    ("paused well before due", True),
    ("paused within a second of due", False),      # its handler may have started on a fast clock
    ("not paused", False),
])
async def test_a_pause_cancels_an_attempt_claimed_ahead_before_it_is_due(setup, case, cancelled):
    """The rule: a pause inside the lookahead window cancels the pushed assignment. Claimed ahead
    for a herd (up to the burst lookahead before due), an attempt would otherwise run up to 15 s
    after its job was paused."""
    h, node, hub, assigner, tasks = setup
    ex = await claimed_ahead(setup)
    due = ex.due
    assert ex.state == "RUNNING" and ex.attempts                   # claimed ahead, pushed, not due
    if case != "not paused":
        h.now = due - (5_000 if case == "paused well before due" else 500)
        h.apply(C.PAUSE, name="j1")
    await step(assigner, tasks, h.now + 300)                       # the reaper's next pass
    kinds = [C.decode(e).kind for e in node.proposed]
    assert (C.CANCEL in kinds) is cancelled
    assert ex.cancel_requested is cancelled


@pytest.mark.parametrize("before_due_ms, cancelled", [(5_000, True), (500, False)])
async def test_deleting_a_job_cancels_its_attempts_claimed_ahead_and_not_due(setup, before_due_ms, cancelled):
    """The delete's apply names the held attempts (a CancelAttempt effect each: the leader's
    dispatcher pushes them to their workers); a run due within a second may have started."""
    from schedd.core.results import CancelAttempt

    h = setup[0]
    ex = await claimed_ahead(setup)
    due, token = ex.due, ex.attempts[-1].fencing_token
    h.now = due - before_due_ms
    r = h.apply(C.DELETE, name="j1")
    assert r.ok and ("j1", due) not in h.state.execs
    assert r.effects == ((CancelAttempt(token, ex.id),) if cancelled else ())


async def test_the_reaper_walks_a_herd_held_ahead_in_slices_and_still_expires_a_lost_attempt(setup):
    """A herd held ahead is up to 100,000 running attempts: one walk over all of them every 250 ms
    held the node lock (and so the apply thread) for 0.2 s each time. The reaper looks at
    REAP_SLICE per step, in rounds, and an attempt its worker stopped listing is still expired
    LOST once its lease passes, wherever it falls in the round."""
    from schedd.core.view import StateView
    from schedd.leader.assigner import REAP_SLICE
    h, node, hub, assigner, tasks = setup
    n = REAP_SLICE + 500
    names = [f"h{i:05d}" for i in range(n)]
    for i in range(0, n, 250):
        h.apply(C.PUT_MANY, specs=[text(name=x, schedule="at 2027-01-15T08:00:30Z") for x in names[i:i + 250]])
    while h.plan_and_fire(lookahead=40_000):
        pass
    due = T0 + 30_000
    h.now = due - 14_000
    conn = add_worker(hub, h, slots=256)
    conn.ahead = n
    for _ in range(50):
        if len(conn.running) >= n:
            break
        await step(assigner, tasks, h.now)
    assert len(conn.running) == n
    looked: list[int] = []

    class Counting(StateView):
        __slots__ = ()

        def running_after(self, after, limit):
            out = super().running_after(after, limit)
            looked.append(len(out))
            return out
    assigner.view = Counting(h.state)
    lost = h.state.execs[(names[-1], due)].attempts[-1].fencing_token    # last in the round's order
    listed = [t for t in conn.running if t != lost]
    t = h.now
    for _ in range(12):                               # heartbeats every second list all but one
        t += 1_000
        h.now = conn.last_heartbeat_ms = t
        hub.on_heartbeat(conn, pb.Heartbeat(running_tokens=listed), t)
        await step(assigner, tasks, t)
    assert looked and max(looked) <= REAP_SLICE and n in (sum(looked[:2]), sum(looked[1:3]))
    ex = h.state.execs[(names[-1], due)]
    assert ex.attempts[-1].state == "LOST" and "no news for 10s" in ex.attempts[-1].error
    assert sum(1 for e in h.state.execs.values() if e.state == "RUNNING") == n - 1


@pytest.mark.parametrize("lease_ms,expected", [(1_000, 250), (2_500, 250), (5_000, 500),
                                               (10_000, 1_000), (60_000, 1_000)])
def test_reap_rounds_are_a_tenth_of_a_lease_apart_within_bounds(lease_ms, expected):
    """Looking more often expires nothing sooner (an attempt is lost only after a whole lease);
    it only walks every running attempt again."""
    from schedd.leader.assigner import reap_ms
    assert reap_ms(lease_ms) == expected
