"""`schedd local`: a 3-node cluster on 127.0.0.1 with a demo job, in the foreground.

Secure by default, as a real deployment: a local CA and node, worker and admin certificates in
the data dir (keys 0600; schedd.security.certs), TLS with client certificates on every gRPC port,
access control on, the management token from `acl bootstrap`, a worker token for the local
worker, and a schedctl context file (0600) holding the addresses, the admin's certificate and
the token, so `export SCHEDD_CONTEXT=...` (and activating the virtualenv schedctl is installed
in, which the banner prints when there is one) is all a second terminal needs. With --data-dir the
credentials are kept beside the data and reused on the next start.

Started as root, its worker runs each team's jobs as a uid of the team's own from
`schedd_worker.uids.DEFAULT_UID_RANGE` (never as root: no --allow-root), with the team's working
folders in a temporary directory of their own (the data dir is 0700: a team's uid could not reach
a folder inside it), removed on exit; started as anyone else, every job runs as that user, and it
says so.

Ctrl-C, SIGTERM or SIGHUP drains the worker (running jobs get LOCAL_DRAIN_S, then are cancelled
and their process groups killed), then stops every node (SIGTERM, then SIGKILL after a grace) and removes the
temporary data folder (a --data-dir given by the user is kept). That folder holds the CA key, the
cluster secret and both tokens, so its removal must survive every way out: a closed stdout
(`schedd local | head -3`, or a filter killed by the same Ctrl-C) ends the run quietly instead of
raising BrokenPipeError out of the cleanup, a signal during start-up stops it there, and each
cleanup step runs even when the one before it fails. The root, its logs and the node configs are
private (0700/0600, LocalCluster).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from schedd.runtime.cluster import ADMIN_TOKEN_FILE, LocalCluster, ports_free
from schedd_client import Client, SchedError, job_spec
from schedd_worker.uids import DEFAULT_UID_RANGE

DEMO_JOB = "demo"
LOCAL_WORKER = "local-worker"
LOCAL_WORKER_SLOTS = 4
LOCAL_DRAIN_S = 5.0                 # at exit, running jobs get this long before they are cancelled
DEMO_SCHEDULE = "@every 5s"
PROGRESS_POLL_S = 1.0               # how often the progress is looked at: the first success shows at once,
PROGRESS_EVERY_S = 10.0             # ...after it, a changed line is printed at most this often
CONTEXT_FILE = "schedctl-context.toml"
WORKER_CONTEXT_FILE = "worker-context.toml"    # for a worker of your own (schedd_worker.Worker.from_context)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(Exception):
    """A stop signal arrived while the cluster was still starting: leave start-up at once."""


@dataclass(slots=True)
class Exit:
    """How `schedd local` learns it should stop: a signal, or a reader that went away.

    `starting`: a signal raises Interrupted (start-up waits up to a minute on the leader, and a
    Ctrl-C should not have to wait for it); afterwards it only sets `stop`, which the progress
    loop watches."""
    stop: threading.Event = field(default_factory=threading.Event)
    starting: bool = True
    reader_gone: bool = False

    def on_signal(self, signum: int, _frame: object) -> None:
        self.stop.set()
        if self.starting:
            self.starting = False
            raise Interrupted(signal.Signals(signum).name)

    def say(self, *args: object, err: bool = False) -> None:
        """print(), flushed, unless the reader is gone. A closed pipe (EPIPE) means whoever read
        our output stopped reading: stop the cluster, and send what is left to /dev/null so
        neither the cleanup nor the interpreter's last flush raises BrokenPipeError."""
        if self.reader_gone:
            return
        try:
            print(*args, file=sys.stderr if err else sys.stdout, flush=True)
        except (BrokenPipeError, ValueError):     # ValueError: the stream was closed
            self.reader_gone = True
            self.stop.set()
            _silence_stdout()


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, stream.fileno())
    os.close(devnull)


@contextlib.contextmanager
def _signals(handler: Callable[[int, object], None]) -> Iterator[None]:
    """`handler` on the stop signals; during the cleanup after it, the signals are ignored, so a
    second Ctrl-C cannot cut the removal of the data folder short."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def _credentials(cluster: LocalCluster) -> str:
    """The management token (bootstrapped once; kept in the data dir) and the local worker's
    token; returns the worker's."""
    cluster.bootstrap()        # once: LocalCluster keeps both tokens in its root and reloads them
    return cluster.worker_token(max_slots=LOCAL_WORKER_SLOTS)


def _create_demo(client: Client) -> None:
    try:
        client.put_job(job_spec(DEMO_JOB, schedule=DEMO_SCHEDULE, team="demo",
                                description="created by `schedd local`: fires every 5 seconds",
                                command="echo hello from schedd"))
    except SchedError as e:
        raise RuntimeError(f"could not create the demo job: {e.message}") from None


def _progress(client: Client) -> str:
    """How the demo is doing: recorded executions and their states."""
    try:
        counts = Counter(ex.state for ex in client.list_executions(DEMO_JOB, limit=1000))
    except SchedError as e:
        return f"cluster unreachable ({e.message})"
    states = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return f"demo executions: {sum(counts.values())}" + (f" ({states})" if states else "")


def _previous_base_port(root: Path) -> int | None:
    """The first gRPC port of a cluster laid out in `root` before (LocalCluster's n1.toml)."""
    try:
        with (root / "n1.toml").open("rb") as f:
            return int(str(tomllib.load(f)["grpc_address"]).rsplit(":", 1)[1])
    except (OSError, KeyError, ValueError, tomllib.TOMLDecodeError):
        return None


def run_local(*, data_dir: str | None, nodes: int = 3, base_port: int = 0, demo: bool = True,
              fsync: str = "always", shards: int = 1) -> int:
    temp = data_dir is None
    root = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="schedd-local-"))
    out = Exit()
    try:
        with _signals(out.on_signal):
            return _run(out, root, nodes=nodes, base_port=base_port, demo=demo, fsync=fsync, temp=temp,
                        shards=shards)
    except Interrupted:             # a signal between start-up and the cleanup taking over
        return 0
    finally:
        if temp:                    # last, and whatever happened before: it holds the CA key
            shutil.rmtree(root, ignore_errors=True)
        out.say("schedd local: stopped")
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)


def _run(out: Exit, root: Path, *, nodes: int, base_port: int, demo: bool, fsync: str, temp: bool,
         shards: int = 1) -> int:
    previous = _previous_base_port(root)
    if previous is not None and previous != base_port:
        # The nodes' committed membership (pysyncobj's dump, membership.json) names the addresses
        # they were first started on, and it wins over the config: keep them.
        out.say(f"schedd local: {root} holds a cluster on ports from {previous}; reusing them")
        base_port = previous
    elif base_port and not ports_free(list(range(base_port, base_port + LocalCluster.ports_needed(nodes, shards)))):
        out.say(f"schedd local: ports {base_port}-{base_port + LocalCluster.ports_needed(nodes, shards) - 1} are "
                "not all free; using free ports instead")
        base_port = 0
    cluster = LocalCluster(root, size=nodes, base_port=base_port, fsync=fsync, acl=True, tls=True, shards=shards)
    client: Client | None = None
    stack = contextlib.ExitStack()        # the jobs' folder, removed after the worker stopped
    try:
        cluster.start()
        sharded = f", {shards} shard groups" if shards > 1 else ""
        out.say(f"schedd local: starting {nodes} node(s) on 127.0.0.1 (TLS, access control on{sharded}), "
                f"data in {root}")
        leader = cluster.wait_leader(timeout=60)
        if shards > 1:
            cluster.wait_shards(timeout=60)
        worker_token = _credentials(cluster)
        context = cluster.write_context(root / CONTEXT_FILE)
        cluster.write_context(root / WORKER_CONTEXT_FILE, kind="worker", name="sdk-worker", token=worker_token)
        client = cluster.client(timeout=30)
        jobs = _start_worker(cluster, worker_token, stack)
        if demo:
            _create_demo(client)
        out.starting = False
        _banner(out, cluster, leader, demo, context, temp)
        out.say(_who_runs_jobs(jobs))
        _watch(out, cluster, client)
        return 0
    except Interrupted:
        return 0
    except (RuntimeError, TimeoutError) as e:
        out.say(f"schedd local: {e}", err=True)
        return 1
    finally:
        out.starting = False
        out.say("schedd local: stopping...")
        try:
            if client is not None:
                client.close()
        finally:
            with stack:
                _stop_worker(cluster)
                cluster.stop()


def _stop_worker(cluster: LocalCluster) -> None:
    """Drain the worker (SIGTERM): it cancels what still runs after its grace and kills those
    process groups. The SIGKILL of `cluster.stop()` alone would leave running jobs behind, in a
    jobs' folder about to be removed."""
    w = cluster.workers.get(LOCAL_WORKER)
    proc = w.running() if w is not None else None
    if proc is None:
        return
    proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):     # then cluster.stop() kills it
        proc.wait(timeout=LOCAL_DRAIN_S + 15)


def _start_worker(cluster: LocalCluster, token: str, stack: contextlib.ExitStack) -> Path | None:
    """The local worker; as root, with a uid per team and their folders in a fresh directory
    (returned; removed by `stack`), else as this user (None)."""
    if os.geteuid() != 0:
        cluster.start_worker(LOCAL_WORKER, slots=LOCAL_WORKER_SLOTS, token=token,
                             drain_grace_s=LOCAL_DRAIN_S)
        return None
    jobs = Path(tempfile.mkdtemp(prefix="schedd-local-jobs-"))
    stack.callback(shutil.rmtree, jobs, ignore_errors=True)
    jobs.chmod(0o711)                     # the teams' uids traverse it to their own folder
    cluster.start_worker(LOCAL_WORKER, slots=LOCAL_WORKER_SLOTS, token=token,
                         drain_grace_s=LOCAL_DRAIN_S, uid_range=DEFAULT_UID_RANGE, state_dir=jobs)
    return jobs


def _who_runs_jobs(jobs: Path | None) -> str:
    if jobs is None:
        return (f"Jobs run as your user (uid {os.geteuid()}), all of them: any job can read the "
                "others' environment and files. Start it as root for a uid per team, or use "
                "container jobs.\n")
    first, last = DEFAULT_UID_RANGE
    return (f"Jobs run as uids {first}-{last}, one per team (never root); each team's working "
            f"folder is in {jobs / 'work'}.\n")


def _watch(out: Exit, cluster: LocalCluster, client: Client) -> None:
    """Print the demo's progress until told to stop (a signal, or the reader gone)."""
    last, printed_at = "", 0.0
    while not out.stop.wait(PROGRESS_POLL_S):
        dead = [n.id for n in (*cluster.nodes.values(), *cluster.workers.values()) if not n.alive()]
        line = f"[schedd local] {_progress(client)}"
        if dead:
            line += f"; node(s) down: {', '.join(dead)} (see {cluster.root / 'logs'})"
        due = time.monotonic() - printed_at >= PROGRESS_EVERY_S or "SUCCEEDED" not in last or dead
        if line != last and due:
            out.say(line)
            last, printed_at = line, time.monotonic()


def activate_lines(prefix: str | None = None, base_prefix: str | None = None) -> list[str]:
    """The line that puts schedctl on the PATH of a new terminal: this Python's virtualenv's
    activate script, when it runs in one (a new shell has not activated it); none otherwise."""
    prefix = sys.prefix if prefix is None else prefix
    base_prefix = sys.base_prefix if base_prefix is None else base_prefix
    activate = Path(prefix) / "bin" / "activate"
    if prefix == base_prefix or not activate.exists():
        return []
    return [f"  . {shlex.quote(str(activate))}          # schedctl is installed in this virtualenv"]


def _banner(out: Exit, cluster: LocalCluster, leader: str, demo: bool, context: Path, temp: bool) -> None:
    sharded = f", {cluster.shards} shard groups (shard 0's leader {leader}; one Raft port per node)" \
        if cluster.shards > 1 else f", leader {leader}"
    lines = [f"\nschedd local is up: {len(cluster.nodes)} nodes{sharded}\n"]
    lines += [f"  {n.id}  gRPC {n.grpc}   Raft {n.raft}   metrics {cluster.http_url(n.id, '/metrics')}   pid {n.pid}"
              for n in cluster.nodes.values()]
    lines.append(f"dashboard {cluster.http_url(next(iter(cluster.nodes)))}")   # read as it is: keep it so
    lines += [f"  worker {w.id}, {LOCAL_WORKER_SLOTS} slots, pid {w.pid}" for w in cluster.workers.values()]
    if demo:
        lines.append(f"\nDemo job '{DEMO_JOB}' fires {DEMO_SCHEDULE} and runs `echo hello from schedd` on the "
                     f"worker; see `schedctl run list {DEMO_JOB}` and `schedctl run get <ID>` for its output.")
    lines += ["\nTalk to it from another terminal (the context file holds the addresses, the CA, the admin's"
              " client certificate and the management token; keep it private):\n",
              *activate_lines(),
              f"  export SCHEDD_CONTEXT={context}", "  schedctl cluster status", "  schedctl job list",
              "  schedctl dashboard                 # a login link to the web dashboard",
              "  schedctl worker list"]
    if cluster.shards > 1:
        lines.append("  schedctl shard list                # every shard's leader, replicas, term, jobs")
    if demo:
        lines.append(f"  schedctl run list {DEMO_JOB}")
    lines += ["  schedctl job create nightly --schedule '0 2 * * *' --tz Europe/Berlin --command 'backup.sh'",
              "\nA worker of your own (schedd_worker.Worker.from_context() reads it; README.md):\n",
              f"  export SCHEDD_WORKER_CONTEXT={context.parent / WORKER_CONTEXT_FILE}",
              f"\nCredentials: {cluster.tls_dir} (CA, node, worker and admin certificates),"
              f" {cluster.root / ADMIN_TOKEN_FILE} (management token)",
              f"Logs: {cluster.root / 'logs'}"]
    lines.append("Ctrl-C stops everything" + (" and removes this folder.\n" if temp else ".\n"))
    out.say("\n".join(lines))
