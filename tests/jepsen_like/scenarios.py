"""Scenarios: a nemesis schedule (seeded) plus the evidence that its fault really happened.

Each nemesis is `fn(h, rng, seconds)`: it drives faults on the Harness `h` for about `seconds`
(waiting on conditions, not fixed sleeps, where the cluster has to do something first), and
leaves healing to `Harness.finish`. `evidence(results, meta)` returns what is missing from the
history for the fault to count as having happened (empty: it happened).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections.abc import Callable

from schedd.ports.fakes import wait_until


def _until(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _sleep(h, seconds: float) -> None:
    """Let the workload run while the fault is in place (the client and the cluster keep going)."""
    time.sleep(max(0.0, seconds))


def _leader(h, timeout: float = 30.0, exclude=None) -> str:
    """The leader; in a sharded cluster the node that leads the most shards (its loss fails
    several groups over at once)."""
    if h.shards > 1:
        return h.top_leader(timeout)
    return h.c.wait_leader(timeout=timeout, exclude=exclude)


def _new_leader(h, old: str, timeout: float) -> None:
    """Until a leader other than `old` is elected (sharded: for every shard)."""
    if h.shards > 1:
        h.wait_shard_leaders(timeout, exclude=old)
    else:
        h.c.wait_leader(timeout=timeout, exclude=old)


def nemesis_none(h, rng, seconds):
    _sleep(h, seconds)


def nemesis_kill_leader(h, rng, seconds):
    end = time.monotonic() + seconds
    while _until(end) > 8:
        _sleep(h, 4 + rng.random() * 2)
        lead = _leader(h)
        h.kill_node(lead)
        _sleep(h, 3)
        h.restart_node(lead)
    _sleep(h, _until(end))


def nemesis_pause_leader(h, rng, seconds):
    end = time.monotonic() + seconds
    while _until(end) > 8:
        _sleep(h, 3 + rng.random() * 2)
        lead = _leader(h)
        h.pause_node(lead)
        # past the election timeout (0.6-1.2 s), the leader fallback and the workers' lease
        _sleep(h, h.lease_ms / 1000 + 1 + rng.random())
        h.resume_node(lead)
    _sleep(h, _until(end))


def nemesis_isolate_leader(h, rng, seconds):
    end = time.monotonic() + seconds
    hows = ["both", "out", "in"]
    i = 0
    while _until(end) > 9:
        _sleep(h, 3 + rng.random())
        lead = _leader(h)
        h.isolate(lead, hows[i % len(hows)])
        i += 1
        try:
            _new_leader(h, lead, 8)
        except TimeoutError:
            pass
        _sleep(h, 1.5 + rng.random())
        h.heal_net()
    _sleep(h, _until(end))


def nemesis_partition_storm(h, rng, seconds):
    end = time.monotonic() + seconds
    ids = list(h.c.nodes)
    kinds = ["isolate", "bridge", "oneway", "flap"] + ([] if h.nsnet else ["delay"])   # no netem in a netns
    while _until(end) > 6:
        kind = rng.choice(kinds)
        if kind == "isolate":
            h.isolate(rng.choice(ids), "both")
            _sleep(h, 2 + rng.random() * 2)
            h.heal_net()
        elif kind == "bridge":
            b = rng.choice(ids)
            x, y = [n for n in ids if n != b]
            h.cut_links([(x, y)], kind="bridge", bridge=b)
            _sleep(h, 2 + rng.random() * 2)
            h.heal_net("bridge")
        elif kind == "oneway":
            h.isolate(rng.choice(ids), rng.choice(["in", "out"]))
            _sleep(h, 2 + rng.random() * 2)
            h.heal_net()
        elif kind == "delay":
            h.delay_links(rng.choice([50, 150, 300]))
            _sleep(h, 2 + rng.random() * 2)
            h.heal_net("delay")
        else:
            n = rng.choice(ids)
            for _ in range(4):
                h.isolate(n, "both")
                _sleep(h, 0.3 + rng.random() * 0.5)
                h.heal_net()
                _sleep(h, 0.3 + rng.random() * 0.5)
        _sleep(h, 1 + rng.random())
    _sleep(h, _until(end))


def _tick_jobs() -> list:
    """The cut-leader burst: 20 `@every 1s` jobs beside the workload, so a cut leader appends plenty
    alone before it steps down."""
    from .harness import WORKLOAD, Job
    return WORKLOAD + [Job(f"tick{i:02d}", 1) for i in range(1, 21)]


TICK_JOBS = _tick_jobs()
CONVERGE_S = 20.0       # after each heal, every replica must hold the same state within this


def cut_leader(h, how: str, cut_s: float, *, load: bool = False) -> dict:
    """Cut the leader off its peers (iptables DROP in its namespace; `how`: both, or out = it
    receives but cannot send) for `cut_s`, heal, and check convergence within CONVERGE_S. The
    majority elects a leader and keeps committing meanwhile (C10). With `load`, a client also
    writes as fast as it is answered during the cut (the old leader appends some alone)."""
    import threading
    lead = _leader(h)
    stop = threading.Event()
    writer = None
    if load:
        def write():
            while not stop.is_set():
                h.trigger("ondemand")
        writer = threading.Thread(target=write, name="cut-load", daemon=True)
        writer.start()
    cut_at = time.monotonic()
    h.isolate(lead, how)
    try:
        try:
            h.c.wait_leader(timeout=min(cut_s, 8), exclude=lead)
        except TimeoutError:
            pass
        _sleep(h, cut_s - (time.monotonic() - cut_at))
    finally:
        h.heal_net()
        stop.set()
    result = h.converge(CONVERGE_S, what=f"{cut_s:g} s {how} cut of {lead}")
    if writer is not None:
        writer.join(timeout=30)
    return result


def nemesis_ns_cuts(cuts, *, load: bool = False):
    """A nemesis of leader cuts [(how, seconds)...] in network namespaces, each followed by the
    convergence check. It ends at the first cut after which a replica did not converge: the run
    has failed (C7), and the next cut of a leader would only leave no quorum for its length."""
    def nemesis(h, rng, seconds):
        end = time.monotonic() + seconds
        for how, cut_s in cuts:
            _sleep(h, 2 + rng.random())
            if not cut_leader(h, how, cut_s, load=load)["ok"]:
                return
        _sleep(h, _until(end))
    nemesis.__name__ = "nemesis_ns_cuts_" + "_".join(f"{how}{s:g}" for how, s in cuts)
    return nemesis


def nemesis_ns_partition(h, rng, seconds):
    """The soak's namespace nemesis: one leader cut of 10 or 30 s, both ways or one way."""
    end = time.monotonic() + seconds
    _sleep(h, 1 + rng.random())
    cut_leader(h, rng.choice(["both", "out"]), rng.choice([10, 10, 30]))
    _sleep(h, _until(end))


def _busy_worker(h, job_prefix: str = "long", timeout: float = 20.0) -> str:
    """A worker that currently runs an attempt of a `job_prefix` job (from the leader's registry)."""
    from schedd_proto import scheduler_pb2 as pb
    from schedd_proto import scheduler_pb2_grpc as pb_grpc

    def find():
        lead = h.c.leader()
        if lead is None:
            return None
        with h.c.channel(lead) as ch:
            for w in pb_grpc.WorkersStub(ch).ListWorkers(pb.ListWorkersRequest(), timeout=3).workers:
                if any(r.startswith(job_prefix + "@") for r in w.running):
                    return w.name
        return None
    return wait_until(find, timeout=timeout, interval=0.05, what=f"a worker running {job_prefix}")


def nemesis_pause_worker(h, rng, seconds):
    end = time.monotonic() + seconds
    while _until(end) > 10:
        _sleep(h, 1 + rng.random())
        w = _busy_worker(h)
        h.pause_worker(w)
        _sleep(h, h.lease_ms / 1000 * 2 + 1)     # past its lease: the attempt is retried elsewhere
        h.resume_worker(w)
    _sleep(h, _until(end))


def nemesis_kill_worker(h, rng, seconds):
    end = time.monotonic() + seconds
    while _until(end) > 8:
        _sleep(h, 1 + rng.random())
        w = _busy_worker(h)
        h.kill_worker(w)
        _sleep(h, h.lease_ms / 1000 + 1)
        h.restart_worker(w)
    _sleep(h, _until(end))


def nemesis_worker_faults(h, rng, seconds):
    """S08: kill -9 a busy worker; cut a busy worker off the cluster (both ways, then one way):
    its attempts are lost and retried elsewhere, and whatever it finishes meanwhile is fenced."""
    end = time.monotonic() + seconds
    kinds = ["kill", "partition", "partition_out"]
    i = 0
    while _until(end) > 8:
        _sleep(h, 1 + rng.random())
        w = _busy_worker(h)
        kind = kinds[i % len(kinds)]
        i += 1
        if kind == "kill":
            h.kill_worker(w)
            _sleep(h, h.lease_ms / 1000 + 1)
            h.restart_worker(w)
        else:
            h.partition_worker(w, "both" if kind == "partition" else "out")
            _sleep(h, h.lease_ms / 1000 * 2 + 1)     # past its lease: its attempts are retried elsewhere
            h.heal_worker(w)
    _sleep(h, _until(end))


def nemesis_clock(h, rng, seconds):
    end = time.monotonic() + seconds
    ids = list(h.c.nodes)
    # skew every node differently, then hand leadership over between skewed nodes
    for n in ids:
        h.set_clock(n, rng.choice([-2500, -1200, 800, 2000]))
    _sleep(h, 4)
    while _until(end) > 9:
        old = _leader(h)
        h.kill_node(old)
        _sleep(h, 2)
        h.restart_node(old)
        lead = h.c.wait_leader(timeout=30)
        h.set_clock(old, rng.choice([-2000, 1500]))
        for _ in range(3):                     # strobe a follower's clock
            f = rng.choice([n for n in ids if n != lead])
            h.set_clock(f, rng.choice([-3000, 3000]))
            _sleep(h, 0.7)
        # and step the leader's clock forward by more than a lease (an NTP step)
        h.set_clock(lead, h.offsets.get(lead, 0) + h.lease_ms + 1500)
        _sleep(h, 1.5)
    _sleep(h, _until(end))


def nemesis_skew_leader(h, rng, seconds):
    """The leader's clock runs 3 s fast: a safe daemon still fires nothing early."""
    end = time.monotonic() + seconds
    lead = _leader(h)
    h.set_clock(lead, 3000)
    _sleep(h, _until(end))


def nemesis_kill_all(h, rng, seconds):
    end = time.monotonic() + seconds
    ids = list(h.c.nodes)
    _sleep(h, 4)
    for n in ids:                              # all at once
        h.kill_node(n)
    _sleep(h, 2)
    for n in ids:
        h.restart_node(n)
    h.c.wait_leader(timeout=60)
    _sleep(h, 4)
    for n in rng.sample(ids, len(ids)):        # staggered
        h.kill_node(n)
        _sleep(h, 0.7)
    for n in ids:
        h.restart_node(n)
    _sleep(h, _until(end))


def nemesis_follower_snapshot(h, rng, seconds):
    end = time.monotonic() + seconds
    lead = _leader(h)
    f = next(n for n in h.c.nodes if n != lead)
    h.kill_node(f)
    for _ in range(60):                        # load the log so it compacts several times
        h.trigger("ondemand")
    _sleep(h, max(4.0, _until(end) / 2))
    h.restart_node(f)
    wait_until(lambda: (h.node_infos().get(f) or {}).get("applied", 0) > 0, timeout=60, what="the follower to come back")
    _sleep(h, 3)
    other = next(n for n in h.c.nodes if n not in (f,) and h.c.nodes[n].alive() and n != h.c.leader())
    h.kill_node(other)                          # the rebuilt follower is now needed for quorum
    _sleep(h, max(3.0, _until(end)))


def _full_disk(h, rng) -> None:
    """The node on a small tmpfs: fill its filesystem while it runs. It must crash (the durable
    journal ends the process, exit 74, on a write error) or go on; then the space is freed and it
    restarts on the same data: it comes up and agrees with its peers, or refuses (then rebuilt)."""
    nid = next(iter(h.disks))
    h.fill_disk(nid)
    try:
        wait_until(lambda: not h.c.nodes[nid].alive(), timeout=20, interval=0.1, what=f"{nid} to hit the full disk")
        died = f"exit {h.c.nodes[nid].proc.wait(timeout=10)}"
    except TimeoutError:
        died = "survived"
    h.rec("disk_full_outcome", node=nid, outcome=died)
    h.free_disk(nid)
    if died == "survived":
        h.fault("disk", "stop", node=nid, outcome=died)
        outcome = "up"
    else:
        outcome = h.start_or_rebuild(nid)
    h.meta.setdefault("disk_outcomes", []).append([nid, "full", f"{died}, then {outcome}"])
    wait_until(lambda: (h.node_infos().get(nid) or {}).get("applied", 0) > 0, timeout=60, what=f"{nid} to serve again")


def nemesis_disk(h, rng, seconds):
    """Disk faults: a full disk on the node with a small filesystem (when one could be mounted),
    then on one follower a torn journal tail, then flipped bits. It comes up or refuses to start
    (then it is wiped and rebuilt from its peers); it never serves divergent state."""
    end = time.monotonic() + seconds
    if h.disks:
        _sleep(h, 2 + rng.random())
        _full_disk(h, rng)
    for how in ("truncate", "flip", "flip"):
        if _until(end) < 6:
            break
        _sleep(h, 2 + rng.random())
        lead = _leader(h)
        f = rng.choice([n for n in h.c.nodes if n != lead])
        h.kill_node(f)
        h.fault("kill", "stop", node=f)
        h.corrupt_journal(f, how, rng)
        outcome = h.start_or_rebuild(f)
        h.meta.setdefault("disk_outcomes", []).append([f, how, outcome])
        wait_until(lambda: (h.node_infos().get(f) or {}).get("applied", 0) > 0, timeout=60, what=f"{f} to serve again")
    _sleep(h, _until(end))


def _failpoint_node(h, name: str, value: str = "", tries: int = 3) -> str | None:
    """Arm `name` on the current leader and wait until it fires (the file is consumed). The
    leader may change before it gets there (then it is disarmed and re-armed on the new one).
    Returns the node it fired on."""
    for _ in range(tries):
        lead = _leader(h)
        path = h.arm(lead, name, value)
        try:
            wait_until(lambda: not path.exists(), timeout=15, interval=0.05, what=f"{name} to fire on {lead}")
            return lead
        except TimeoutError:
            if not h.disarm(path):
                return lead            # consumed just now
    return None


def _crashed_node(h, nid: str, name: str) -> None:
    """A node killed itself at a failpoint: wait for its death and a new leader, restart it."""
    wait_until(lambda: not h.c.nodes[nid].alive(), timeout=10, interval=0.05, what=f"{nid} to die at {name}")
    h.fault("failpoint", "start", node=nid, name=name)
    h.c.nodes[nid].proc.wait(timeout=10)
    try:
        h.c.wait_leader(timeout=15, exclude=nid)
    except TimeoutError:
        pass
    _sleep(h, 1 + h.rng.random())
    h.c.start_node(nid)
    h.fault("failpoint", "stop", node=nid, name=name)


def nemesis_failpoints(h, rng, seconds):
    """S03: the leader crashes right after an intent commits (before dispatch); the leader crashes
    after pushing a claimed attempt (before its result commits); a worker crashes after its effect
    (before reporting); the leader's loop stalls right after an intent."""
    end = time.monotonic() + seconds
    _sleep(h, 2 + rng.random())
    n = _failpoint_node(h, "crash_after_fire")
    if n is not None:
        _crashed_node(h, n, "crash_after_fire")
    _sleep(h, 2 + rng.random())
    n = _failpoint_node(h, "crash_after_push")
    if n is not None:
        _crashed_node(h, n, "crash_after_push")
    _sleep(h, 2 + rng.random())
    w = rng.choice(["w1", "w2"])
    path = h.arm(f"worker-{w}", "crash_after_effect")
    try:
        wait_until(lambda: not h.c.workers[w].alive(), timeout=20, interval=0.05, what=f"worker {w} to crash after an effect")
        h.fault("failpoint", "start", worker=w, name="crash_after_effect")
        _sleep(h, h.lease_ms / 1000 + 1)        # its attempt is lost and retried on the other worker
        h.c.start_worker(w, slots=4, drain_grace_s=2, extra_env=h.worker_env(w))
        h.fault("failpoint", "stop", worker=w, name="crash_after_effect")
    except TimeoutError:
        h.disarm(path)
    _sleep(h, 2 + rng.random())
    stall = h.lease_ms / 1000 + 1.5
    n = _failpoint_node(h, "stall_after_fire", f"{stall:g}")
    if n is not None:
        h.fault("failpoint", "start", node=n, name="stall_after_fire", seconds=stall)
        wait_until(lambda: '"stall_end"' in (h.hist / f"{n}.jsonl").read_text(errors="replace"), timeout=stall + 15,
                 interval=0.1, what=f"{n}'s loop stall to end")
        h.fault("failpoint", "stop", node=n, name="stall_after_fire")
    _sleep(h, _until(end))


def ev_expired_under(kind):
    def ev(r, meta):
        n = (r["stats"].get("expired_by_fault") or {}).get(kind, 0)
        return [] if n else [f"no attempt of a worker under {kind} was expired (the fault changed nothing)"]
    return ev


def ev_failpoints(r, meta):
    fired = {tuple(x) for x in r["stats"].get("failpoints", [])}
    want = {("crash_after_fire", "crash"), ("crash_after_push", "crash"), ("crash_after_effect", "crash"),
            ("stall_after_fire", "stall_end")}
    missing = sorted(want - fired)
    return [f"failpoints that never fired: {missing}"] if missing else []


def ev_full_disk(r, meta):
    if meta.get("small_disk_unavailable"):
        return []                 # reported by the test as skipped, not silently passed
    rows = [x for x in meta.get("disk_outcomes") or [] if x[1] == "full"]
    return [] if rows else ["the full-disk step did not run"]


def _has(stat, pred, msg):
    return [] if pred(stat) else [msg]


def ev_none(r, meta):
    return []


def ev_leader_changes(n):
    def ev(r, meta):
        return _has(r["stats"], lambda s: s["leader_changes"] >= n, f"expected >= {n} leader terms, saw {r['stats']['leader_terms']}")
    return ev


def ev_zombie(r, meta):
    s = r["stats"]
    return _has(s, lambda s: s["expired_attempts"] >= 1 and (s["stale_completions_rejected"] + s["effects_stale"] + s["effects_duplicate"]) >= 1,
                "expected an expired attempt and a fenced (stale/duplicate) zombie effect or completion")


def ev_expired(r, meta):
    return _has(r["stats"], lambda s: s["expired_attempts"] >= 1, "expected an attempt lost with its worker")


def ev_faults(kinds):
    def ev(r, meta):
        missing = set(kinds) - set(r["stats"]["fault_kinds"])
        return [f"fault kinds never injected: {sorted(missing)}"] if missing else []
    return ev


def ev_snapshot(r, meta):
    jumps = r["stats"].get("snapshot_jumps") or {}
    return [] if jumps else ["no node skipped ahead in the log (no snapshot was installed)"]


@dataclass
class Scenario:
    name: str
    title: str
    seconds: float
    nemesis: Callable
    evidence: list = field(default_factory=list)
    profile: str = "full"
    raft: dict = field(default_factory=dict)
    failpoints: bool = False
    worker_proxies: bool = False
    small_disks: dict = field(default_factory=dict)
    netns: bool = False             # nodes and workers in network namespaces (netns.py; needs root)
    jobs: list | None = None        # the workload's jobs (default: harness.WORKLOAD)
    shards: int = 1                 # shard groups; > 1: jobs spread over every shard, checks per shard


def ev_shard_failovers(n):
    """Sharded runs: at least `n` leader changes summed over the shards (each shard's first term
    aside), and at least one fault hit a node that led two shards or more (several groups failed
    over at once)."""
    def ev(r, meta):
        per = r["stats"].get("shards") or {}
        changes = sum(max(0, len(v["leader_terms"]) - 1) for v in per.values())
        out = [] if changes >= n else [f"expected >= {n} leader changes over the shards, saw {changes}"]
        if not r["stats"].get("faults_on_multi_leader"):
            out.append("no fault hit a node leading two shards or more")
        return out
    return ev


def _sharded_jobs(shards: int) -> list:
    from .harness import sharded_workload
    return sharded_workload(shards)


def ev_converged(n):
    def ev(r, meta):
        conv = r["stats"].get("convergence") or []
        return [] if len(conv) >= n else [f"expected {n} convergence checks after heals, saw {len(conv)}"]
    return ev


SCENARIOS = {s.name: s for s in [
    Scenario("S01", "no faults, checkers quiet", 10, nemesis_none, [ev_none], "smoke"),
    Scenario("S02", "kill -9 the leader every ~8 s, restart 3 s later", 22, nemesis_kill_leader,
             [ev_faults(["kill"]), ev_leader_changes(3)], "smoke"),
    Scenario("S03", "failpoints: leader crash after an intent commits / after a push, worker crash after its "
             "effect, leader loop stalled after an intent", 30, nemesis_failpoints,
             [ev_failpoints, ev_leader_changes(3), ev_expired], failpoints=True),
    Scenario("S04", "SIGSTOP the leader past the election timeout, repeatedly", 28, nemesis_pause_leader,
             [ev_faults(["pause"]), ev_leader_changes(3)]),
    Scenario("S05", "isolate the leader (both ways, then one way)", 20, nemesis_isolate_leader,
             [ev_faults(["partition"]), ev_leader_changes(2)], "smoke"),
    Scenario("S06", "partition storm: isolation, bridge, one-way, delay, flapping", 36, nemesis_partition_storm,
             [lambda r, m: _has(r["stats"], lambda s: s["faults"] >= 4, "expected >= 4 network faults")]),
    Scenario("S07", "SIGSTOP a worker past its lease; its retry succeeds elsewhere; the zombie is fenced", 20,
             nemesis_pause_worker, [ev_faults(["pause_worker"]), ev_zombie], "smoke"),
    Scenario("S08", "worker kill -9 and worker<->cluster partition (both ways, one way) while it runs attempts",
             34, nemesis_worker_faults, [ev_faults(["kill_worker", "worker_partition"]), ev_expired_under("kill_worker"),
              ev_expired_under("worker_partition"), ev_zombie],
             worker_proxies=True),
    Scenario("S09", "clock skew and strobe, leader handover between skewed nodes", 30, nemesis_clock,
             [ev_faults(["clock", "kill"]), ev_leader_changes(2)]),
    Scenario("S10", "kill -9 all three nodes at once, then staggered, and restart", 26, nemesis_kill_all,
             [ev_faults(["kill"]), ev_leader_changes(3)]),
    Scenario("S11", "a follower down across log compactions, rebuilt from a snapshot, then needed for quorum",
             30, nemesis_follower_snapshot, [ev_faults(["kill"]), ev_snapshot],
             raft={"compaction_entries": 40, "compaction_seconds": 1}),
    Scenario("S12", "disk faults: a full disk (tmpfs in a mount namespace), a torn journal tail, flipped bits; "
             "the node crashes, refuses or recovers, never diverges", 40, nemesis_disk,
             [ev_faults(["disk"]), ev_full_disk], small_disks={"n3": "48m"}),
    Scenario("S13", "netns: the leader cut off its peers by iptables DROP for 10 s both ways, then 10 s one way "
             "(receives, cannot send); every replica converges within 20 s of each heal", 26,
             nemesis_ns_cuts([("both", 10), ("out", 10)], load=True),
             [ev_faults(["partition"]), ev_leader_changes(2), ev_converged(2)], "smoke", netns=True),
    Scenario("S14", "netns: 30 s leader cuts (both ways, one way), then four 10 s cuts in a row, under a write "
             "load; converged within 20 s of every heal", 150,
             nemesis_ns_cuts([("both", 30), ("out", 30), ("both", 10), ("out", 10), ("both", 10), ("in", 10)],
                             load=True),
             [ev_faults(["partition"]), ev_leader_changes(4), ev_converged(6)], netns=True, jobs=TICK_JOBS),
    # The sharded profile: 4 shard groups on 3 nodes, the workload spread over every shard; the
    # nemesis hits the node leading the most shards; every index/term/hash/leader check per shard.
    Scenario("S02x4", "4 shards: kill -9 the node leading the most shards every ~8 s, restart 3 s later", 24,
             nemesis_kill_leader, [ev_faults(["kill"]), ev_shard_failovers(3)], "smoke", shards=4,
             jobs=_sharded_jobs(4)),
    Scenario("S05x4", "4 shards: isolate the node leading the most shards (both ways, then one way)", 22,
             nemesis_isolate_leader, [ev_faults(["partition"]), ev_shard_failovers(3)], "smoke", shards=4,
             jobs=_sharded_jobs(4)),
]}
SMOKE = [n for n, s in SCENARIOS.items() if s.profile == "smoke"]
FULL = [n for n, s in SCENARIOS.items() if s.profile == "full"]
