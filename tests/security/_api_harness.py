"""The real API servicers on a real gRPC port, over a state machine with no Raft under it.

`InMemoryNode` (the one fake node, schedd.ports.fakes.FakeNode, over a state of its own) stands
in for `RaftNode`: a proposal is applied at once, in order, to a real `SchedulerState`, unless
the `Proposals` object passed in says otherwise (hold an entry and apply
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

from schedd.api.auth import AuthInterceptor, NodeSigner
from schedd.api.dags_service import DagsService
from schedd.api.limits import InflightLimit
from schedd.api.service import Router, SchedulerService
from schedd.core import commands as C
from schedd.core.state import SchedulerState
from schedd.runtime.config import Limits, NodeConfig
from schedd.ports.fakes import FakeNode, ManualClock, Proposals
from schedd.runtime.metrics import Metrics
from schedd_proto import dags_pb2_grpc as dpb_grpc
from schedd_proto import scheduler_pb2_grpc as pb_grpc

NOW_MS = 1_790_000_000_000


class InMemoryNode(FakeNode):
    """The fake node over a state of its own: node n1, leader of term 1, with the limits given.
    `entries` lists what was applied, in order (a held proposal applies later, or never)."""

    def __init__(self, limits: Limits | None = None, proposals: Proposals | None = None,
                 secret: str = "") -> None:
        cfg = replace(NodeConfig(node_id="n1", data_dir=Path("/nonexistent"),
                                 raft_address="127.0.0.1:1", grpc_address="127.0.0.1:2"),
                      limits=limits or Limits(), secret=secret)
        state = SchedulerState()
        super().__init__(self._apply_next, lambda: state, cfg=cfg, term=1, proposals=proposals)
        self.index = 0
        self.entries: list[str] = []
        self.apply(C.encode(C.EPOCH, rid="", now=NOW_MS, term=1))

    def _apply_next(self, entry: str) -> dict:
        self.index += 1
        self.entries.append(entry)
        return self.state.apply(entry, self.index)

    def kinds(self) -> list[str]:
        return [C.decode(e).kind for e in self.entries]


class ApiServer:
    """SchedulerService, DagsService (and the in-flight limit) on 127.0.0.1:<free port>, in a thread of its own."""

    def __init__(self, node: InMemoryNode, clock: ManualClock | None = None) -> None:
        self.node = node
        self.clock = clock or ManualClock(NOW_MS)
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
        # As the daemon chains them: who calls (ACL off here, so no checks) before the cap.
        authn = AuthInterceptor(self.node, self.clock, NodeSigner(""), enabled=False)
        self.server = grpc.aio.server(interceptors=[authn, self.server_interceptor],
                                      options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
        router = Router(self.node)  # type: ignore[arg-type]
        pb_grpc.add_SchedulerServicer_to_server(
            SchedulerService(self.node, self.clock, Metrics(), router), self.server)  # type: ignore[arg-type]
        dpb_grpc.add_DagsServicer_to_server(
            DagsService(self.node, self.clock, Metrics(), router), self.server)  # type: ignore[arg-type]
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
