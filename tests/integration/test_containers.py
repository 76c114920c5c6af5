"""Container jobs end to end (schedd_worker.handlers.container), on a real 3-node cluster and real
worker processes running rootful podman: output and exit codes, timeout, cancel, an OOM kill and
a pids limit reported as such, network none, secret env only inside the container (never on a
command line), routing (never to a worker with containers off), and a worker SIGKILLed mid-run:
its container removed within the lease by the watchdog, the retry on a new fencing token; a
worker SIGKILLed together with its watchdogs (the container survives): restarted under its name,
it removes the leftover container before it connects, and the attempt is retried; a root
worker that gives each team its own uid runs their containers through its broker, each as its
team's uid with no capability (never as root, never as another team's uid).

The image is built offline (tests/support/containers.py); without podman the tests are skipped
with a loud reason (CI installs it: .ci/run)."""

from __future__ import annotations

import hashlib
import os
import secrets
import signal
import stat
import subprocess

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from schedd_worker.handlers.container import DEFAULT_ULIMITS
from tests.support.cluster import finished, workers_of
from tests.support.containers import containers, remove_containers
from tests.support.users import reachable_scratch

pytestmark = pytest.mark.integration

LEASE_MS = 3000


def start(cluster_factory, *workers: tuple[str, tuple[str, ...]]):
    c = cluster_factory(size=3, scheduler={"lease_ms": LEASE_MS})
    c.start()
    c.wait_leader(timeout=60)
    for name, args in workers:
        c.start_worker(name, slots=4, drain_grace_s=5, extra_args=args)
    client = c.client(timeout=30)
    wait_until(lambda: sorted(workers_of(c)) == sorted(n for n, _ in workers), timeout=60,
               what="workers to connect")
    wait_until(lambda: feature_level(c) >= 6, timeout=60, what="the cluster at feature level 6")
    return c, client


def feature_level(c) -> int:
    from schedd_proto import scheduler_pb2 as pb
    from schedd_proto import scheduler_pb2_grpc as pb_grpc
    with c.channel(c.leader() or "n1") as ch:
        return int(pb_grpc.ClusterStub(ch).Status(pb.ClusterStatusRequest(), timeout=5).feature_level)


def watchdogs(name: str) -> list[int]:
    """Pids of the watchdog processes of container `name` (its sh, then its cat)."""
    shells = [pid for pid, line in processes() if line.startswith(b"/bin/sh\0-c\0cat >/dev/null")
              and line.rstrip(b"\0").endswith(b"\0" + name.encode())]
    cats = [pid for pid, line in processes() if line == b"cat\0" and _parent(pid) in shells]
    return shells + cats


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def box(image: str, **kw) -> dict:
    return {"image": image, **kw}


def run(client, name: str, timeout: float = 90):
    eid = client.trigger_job(name).id
    return wait_until(lambda: finished(client, eid), timeout=timeout, what=f"{name} to finish")


def processes() -> list[tuple[int, bytes]]:
    """(pid, raw cmdline) of every process."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out.append((int(pid), f.read()))
            except OSError:
                pass
    return out


def cmdlines() -> list[bytes]:
    return [line for _, line in processes()]


def test_container_jobs_end_to_end(cluster_factory, container_image):
    image = container_image
    c, client = start(cluster_factory, ("plain", ("--container-runtime", "off")))

    # routing: with only a worker that has containers off, a container job waits and says why
    client.put_job(job_spec("hello", container=box(image, command='echo "hi from $SCHEDD_EXECUTION_ID"; id -u')))
    eid = client.trigger_job("hello").id
    ex = wait_until(lambda: (e := client.get_execution(eid)).reason and e, timeout=30, what="a waiting reason")
    assert ex.state == "SCHEDULED" and ex.reason == "waiting: no worker can run container jobs", ex
    assert not ex.attempts

    c.start_worker("boxes", slots=4, drain_grace_s=5)
    ex = wait_until(lambda: finished(client, eid), timeout=90, what="hello to run on the container worker")
    assert ex.state == "SUCCEEDED" and ex.attempts[0].worker == "boxes", ex
    assert f"hi from {eid}" in ex.attempts[0].output_tail and ex.attempts[0].exit_code == 0

    client.put_job(job_spec("fails", container=box(image, args=["sh", "-c", "echo bad >&2; exit 7"])))
    ex = run(client, "fails")
    assert ex.state == "FAILED" and ex.attempts[0].exit_code == 7 and "bad" in ex.attempts[0].output_tail
    assert ex.attempts[0].error == "exit status 7"
    # its stderr apart, from the worker's run log (the engine's pipes are read by the worker)
    logged = list(client.logs(ex.id, stream="stderr"))
    assert b"".join(ch.data for ch in logged if ch.kind == "output") == b"bad\n"
    assert logged[-1].kind == "end" and logged[-1].state == "FAILED"

    client.put_job(job_spec("slow", timeout=2, container=box(image, command="echo started; sleep 600")))
    ex = run(client, "slow")
    assert ex.state == "TIMED_OUT" and "timed out after 2s" in ex.attempts[0].error, ex
    assert "started" in ex.attempts[0].output_tail
    assert not containers(f"label=schedd.execution={ex.id}"), "the timed-out container was not removed"

    client.put_job(job_spec("long", container=box(image, command="sleep 600")))
    eid = client.trigger_job("long").id
    wait_until(lambda: containers(f"label=schedd.execution={eid}", "status=running"), timeout=60,
               what="long's container to run")
    assert client.cancel_execution(eid).cancel_requested
    ex = wait_until(lambda: finished(client, eid), timeout=60, what="the cancel")
    assert ex.state == "CANCELLED" and ex.attempts[0].state == "CANCELLED"
    assert not containers(f"label=schedd.execution={eid}")

    client.put_job(job_spec("hog", container=box(image, memory="64Mi",
                                                   command='x=$(yes | head -c 300000000); echo survived')))
    ex = run(client, "hog")
    assert ex.state == "FAILED" and ex.attempts[0].error == "killed: out of memory (limit 64 MiB)", ex
    assert "survived" not in ex.attempts[0].output_tail

    client.put_job(job_spec("forks", container=box(image, pids=5,
                                                     command="for i in $(seq 20); do sleep 5 & done; wait")))
    ex = run(client, "forks")
    assert ex.state == "FAILED" and "can't fork" in ex.attempts[0].output_tail, ex

    port = c.nodes[c.leader()].grpc.rpartition(":")[2]
    client.put_job(job_spec("offline", container=box(
        image, command=f"if nc -w 2 127.0.0.1 {port} </dev/null; then echo reached; else echo unreachable; fi")))
    ex = run(client, "offline")
    assert ex.state == "SUCCEEDED" and "unreachable" in ex.attempts[0].output_tail, ex

    secret = f"pw-{secrets.token_hex(12)}"
    client.put_job(job_spec("secret", env_secret={"DB_PASSWORD": secret}, container=box(
        image, command='printf %s "$DB_PASSWORD" | sha256sum; echo waiting; sleep 3')))
    eid = client.trigger_job("secret").id
    wait_until(lambda: containers(f"label=schedd.execution={eid}", "status=running"), timeout=60,
               what="secret's container to run")
    assert not any(secret.encode() in line for line in cmdlines()), "the secret is on a command line"
    ex = wait_until(lambda: finished(client, eid), timeout=60, what="secret to finish")
    assert ex.state == "SUCCEEDED" and hashlib.sha256(secret.encode()).hexdigest() in ex.attempts[0].output_tail

    # nothing ran on the worker with containers off, and nothing is left behind
    runs = [e for job in ("hello", "fails", "slow", "long", "hog", "forks", "offline", "secret")
            for e in client.list_executions(job)]
    assert all(a.worker == "boxes" for e in runs for a in e.attempts)
    assert not containers("label=schedd.worker=boxes")


def test_worker_killed_mid_run_its_container_goes_and_the_retry_has_a_new_token(cluster_factory,
                                                                                container_image):
    c, client = start(cluster_factory, ("w1", ()))
    eid = kill_worker_mid_run(c, client, "w1", container_image)
    c.start_worker("w2", slots=2, drain_grace_s=5)
    ex = retried(client, eid)
    assert ex.attempts[0].worker == "w1" and ex.attempts[-1].worker == "w2"


def kill_worker_mid_run(c, client, worker: str, image: str, team: str = "") -> str:
    """SIGKILL `worker` while a container attempt runs on it; its container must be gone within
    the lease. Returns the execution id (its retry prints its fencing token)."""
    client.put_job(job_spec("victim", team=team, retry={"max_attempts": 3, "initial_backoff_seconds": 1},
                            container=box(image, command='echo "token $SCHEDD_FENCING_TOKEN"; '
                                                         '[ "$SCHEDD_ATTEMPT" = 1 ] && sleep 600; echo done')))
    eid = client.trigger_job("victim").id
    running = wait_until(lambda: containers(f"label=schedd.execution={eid}", "status=running"), timeout=60,
                         what="the container to run")
    c.workers[worker].proc.send_signal(signal.SIGKILL)
    c.workers[worker].proc.wait(timeout=30)
    wait_until(lambda: not containers(f"name={running[0]}"), timeout=LEASE_MS / 1000, interval=0.1,
               what="the dead worker's container to be removed within the lease")
    return eid


def retried(client, eid: str):
    """The execution after its retry: the lost attempt, then a success on a new fencing token."""
    ex = wait_until(lambda: finished(client, eid), timeout=90, what="the retry to finish")
    assert ex.state == "SUCCEEDED", ex
    first, last = ex.attempts[0], ex.attempts[-1]
    assert first.state == "LOST" and last.fencing_token > first.fencing_token
    assert f"token {last.fencing_token}" in last.output_tail
    return ex


def caps_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.split(":\t", 1) for line in f.read().splitlines() if line.startswith(("Cap", "NoNew")))


def brokers() -> list[int]:
    return [pid for pid, line in processes() if b"schedd_worker.handlers.container_broker" in line]


@pytest.fixture
def reachable():
    """A folder outside pytest's 0700 tmp tree, which the teams' uids could not traverse."""
    with reachable_scratch("schedd-containers-") as d:
        yield d


def test_a_root_worker_that_separates_teams_runs_containers_through_its_broker(cluster_factory, container_image,
                                                                              reachable):
    """As `schedd local` runs it (root, a uid per team from a range, nothing configured): the
    worker drops root's capabilities, its broker keeps them, and each team's container runs as
    that team's own uid with none; no container runs as root or as another team's uid; cancel
    goes through the broker; a worker SIGKILLed mid-run takes its container (and its broker)
    with it within the lease, and the retry runs on a new fencing token."""
    state = reachable / "jobs"
    before = set(brokers())
    c = cluster_factory(size=3, scheduler={"lease_ms": LEASE_MS})
    c.start()
    c.wait_leader(timeout=60)
    c.start_worker("sep", slots=4, drain_grace_s=5, uid_range=(62000, 62099), state_dir=state)
    client = c.client(timeout=30)
    wait_until(lambda: workers_of(c) == ["sep"], timeout=60, what="the worker to connect")
    wait_until(lambda: feature_level(c) >= 6, timeout=60, what="the cluster at feature level 6")
    worker = c.workers["sep"].proc.pid
    # CAP_SETUID, CAP_SETGID, CAP_KILL, and CAP_CHOWN for the teams' folders: nothing an engine needs
    assert caps_of(worker)["CapEff"] == "00000000000000e1", caps_of(worker)
    assert caps_of(worker)["NoNewPrivs"] == "1"
    broker = [pid for pid in brokers() if pid not in before]
    assert len(broker) == 1 and _parent(broker[0]) == worker
    assert int(caps_of(broker[0])["CapEff"], 16) > 0xFFFF, "the broker lost root's capabilities"

    probe = "echo uid=$(id -u) gid=$(id -g); grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status"
    uids = {}
    for team in ("payments", "analytics"):
        client.put_job(job_spec(f"who-{team}", team=team, container=box(container_image, command=probe)))
        ex = run(client, f"who-{team}")
        assert ex.state == "SUCCEEDED", ex
        out = ex.attempts[0].output_tail
        uid = int(out.split("uid=")[1].split()[0])
        assert 62000 <= uid <= 62099 and f"uid={uid} gid={uid}" in out, out
        assert "CapEff:\t0000000000000000" in out and "CapPrm:\t0000000000000000" in out, out
        assert "NoNewPrivs:\t1" in out, out
        uids[team] = uid
        # through the broker, into the worker's run log, which no team's uid can open
        logged = b"".join(ch.data for ch in client.logs(ex.id) if ch.kind == "output").decode()
        assert f"uid={uid} gid={uid}" in logged, logged
    assert uids["payments"] != uids["analytics"]
    assert stat.S_IMODE(os.stat(state / "logs").st_mode) == 0o700 and os.stat(state / "logs").st_uid == 0

    for user, why in (("0", "never run as uid or gid 0"), (str(uids["analytics"]), "and no other")):
        client.put_job(job_spec("as-other", team="payments", container=box(container_image, user=user, command="id -u")))
        ex = run(client, "as-other")
        assert ex.state == "FAILED" and why in ex.attempts[0].error, ex
        assert not ex.attempts[0].output_tail

    client.put_job(job_spec("long", team="payments", container=box(container_image, command="sleep 600")))
    eid = client.trigger_job("long").id
    wait_until(lambda: containers(f"label=schedd.execution={eid}", "status=running"), timeout=60,
               what="long's container to run")
    assert client.cancel_execution(eid).cancel_requested
    ex = wait_until(lambda: finished(client, eid), timeout=60, what="the cancel")
    assert ex.state == "CANCELLED" and ex.attempts[0].state == "CANCELLED", ex
    assert not containers(f"label=schedd.execution={eid}")

    eid = kill_worker_mid_run(c, client, "sep", container_image, team="payments")
    wait_until(lambda: broker[0] not in brokers(), timeout=30, what="the broker to exit with its worker")
    c.start_worker("sep", slots=2, drain_grace_s=5, uid_range=(62000, 62099), state_dir=state)
    retried(client, eid)
    assert not containers("label=schedd.worker=sep", "status=running")


def test_a_worker_restarted_after_its_watchdogs_died_too_removes_its_leftover_container(
        cluster_factory, container_image):
    """The watchdog dies with the worker (the OOM killer took both, say): nothing removes the
    container then, until the worker starts again under its name and sweeps what it labelled."""
    c, client = start(cluster_factory, ("w1", ()))
    decoy = f"schedd-decoy-{secrets.token_hex(4)}"
    client.put_job(job_spec("orphan", retry={"max_attempts": 3, "initial_backoff_seconds": 1}, container=box(
        container_image, command='echo "token $SCHEDD_FENCING_TOKEN"; [ "$SCHEDD_ATTEMPT" = 1 ] && sleep 600; echo done')))
    eid = client.trigger_job("orphan").id
    name = wait_until(lambda: containers(f"label=schedd.execution={eid}", "status=running"), timeout=60,
                      what="the container to run")[0]
    guards = wait_until(lambda: (g := watchdogs(name)) and len(g) == 2 and g, timeout=30, what="its watchdog")
    try:
        for pid in guards:                  # the watchdog first: the worker's death would wake it
            os.kill(pid, signal.SIGKILL)
        c.workers["w1"].proc.send_signal(signal.SIGKILL)
        c.workers["w1"].proc.wait(timeout=30)
        wait_until(lambda: not watchdogs(name), timeout=30, what="the watchdog to be gone")
        # nothing is left to remove it: it outlives the lease
        wait_until(lambda: client.get_execution(eid).attempts[0].state == "LOST", timeout=60,
                   what="the attempt to be expired LOST")
        assert containers(f"name={name}", "status=running"), "the container should have survived"
        # a same-named worker of another cluster on this host: its running container is not ours
        subprocess.run(["podman", "run", "-d", "--name", decoy, "--label", "schedd.worker=w1",
                        "--label", "schedd.cluster=0123456789abcdef", "--network", "none",
                        *[x for u in DEFAULT_ULIMITS for x in ("--ulimit", u)],
                        container_image, "sleep", "600"], check=True, capture_output=True, timeout=120)

        c.start_worker("w1", slots=2, drain_grace_s=5)
        wait_until(lambda: "w1" in workers_of(c), timeout=60, what="w1 to reconnect")
        assert not containers(f"name={name}"), "the restarted worker connected before sweeping"
        assert containers(f"name={decoy}", "status=running"), "it removed another cluster's container"
        log = c.workers["w1"].log.read_text()
        assert f"removed 1 container(s) left by an earlier run of worker w1: {name}" in log

        ex = wait_until(lambda: finished(client, eid), timeout=90, what="the retry to finish")
        assert ex.state == "SUCCEEDED", ex
        first, last = ex.attempts[0], ex.attempts[-1]
        assert first.state == "LOST" and last.worker == "w1" and last.fencing_token > first.fencing_token
        assert f"token {last.fencing_token}" in last.output_tail and "done" in last.output_tail
        assert not containers(f"label=schedd.execution={eid}", "label=schedd.worker=w1")
    finally:
        for pid in watchdogs(name):
            os.kill(pid, signal.SIGKILL)
        remove_containers(f"name={name}")
        remove_containers(f"name={decoy}")
