"""One welcomed stream to the leader: what it reads and writes, in batches, until it ends.

Why separate: the bytes on one `Workers.Connect` stream have rules of their own that nothing
else decides: a LeaderBatch is handled in slices (READ_SLICE) so that one large batch does not
hold a due timer; what queued up while a write was in flight goes as one WorkerBatch (bounded by
MAX_BATCH and MAX_BATCH_BYTES) when the leader's Welcome says it takes batches; a `None` on the
queue half-closes the stream. Finding the leader, the Welcome and reconnecting are the link's
(`schedd_worker.leader_link`); what a message means is the runtime's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from schedd_proto import scheduler_pb2 as pb
from schedd_worker.stream_errors import describe

__all__ = ["Session", "MAX_BATCH", "MAX_BATCH_BYTES", "READ_SLICE", "CLOSE_TIMEOUT_S"]

log = logging.getLogger("schedd.worker")

MAX_BATCH = 256                 # messages per WorkerBatch (results carry up to 6 KiB of text)
MAX_BATCH_BYTES = 4 << 20       # or bytes, plus one message (the leader receives 16 MiB or more)
READ_SLICE = 64                 # leader messages handled between two turns of the loop
CLOSE_TIMEOUT_S = 1.0           # drain: after the half-close, wait this long for the stream to end


@dataclass(slots=True, eq=False)
class Session:
    address: str
    call: Any                            # a Connect call, or a sub-stream shaped as one (node_streams.SubCall)
    leader_id: str
    term: int
    lease_ms: int
    batches: bool = False                # the leader takes WorkerMessage.batch (its Welcome says)
    shards: int = 1                      # the cluster's shard groups (its Welcome says; 1: unsharded)
    out: asyncio.Queue[pb.WorkerMessage | None] = field(default_factory=asyncio.Queue)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    ending: str = ""                     # why we end it ourselves
    read: int = 0                        # leader messages handled (Heartbeat.messages_read)
    end: asyncio.Event = field(default_factory=asyncio.Event)      # set: drop the stream now
    gone: asyncio.Event = field(default_factory=asyncio.Event)     # set: the session is over

    def send(self, msg: pb.WorkerMessage) -> bool:
        """Queue `msg` for the writer; False once the session is ending (nothing queued)."""
        if self.ending:
            return False
        self.out.put_nowait(msg)
        return True

    def drop(self, why: str) -> None:
        """End the stream now, for `why` (the link reconnects)."""
        self.ending = why
        self.end.set()

    async def close(self) -> None:
        """End of the drain: half-close so the leader drops us at once, not after a lease."""
        self.ending = "worker stopped"
        self.out.put_nowait(None)
        try:
            await asyncio.wait_for(self.gone.wait(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            self.end.set()

    async def reader(self, handle: Callable[[pb.LeaderMessage], None]) -> None:
        """Handles what the leader sends, a large batch in slices of READ_SLICE with the loop's
        other work between them: accepting an assignment costs tens of µs, and a batch of
        the next instant's thousand would hold a due timer (the handlers of this instant)
        for tens of ms (the p99 at 1,000 fires/s)."""
        while True:
            msg = await self.call.read()
            if msg is grpc.aio.EOF:
                return
            msgs = msg.batch.messages if msg.WhichOneof("kind") == "batch" else (msg,)
            for i in range(0, len(msgs), READ_SLICE):
                if i:
                    await asyncio.sleep(0)
                for m in msgs[i:i + READ_SLICE]:
                    handle(m)
                    self.read += 1

    def _take(self, first: pb.WorkerMessage | None) -> tuple[list[pb.WorkerMessage], bool]:
        """`first` and what else is queued, up to a batch's bounds, and whether a `None` (the
        half-close) ended them."""
        if first is None:
            return [], True
        msgs, size = [first], first.ByteSize()
        while len(msgs) < MAX_BATCH and size < MAX_BATCH_BYTES and not self.out.empty():
            msg = self.out.get_nowait()
            if msg is None:
                return msgs, True
            msgs.append(msg)
            size += msg.ByteSize()
        return msgs, False

    async def writer(self) -> None:
        """Writes what is queued; what queued up meanwhile goes as one WorkerBatch when the
        leader takes batches (one gRPC message per result was 22% of the worker's time at
        1,000 fires/s)."""
        try:
            while True:
                msgs, end = self._take(await self.out.get())
                if len(msgs) > 1 and self.batches:
                    await self.call.write(pb.WorkerMessage(batch=pb.WorkerBatch(messages=msgs)))
                else:
                    for msg in msgs:
                        await self.call.write(msg)
                if end:
                    await self.call.done_writing()
                    return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the reader sees the stream's end too
            log.debug("write to the leader failed: %s", describe(e))
