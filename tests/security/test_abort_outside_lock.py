"""An API call that fails (NOT_FOUND) answers after it released the node lock, never while it
holds it: `context.abort` awaits the network, and pysyncobj's apply thread takes the same lock
for every entry, so an abort under the lock made the whole replica wait on one slow client."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from schedd.api.dags_service import DagsService
from schedd.api.service import SchedulerService
from schedd.ports.fakes import ManualClock, RecordingMetrics
from schedd_proto import dags_pb2 as dpb
from schedd_proto import scheduler_pb2 as pb
from tests.security._api_harness import NOW_MS, InMemoryNode


class Aborted(Exception):
    pass


class AbortContext:
    """The part of a grpc.aio context the servicers use. `abort` notes whether another thread
    (the apply thread, say) could take the node lock at that moment, then ends the call."""

    def __init__(self, lock) -> None:
        self.lock = lock
        self.status: grpc.StatusCode | None = None
        self.lock_free: bool | None = None

    def _try_lock(self) -> None:
        got = self.lock.acquire(timeout=0.5)
        if got:
            self.lock.release()
        self.lock_free = got

    async def abort(self, code, details="", trailing_metadata=()):
        self.status = code
        probe = threading.Thread(target=self._try_lock)
        probe.start()
        probe.join(10)
        raise Aborted(details)

    def set_trailing_metadata(self, trailing_metadata):
        self.trailing = trailing_metadata

    def time_remaining(self):
        return None

    def code(self):
        return self.status

    def invocation_metadata(self):
        return ()


CALLS = [
    ("scheduler", "ListExecutions", pb.ListExecutionsRequest(job="nope")),
    ("scheduler", "ListInstants", pb.ListInstantsRequest(job="nope")),
    ("dags", "ListDagRuns", dpb.ListDagRunsRequest(name="nope")),
    ("dags", "GetDagRun", dpb.GetDagRunRequest(name="nope")),
]


@pytest.mark.parametrize("service,method,request_", CALLS, ids=[c[1] for c in CALLS])
def test_not_found_is_answered_after_the_lock_is_released(service, method, request_):
    node = InMemoryNode()
    clock, metrics = ManualClock(NOW_MS), RecordingMetrics()
    servicer = (SchedulerService(node, clock, metrics, router=None) if service == "scheduler"
                else DagsService(node, clock, metrics, router=None))
    ctx = AbortContext(node.lock)
    with pytest.raises(Aborted, match="not found"):
        asyncio.run(getattr(servicer, method)(request_, ctx))
    assert ctx.status == grpc.StatusCode.NOT_FOUND
    assert ctx.lock_free is True, f"{method} aborted while holding the node lock"


def test_no_await_while_holding_a_lock():
    """Every site at once: no coroutine of the daemon awaits inside a `with ...lock:` block."""
    import ast
    from pathlib import Path

    import schedd
    found = []
    for path in sorted(Path(schedd.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                    "lock" in ast.unparse(item.context_expr) for item in node.items):
                found += [f"{path.name}:{n.lineno}" for stmt in node.body for n in ast.walk(stmt)
                          if isinstance(n, ast.Await)]
    assert found == []
