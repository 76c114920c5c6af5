"""The real API servicers on a real gRPC port, over a state machine with no Raft under it.

`InMemoryNode` stands in for `RaftNode`: a proposal is applied at once, in order, to a real
`SchedulerState`, unless the `Proposals` object passed in says otherwise (hold an entry and apply
it later, lose its answer, refuse it). So the tests drive the exact PutJobs / ListJobs code a node
runs, through the SDK and schedctl over 127.0.0.1, in a few milliseconds per call, and can put a
fault at any proposal of a batch.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path

import grpc

from schedd.api.limits import InflightLimit
from schedd.api.service import Router, SchedulerService
from schedd.core import commands as C
from schedd.core.state import SchedulerState
from schedd.runtime.config import Limits, NodeConfig
from schedd.runtime.metrics import Metrics
from schedd_proto import scheduler_pb2_grpc as pb_grpc

NOW_MS = 1_790_000_000_000


class FixedClock:
    def __init__(self, now_ms: int = NOW_MS) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now


class Proposals:
    """What happens to a proposal; the default applies it at once and returns apply's result.
    Subclasses override `propose` to inject faults (the production path has no test branch)."""

    async def propose(self, node: "InMemoryNode", entry: str) -> dict:
        return node.apply(entry)


class InMemoryNode:
    """The parts of RaftNode the servicers use: cfg, state, lock, term, leadership, propose."""

    def __init__(self, limits: Limits | None = None, proposals: Proposals | None = None) -> None:
        self.cfg = replace(NodeConfig(node_id="n1", data_dir=Path("/nonexistent"),
                                      raft_address="127.0.0.1:1", grpc_address="127.0.0.1:2"),
                           limits=limits or Limits())
        self.state = SchedulerState()
        self.lock = threading.RLock()
        self.term = 1
        self.index = 0
        self.entries: list[str] = []
        self.proposals = proposals or Proposals()
        self.apply(C.encode(C.EPOCH, rid="", now=NOW_MS, term=1))

    def apply(self, entry: str) -> dict:
        with self.lock:
            self.index += 1
            self.entries.append(entry)
            return self.state.apply(entry, self.index)

    def kinds(self) -> list[str]:
        return [C.decode(e).kind for e in self.entries]

    def is_leader(self) -> bool:
        return True

    def leads_epoch(self) -> bool:
        return True

    def leader_grpc_address(self) -> str:
        return self.cfg.grpc_address

    async def propose(self, entry: str, *, timeout: float = 10.0) -> dict:
        return await self.proposals.propose(self, entry)


class ApiServer:
    """SchedulerService (and the in-flight limit) on 127.0.0.1:<free port>, in a thread of its own."""

    def __init__(self, node: InMemoryNode, clock: FixedClock | None = None) -> None:
        self.node = node
        self.clock = clock or FixedClock()
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the in-process API server did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self._ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        limits = self.node.cfg.limits
        self.server_interceptor = InflightLimit(limits.max_inflight_per_connection)
        self.server = grpc.aio.server(interceptors=[self.server_interceptor],
                                      options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
        router = Router(self.node)  # type: ignore[arg-type]
        pb_grpc.add_SchedulerServicer_to_server(
            SchedulerService(self.node, self.clock, Metrics(), router), self.server)  # type: ignore[arg-type]
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call_soon(self, fn, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
