"""`schedd local`: a 3-node cluster on 127.0.0.1 with a demo job, in the foreground.

Secure by default, as a real deployment: a local CA and node, worker and admin certificates in
the data dir (keys 0600; schedd.security.certs), TLS with client certificates on every gRPC port,
access control on, the management token from `acl bootstrap`, a worker token for the local
worker, and a schedctl context file (0600) holding the addresses, the admin's certificate and
the token, so `export SCHEDD_CONTEXT=...` is all a second terminal needs. With --data-dir the
credentials are kept beside the data and reused on the next start.

Ctrl-C or SIGTERM stops every node (SIGTERM, then SIGKILL after a grace) and removes the
temporary data folder (a --data-dir given by the user is kept).
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import tomllib
import threading
import time
from collections import Counter
from pathlib import Path

from schedd.runtime.cluster import ADMIN_TOKEN_FILE, LocalCluster, ports_free
from schedd_client import Client, SchedError, job_spec

DEMO_JOB = "demo"
LOCAL_WORKER = "local-worker"
LOCAL_WORKER_SLOTS = 4
DEMO_SCHEDULE = "@every 5s"
PROGRESS_POLL_S = 1.0               # how often the progress is looked at: the first success shows at once,
PROGRESS_EVERY_S = 10.0             # ...after it, a changed line is printed at most this often
CONTEXT_FILE = "schedctl-context.toml"


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
              fsync: str = "always") -> int:
    temp = data_dir is None
    root = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="schedd-local-"))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    previous = _previous_base_port(root)
    if previous is not None and previous != base_port:
        # The nodes' committed membership (pysyncobj's dump, membership.json) names the addresses
        # they were first started on, and it wins over the config: keep them.
        print(f"schedd local: {root} holds a cluster on ports from {previous}; reusing them", flush=True)
        base_port = previous
    elif base_port and not ports_free(list(range(base_port, base_port + 3 * nodes))):
        print(f"schedd local: ports {base_port}-{base_port + 3 * nodes - 1} are not all free; "
              "using free ports instead", flush=True)
        base_port = 0
    cluster = LocalCluster(root, size=nodes, base_port=base_port, fsync=fsync, acl=True, tls=True)
    client: Client | None = None
    try:
        cluster.start()
        print(f"schedd local: starting {nodes} node(s) on 127.0.0.1 (TLS, access control on), "
              f"data in {root}", flush=True)
        leader = cluster.wait_leader(timeout=60)
        worker_token = _credentials(cluster)
        context = cluster.write_context(root / CONTEXT_FILE)
        client = cluster.client(timeout=30)
        cluster.start_worker(LOCAL_WORKER, slots=LOCAL_WORKER_SLOTS, token=worker_token)
        if demo:
            _create_demo(client)
        _banner(cluster, leader, demo, context)
        last, printed_at = "", 0.0
        while not stop.wait(PROGRESS_POLL_S):
            dead = [n.id for n in (*cluster.nodes.values(), *cluster.workers.values()) if not n.alive()]
            line = f"[schedd local] {_progress(client)}"
            if dead:
                line += f"; node(s) down: {', '.join(dead)} (see {root / 'logs'})"
            due = time.monotonic() - printed_at >= PROGRESS_EVERY_S or "SUCCEEDED" not in last or dead
            if line != last and due:
                print(line, flush=True)
                last, printed_at = line, time.monotonic()
        return 0
    except (RuntimeError, TimeoutError) as e:
        print(f"schedd local: {e}", file=sys.stderr)
        return 1
    finally:
        print("schedd local: stopping...", flush=True)
        if client is not None:
            client.close()
        cluster.stop()
        if temp:
            shutil.rmtree(root, ignore_errors=True)
        print("schedd local: stopped", flush=True)


def _banner(cluster: LocalCluster, leader: str, demo: bool, context: Path) -> None:
    print(f"\nschedd local is up: {len(cluster.nodes)} nodes, leader {leader}\n")
    for n in cluster.nodes.values():
        print(f"  {n.id}  gRPC {n.grpc}   Raft {n.raft}   metrics http://{n.metrics}/metrics   pid {n.pid}")
    for w in cluster.workers.values():
        print(f"  worker {w.id}, {LOCAL_WORKER_SLOTS} slots, pid {w.pid}")
    if demo:
        print(f"\nDemo job '{DEMO_JOB}' fires {DEMO_SCHEDULE} and runs `echo hello from schedd` on the worker;"
              f" see `schedctl run list {DEMO_JOB}` and `schedctl run get <ID>` for its output.")
    print("\nTalk to it from another terminal (the context file holds the addresses, the CA, the admin's"
          " client certificate and the management token; keep it private):\n")
    print(f"  export SCHEDD_CONTEXT={context}")
    print("  schedctl cluster status")
    print("  schedctl job list")
    print("  schedctl worker list")
    if demo:
        print(f"  schedctl run list {DEMO_JOB}")
    print("  schedctl job create nightly --schedule '0 2 * * *' --tz Europe/Berlin --command 'backup.sh'")
    print(f"\nCredentials: {cluster.tls_dir} (CA, node, worker and admin certificates),"
          f" {cluster.root / ADMIN_TOKEN_FILE} (management token)")
    print(f"Logs: {cluster.root / 'logs'}\nCtrl-C stops everything.\n", flush=True)
