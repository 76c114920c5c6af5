"""A `schedd serve` node with a bench agent inside it (bench/bench_shards.py starts every node
through this file, as LocalCluster's `wrap` prefix: the pid is still the node's).

Why: `/metrics` gives each shard's lateness only as histogram buckets, and a leader without
workers leaves no dispatch time in any record a client can read. The agent reads what each shard group of the
node holds, in the node's own process, over a unix socket beside the node's config
(`<root>/<node>.agent.sock`, one JSON request and one JSON answer per connection):

- `{"op": "stats"}`: per shard: role, term, leads_epoch, commit/applied/last log index, jobs,
  executions; the seconds each group took to build at start (its dump loaded in it) and the
  restores (`_deserialize`) it did.
- `{"op": "lateness", "clear": bool}`: the raw values the shard's dispatcher observed into
  `schedd_fire_lateness_seconds` (dispatch time minus due time, the leader's clock), as
  (wall time observed, seconds late) pairs, per shard; `clear` drops what was read.
- `{"op": "compact", "shard": k}`: pysyncobj's `forceLogCompaction()` on that group, then
  waits for its fork child to finish: the parent's time in `serialize` (the fork, which holds
  the tick thread), the child's total until the tick that reaped it, the dump's size.

Nothing of schedd's code is changed: the agent wraps `daemon.build_group`, the groups'
`fire_lateness` histograms (an observe still reaches the real one) and each group's pysyncobj
serializer instance.

    python bench/_shard_agent.py <python> -m schedd ... serve --config <root>/<node>.toml
"""

from __future__ import annotations

import json
import os
import runpy
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

GROUPS: dict[int, Any] = {}
BUILD: dict[int, tuple[float, float]] = {}           # shard -> (wall start, seconds)
RESTORES: list[tuple[int, float, float, int]] = []   # (id of the consumer, wall start, seconds, jobs)
LATE: dict[int, list[tuple[float, float]]] = {}
SNAP: dict[int, dict[str, float]] = {}


class Recorded:
    """The real histogram, and every value observed into it kept for the agent."""

    def __init__(self, real: Any, into: list[tuple[float, float]]) -> None:
        self.real, self.into = real, into

    def observe(self, value: float) -> None:
        self.into.append((time.time(), value))
        self.real.observe(value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def watch_serializer(shard: int, sync: Any) -> None:
    from pysyncobj.serializer import SERIALIZER_STATE
    SUCCESS, FAILED = SERIALIZER_STATE.SUCCESS, SERIALIZER_STATE.FAILED
    ser = sync._SyncObj__serializer
    serialize, check = ser.serialize, ser.checkSerializing
    rec = SNAP.setdefault(shard, {})

    def timed_serialize(data: Any, ident: Any) -> Any:
        t = time.perf_counter()
        out = serialize(data, ident)
        rec.update(started=t, fork_s=time.perf_counter() - t, done=0.0)
        return out

    def timed_check() -> Any:
        state, ident = check()
        if state in (SUCCESS, FAILED) and rec.get("started") and not rec.get("done"):
            rec.update(done=time.perf_counter(), ok=float(state == SUCCESS))
        return state, ident
    ser.serialize, ser.checkSerializing = timed_serialize, timed_check


def patch() -> None:
    from schedd.replication import node as node_mod
    from schedd.runtime import daemon

    real_build = daemon.build_group

    def build_group(parts: Any, shard: int) -> Any:
        t, w = time.perf_counter(), time.time()
        g = real_build(parts, shard)
        BUILD[shard] = (w, time.perf_counter() - t)
        LATE[shard] = []
        g.metrics.fire_lateness = Recorded(g.metrics.fire_lateness, LATE[shard])
        watch_serializer(shard, g.node.sync)
        GROUPS[shard] = g
        return g
    daemon.build_group = build_group

    real_restore = node_mod.ReplicatedState._deserialize

    def deserialize(self: Any, data: Any) -> None:
        t, w = time.perf_counter(), time.time()
        real_restore(self, data)
        RESTORES.append((id(self), w, time.perf_counter() - t, len(self._sm.jobs)))
    node_mod.ReplicatedState._deserialize = deserialize


def stats() -> dict[str, Any]:
    out = {}
    for k, g in sorted(GROUPS.items()):
        node = g.node
        try:
            st = node.status()
        except Exception as e:  # noqa: BLE001 - a group mid-change: say so
            out[str(k)] = {"error": repr(e)}
            continue
        consumer = id(node._consumer)
        out[str(k)] = {
            "role": st.role, "term": st.term, "leads_epoch": node.leads_epoch(),
            "commit": st.commit_index, "applied": st.applied_index, "last": st.last_log_index,
            "jobs": len(node.state.jobs), "execs": len(node.state.execs),
            "build": BUILD.get(k), "restores": [(w, s, j) for c, w, s, j in RESTORES if c == consumer],
        }
    return {"pid": os.getpid(), "shards": out, "built": sorted(BUILD), "rss": rss()}


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def lateness(clear: bool) -> dict[str, Any]:
    out = {}
    for k, vals in LATE.items():
        n = len(vals)
        out[str(k)] = vals[:n]
        if clear:
            del vals[:n]
    return out


def compact(shard: int, timeout: float = 600.0) -> dict[str, Any]:
    g = GROUPS[shard]
    rec = SNAP.setdefault(shard, {})
    rec.clear()
    t = time.perf_counter()
    g.node.sync.forceLogCompaction()
    deadline = t + timeout
    while time.perf_counter() < deadline and not rec.get("done"):
        time.sleep(0.01)
    dump = Path(g.node._hooks.dump_file)
    return {"shard": shard, "asked_to_done_s": time.perf_counter() - t,
            "fork_s": rec.get("fork_s"), "child_s": (rec["done"] - rec["started"]) if rec.get("done") else None,
            "ok": bool(rec.get("ok")), "dump_bytes": dump.stat().st_size if dump.exists() else 0,
            "jobs": len(g.node.state.jobs)}


def serve(path: Path) -> None:
    path.unlink(missing_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    os.chmod(path, 0o600)
    srv.listen(16)

    def handle(conn: socket.socket) -> None:
        with conn:
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            req = json.loads(buf)
            try:
                if req["op"] == "stats":
                    ans: Any = stats()
                elif req["op"] == "lateness":
                    ans = lateness(bool(req.get("clear")))
                elif req["op"] == "compact":
                    ans = compact(int(req["shard"]))
                else:
                    ans = {"error": f"unknown op {req['op']}"}
            except Exception as e:  # noqa: BLE001 - the answer says what failed
                ans = {"error": repr(e)}
            conn.sendall(json.dumps(ans).encode() + b"\n")

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def main() -> None:
    argv = sys.argv[1:]                       # <python> -m schedd ... --config <file>
    config = Path(argv[argv.index("--config") + 1])
    sock = config.with_name(config.stem + ".agent.sock")
    threading.Thread(target=serve, args=(sock,), name="bench-agent", daemon=True).start()
    patch()
    sys.argv = ["schedd", *argv[3:]]
    runpy.run_module("schedd", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
