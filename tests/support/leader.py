"""The leader's shell code (assigner, worker hub, SLA driver) over a test harness: the node, the
clock and the rig come from the one test environment (tests.support.env.TestEnv: the fake Raft
node applying each proposal to the harness at once, the manual clock reading the harness's
time); here, a registered worker and one settled step."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from schedd.core import commands as C
from schedd.leader.assigner import Assigner
from schedd.leader.workers import WorkerConn, WorkerHub
from schedd.ports.fakes import FakeNode, Proposals
from tests.support.env import TestEnv, clock_of, log_apply, node_over

__all__ = ["Hook", "TestEnv", "add_worker", "assigner_rig", "clock_of", "kinds", "log_apply", "node_over", "step"]


def kinds(node: FakeNode) -> list[str]:
    """The kinds of the entries proposed to `node`, in order."""
    return [C.decode(e).kind for e in node.proposed]


def assigner_rig(h: Any, proposals: Proposals | None = None):
    """(node, hub, assigner, tasks): an Assigner and WorkerHub over `h` (a TestEnv's); `tasks`
    collects what the assigner spawns (settled by `step`)."""
    env = TestEnv(h, proposals=proposals)
    return env.node, env.hub, env.assigner, env.tasks


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
