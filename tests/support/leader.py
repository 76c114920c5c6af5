"""The leader's shell code (assigner, worker hub, SLA driver) over a test harness: the one fake
Raft node (schedd.ports.fakes.FakeNode) applying each proposal to the harness at once, the one
manual clock reading the harness's time, a registered worker, one settled step."""

from __future__ import annotations

import asyncio
import json
from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace
from typing import Any

from schedd.core import commands as C
from schedd.leader.assigner import Assigner
from schedd.leader.workers import WorkerConn, WorkerHub
from schedd.ports.fakes import FakeNode, ManualClock, Proposals
from schedd.runtime.config import SchedulerTuning


def log_apply(h: Any):
    """Apply an entry to harness `h` as its log would: the next index, recorded in h.entries."""
    def apply(entry: str) -> dict:
        h.index += 1
        h.entries.append(entry)
        return h.state.apply(entry, h.index)
    return apply


def node_over(h: Any, *, proposals: Proposals | None = None, **cfg: Any) -> FakeNode:
    """The leader of h.term (node n1) whose proposals apply to `h` at once."""
    settings = SimpleNamespace(node_id="n1", scheduler=SchedulerTuning(catchup_per_second=2),
                               grpc_address="127.0.0.1:1", **cfg)
    return FakeNode(log_apply(h), lambda: h.state, cfg=settings, term=h.term, proposals=proposals)


def clock_of(h: Any) -> ManualClock:
    """A clock that reads the harness's `now` (the time its entries are stamped with)."""
    return ManualClock(source=lambda: h.now)


def kinds(node: FakeNode) -> list[str]:
    """The kinds of the entries proposed to `node`, in order."""
    return [C.decode(e).kind for e in node.proposed]


def assigner_rig(h: Any, proposals: Proposals | None = None):
    """(node, hub, assigner, tasks): an Assigner and WorkerHub over `h`; `tasks` collects what
    the assigner spawns (settled by `step`)."""
    node = node_over(h, proposals=proposals)
    hub = WorkerHub(node, clock_of(h), lease_ms=10_000)
    tasks: list[asyncio.Task] = []
    assigner = Assigner(node, clock_of(h), hub, 1_500, lambda coro: tasks.append(asyncio.ensure_future(coro)))
    return node, hub, assigner, tasks


def add_worker(hub: WorkerHub, h: Any, name="w1", slots=1) -> WorkerConn:
    conn = WorkerConn(name=name, slots=slots, pool="", labels={}, peer="test", connected_ms=h.now,
                      last_heartbeat_ms=h.now)
    hub.conns[name] = conn
    return conn


async def step(assigner: Assigner, tasks: list, now: int) -> None:
    assigner.step(now)
    while tasks:
        await tasks.pop()


class Hook(BaseHTTPRequestHandler):
    """A webhook receiver (serve it with http.server.HTTPServer on 127.0.0.1): keeps every POST
    as (path, JSON body, Idempotency-Key) in `Hook.posts`."""
    posts: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).posts.append((self.path, json.loads(body), self.headers.get("Idempotency-Key")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        pass
