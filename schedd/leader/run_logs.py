"""Run logs read through the cluster: the leader asks the worker that ran an attempt for its log
over that worker's own stream, and falls back to the tail kept in the Raft log when it cannot.

Why on the leader, over the worker's stream: workers are often not reachable from the nodes
(they dial out), and the leader is the node that holds every worker's stream. So a read is a
series of requests multiplexed on that stream (`leader.log_requests`: a LeaderMessage.log_request, one
WorkerMessage.log_page per request); following a running attempt is the same request with a
wait (a long poll on the worker: one request in flight per reader, so a slow reader slows only
its own pages and nothing piles up on the leader). `RunLogs.read` is the one implementation of
reading a run's log: the gRPC service (schedd.api.logs_service) and any other front end (a
dashboard) iterate it; it checks its input and raises `LogReadError` before anything is sent.

The replicated record is not touched: the worker's tail in the attempt (its `output_tail`,
headed by how many bytes came before it) is what a read shows when the worker is gone, with a
notice that says why ("worker w2 is not connected; showing the last 4 KiB").
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from schedd.core.model import RUNNING, ValidationError, parse_execution_id
from schedd.core.view import StateView
from schedd.replication.node import RaftNode
from schedd.leader.workers import WorkerHub
from schedd_proto import logs_pb2 as lpb

__all__ = ["RunLogs", "LogReadError", "STREAMS"]

STREAMS = ("", "stdout", "stderr")
PAGE_BYTES = 256 * 1024           # asked per page (the worker caps it too)
FOLLOW_WAIT_MS = 10_000           # a follower's long poll on the worker
ANSWER_SLACK_S = 10.0             # beyond the long poll, before a worker counts as not answering
START_POLL_S = 0.2                # following a run with no attempt yet: how often to look again
MAX_TAIL_LINES = 1_000_000


class LogReadError(Exception):
    """A read refused before anything was sent: `code` is invalid | not_found | not_started."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True, frozen=True)
class _Attempt:
    """What a read needs of an attempt, copied out under the lock."""
    number: int
    worker: str
    token: int
    state: str
    exit_code: int
    error: str
    tail: str


def _size(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


def _last_lines(text: str, lines: int) -> str:
    if lines <= 0:
        return text
    parts = text.splitlines(keepends=True)
    return "".join(parts[-lines:])


class RunLogs:
    """Reads a run's log (`read`): from the worker that ran the attempt, else the Raft tail."""

    def __init__(self, node: RaftNode, hub: WorkerHub, *, follow_wait_ms: int = FOLLOW_WAIT_MS) -> None:
        self.node, self.hub = node, hub
        self.view = StateView(node.state)
        self.follow_wait_ms = follow_wait_ms

    @staticmethod
    def check(req: lpb.ReadRunLogsRequest) -> tuple[str, int]:
        """The execution key a request names, or LogReadError("invalid")."""
        try:
            key = parse_execution_id(req.id)
        except ValidationError as e:
            raise LogReadError("invalid", str(e)) from None
        if req.stream not in STREAMS:
            raise LogReadError("invalid", f"stream must be stdout or stderr (or empty for both), got {req.stream!r}")
        if req.attempt < 0:
            raise LogReadError("invalid", "attempt must be 1 or more (0: the latest)")
        if not 0 <= req.tail_lines <= MAX_TAIL_LINES:
            raise LogReadError("invalid", f"tail must be between 0 and {MAX_TAIL_LINES:,} lines")
        return key

    def _attempt(self, key: tuple[str, int], number: int, run_id: str) -> _Attempt | None:
        """The attempt asked for (None: the run has none yet); LogReadError when there is no such
        run or attempt."""
        with self.node.lock:
            ex = self.view.execution(*key)
        if ex is None and self.node.history is not None:      # a finished run on disk (schedd.history)
            ex = self.node.history.get(*key)
        if ex is None:
            raise LogReadError("not_found", f"execution {run_id!r} not found")
        with self.node.lock:
            if not ex.attempts:
                return None
            if number > len(ex.attempts):
                raise LogReadError("not_found", f"execution {run_id!r} has {len(ex.attempts)} attempt(s), "
                                                f"not {number}")
            a = ex.attempts[number - 1] if number else ex.attempts[-1]
            return _Attempt(a.number, a.worker, a.fencing_token, a.state, a.exit_code, a.error, a.output_tail)

    async def _first_attempt(self, key: tuple[str, int], req: lpb.ReadRunLogsRequest) -> _Attempt:
        """The attempt to read; following a run that has none yet waits for its first (until
        the run ends without one, or the caller gives up)."""
        while True:
            att = self._attempt(key, req.attempt, req.id)
            if att is not None:
                return att
            with self.node.lock:
                ex = self.view.execution(*key)
                state = ex.state if ex is not None else ""
            if not req.follow or state not in ("SCHEDULED", "RETRY_WAIT"):
                raise LogReadError("not_started", f"execution {req.id!r} has no attempt ({state}): "
                                                  "nothing ran, so there is no log")
            await asyncio.sleep(START_POLL_S)

    def _state_now(self, key: tuple[str, int], token: int) -> _Attempt | None:
        with self.node.lock:
            ex = self.view.execution(*key)
            for a in ex.attempts if ex is not None else ():
                if a.fencing_token == token:
                    return _Attempt(a.number, a.worker, a.fencing_token, a.state, a.exit_code, a.error,
                                    a.output_tail)
        return None

    async def read(self, req: lpb.ReadRunLogsRequest) -> AsyncIterator[lpb.RunLogChunk]:
        """The chunks of the log `req` asks for, ending with one `end` chunk (module doc)."""
        key = self.check(req)
        att = await self._first_attempt(key, req)
        conn = self.hub.conns.get(att.worker)
        if conn is None or conn.closed:
            async for c in self._fallback(att, f"worker {att.worker} is not connected", req):
                yield c
            return
        if not conn.serves_logs:
            async for c in self._fallback(att, f"worker {att.worker} keeps no run logs (an older worker, or "
                                               "its logs are turned off)", req):
                yield c
            return
        offset = -1 if req.tail_lines else 0
        sent = False
        while True:
            wait = self.follow_wait_ms if req.follow and offset >= 0 else 0
            page = await self.hub.logs.ask(self.hub.send, conn, lpb.LogRequest(
                fencing_token=att.token, execution_id=req.id, offset=offset, max_bytes=PAGE_BYTES,
                stream=req.stream, tail_lines=req.tail_lines, wait_ms=wait), wait / 1000 + ANSWER_SLACK_S)
            again = self.hub.conns.get(att.worker)
            if page is None and again is not None and again is not conn and again.serves_logs:
                conn = again                      # the worker reconnected: go on where it was
                continue
            if page is None or page.missing:
                why = (f"worker {att.worker} {page.missing}" if page is not None else
                       f"worker {att.worker} {'disconnected' if conn.closed else 'did not answer'}")
                if sent:
                    now = self._state_now(key, att.token) or att
                    yield self._chunk(att, kind="notice", message=f"{why}; the log stops here")
                    yield self._end(now)
                    return
                async for c in self._fallback(self._state_now(key, att.token) or att, why, req):
                    yield c
                return
            for c in page.chunks:
                c.attempt, c.worker = att.number, att.worker
                yield c
                sent = True
            offset = page.next_offset
            if page.at_end and page.finished:
                yield self._chunk(att, kind="end", state=page.state or att.state, exit_code=page.exit_code,
                                  message=self._outcome(page.state or att.state, page.exit_code))
                return
            if page.at_end and not req.follow:
                yield self._end(self._state_now(key, att.token) or att)
                return

    async def _fallback(self, att: _Attempt, why: str, req: lpb.ReadRunLogsRequest) -> AsyncIterator[lpb.RunLogChunk]:
        """The tail kept in the Raft log, after a notice saying why it is all there is."""
        text = _last_lines(att.tail, int(req.tail_lines))
        size = len(att.tail.encode())
        note = f"{why}; showing the last {_size(size)} kept in the Raft log" if size else \
            f"{why}; the Raft log keeps no output of this attempt"
        if req.stream and size:
            note += " (stdout and stderr together: the tail does not tell them apart)"
        yield self._chunk(att, kind="notice", message=note)
        if text:
            yield self._chunk(att, kind="output", data=text.encode(), from_raft=True)
        yield self._end(att)

    @staticmethod
    def _outcome(state: str, exit_code: int) -> str:
        return f"{state} (exit code {exit_code})" if state not in ("", RUNNING, "SUCCEEDED") else state

    def _end(self, att: _Attempt) -> lpb.RunLogChunk:
        return self._chunk(att, kind="end", state=att.state, exit_code=att.exit_code,
                           message=self._outcome(att.state, att.exit_code) if att.state != RUNNING
                           else "RUNNING (the attempt has not ended; follow it with -f)")

    @staticmethod
    def _chunk(att: _Attempt, **fields: object) -> lpb.RunLogChunk:
        return lpb.RunLogChunk(attempt=att.number, worker=att.worker, **fields)  # type: ignore[arg-type]
