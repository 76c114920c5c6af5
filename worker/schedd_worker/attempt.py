"""One attempt's life on this worker: prepared when accepted, started, watched, stopped, ended.

Why separate: how an attempt runs is decided here alone. A Python call is started synchronously
and watched by a callback on its future (a task, an executor and a race per attempt were half
of the worker's time per attempt in a herd); it gets a task of its own only when it must be
stopped (a cancel, its timeout) or returned an awaitable; every other kind runs in its task
through `executors.execute`. Whatever way it ends, its outcome is reported once and `ended` is
called once. Which attempt starts when, and the slots, are `schedd_worker.starts`'s.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from schedd_proto import scheduler_pb2 as pb
from schedd_worker import executors
from schedd_worker.executors import Assignment, Call, HttpOptions, Isolation, Outcome, PythonHandlers
from schedd_worker.handlers.base import Handler
from schedd_worker.hooks import WorkerHooks
from schedd_worker.ledger import Held
from schedd_worker.run_logs import NO_LOG, AttemptLog, LogSink, LogStore

__all__ = ["RunSettings", "AttemptRunner", "Started", "prepare"]

log = logging.getLogger("schedd.worker")

Started = tuple[Call, asyncio.Future[Any], int]     # a prepared call, its future, when it started


def _limits(a: pb.Assignment) -> dict[str, float]:
    """The limits an assignment sets (fields left at 0 set none)."""
    lim = a.limits
    return {k: v for k, v in (("memory_mb", lim.memory_mb), ("cpu_seconds", lim.cpu_seconds),
                              ("open_files", lim.open_files), ("processes", lim.processes)) if v}


def _plain(m: Mapping[str, str]) -> dict[str, str]:
    """A protobuf map as a dict: dict(map) walks the Mapping ABC's key view in Python even when
    the map is empty (4% of the worker's time at sustained load), len() does not."""
    return {k: m[k] for k in m} if len(m) else {}


@functools.lru_cache(maxsize=4096)
def _handler(text: str) -> Any:
    """A job's handler object, parsed once per distinct text and shared by its attempts (read
    only: no handler kind changes its spec). Every attempt of a job carries the same text, and a
    herd's held attempts each kept their own copy (half a KiB each)."""
    return json.loads(text)


@dataclass(slots=True, frozen=True, eq=False)
class RunSettings:
    """What every attempt on this worker runs with."""
    name: str                                    # the worker's
    python_handlers: PythonHandlers | None
    kill_grace_s: float
    now_ms: Callable[[], int]
    http: HttpOptions
    isolation: Isolation
    kinds: Mapping[str, Handler]                 # executors.handlers_for(...), built once
    hooks: WorkerHooks
    logs: LogStore | None = None                 # run logs (None: output only in the tail)


def prepare(a: pb.Assignment, run: RunSettings) -> Held:
    """Everything an attempt needs, built when it is accepted (about a lookahead before it
    is due), so that at its due time the worker only starts it."""
    try:
        handler = _handler(a.handler_json) if a.handler_json else {}
    except ValueError:
        return Held(msg=a, ex=None)
    ex = Assignment(execution_id=a.execution_id, job=a.job, scheduled_ms=a.scheduled_ms,
                    attempt=a.attempt, fencing_token=a.fencing_token, handler=handler,
                    timeout_s=a.timeout_seconds, labels=_plain(a.labels), team=a.team,
                    secret_env=_plain(a.secret_env), limits=_limits(a), params=_plain(a.params))
    return Held(msg=a, ex=ex, call=executors.prepare(ex, run.python_handlers, run.isolation))


class AttemptRunner:
    def __init__(self, run: RunSettings, *, report: Callable[[pb.AttemptResult], None],
                 ended: Callable[[Held], None]) -> None:
        self.run = run
        self._report = report
        self._ended = ended                      # after its outcome is reported: free its slot

    def call(self, att: Held) -> Started | None:
        """A prepared Python call is started here, synchronously; anything else in its task."""
        a = att.msg
        att.phase = "running"
        self.run.hooks.events.started(self.run.name, a)
        if att.call is None or att.cancel.is_set():
            return None
        return att.call, att.call.start(), self.run.now_ms()

    def watch(self, att: Held, started: Started | None) -> None:
        """A started Python call is watched by a callback on its future, without a task. It gets
        a task of its own (`escalate`) only when it has to be stopped (cancelled, past its
        timeout) or returned an awaitable. Anything else runs in its task."""
        if started is None:
            self._own_task(att)
            return
        fut = started[1]
        att.started, att.task = started, fut
        if fut.done():                            # ended in its first step (start_eagerly): its
            self._settled(att, fut)               # slot goes to the next waiting at once
            return
        fut.add_done_callback(lambda f: self._settled(att, f))
        if att.msg.timeout_seconds > 0:
            att.timer = asyncio.get_running_loop().call_later(att.msg.timeout_seconds, self.escalate, att)

    def stop(self, att: Held) -> None:
        """Cancel the attempt (a cancel from the leader, the self-fence, the drain's end)."""
        att.cancel.set()
        self.escalate(att)

    def escalate(self, att: Held) -> None:
        """Give a call watched by callback a task of its own, which races it against its cancel
        event and its deadline (both counted as if it had had the task from its start)."""
        if att.phase != "running" or att.started is None or att.task is not att.started[1]:
            return
        if att.timer is not None:
            att.timer.cancel()
            att.timer = None
        self._own_task(att)

    def _settled(self, att: Held, fut: asyncio.Future[Any]) -> None:
        """A call watched by callback ended on its own: report it."""
        if att.task is not fut or att.phase != "running" or att.started is None:
            return                                # escalated meanwhile: its task reports
        r = executors.settled(fut)
        if r is None:                             # it returned an awaitable: awaited in a task
            self.escalate(att)
            return
        if att.timer is not None:
            att.timer.cancel()
        try:
            self._finish(att, executors.outcome(r, att.started[2], self.run.now_ms()))
        finally:
            self._ended(att)

    def _own_task(self, att: Held) -> None:
        """Run the attempt (or wait for its started call) in a task of its own."""
        a = att.msg
        att.task = asyncio.create_task(self._run_attempt(att, att.started),
                                       name=f"attempt-{a.execution_id}-{a.fencing_token}")

    async def _run_attempt(self, att: Held, started: Started | None) -> None:
        run = self.run
        sink: LogSink = NO_LOG
        if run.logs is not None and att.ex is not None and started is None:
            a = att.msg
            sink = run.logs.open(a.fencing_token, a.execution_id, a.job, a.attempt, a.team)
        out: Outcome | None = None
        try:
            if att.ex is None:
                now = run.now_ms()
                out = Outcome(state=executors.FAILED, started_ms=now, ended_ms=now,
                              error="invalid handler_json in the assignment")
            else:
                try:
                    out = await executors.execute(att.ex, cancel=att.cancel, python_handlers=run.python_handlers,
                                                  kill_grace_s=run.kill_grace_s, now_ms=run.now_ms,
                                                  http=run.http, isolation=run.isolation,
                                                  started=started, kinds=run.kinds, run_log=sink)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # execute should never raise; be safe
                    log.exception("executor raised on %s", att.msg.execution_id)
                    now = run.now_ms()
                    out = Outcome(state=executors.FAILED, started_ms=now, ended_ms=now,
                                  error=f"internal error in the worker: {type(e).__name__}: {e}")
            self._finish(att, out)
        finally:
            if isinstance(sink, AttemptLog):      # its end, for readers following it
                sink.close(out.state if out is not None else executors.CANCELLED,
                           out.exit_code if out is not None else None)
            self._ended(att)

    def _finish(self, att: Held, out: Outcome) -> None:
        """The attempt ended: report its outcome (the caller frees its slot: `ended`)."""
        a = att.msg
        token = a.fencing_token
        self.run.hooks.events.ended(self.run.name, a, out.state)
        # one line per attempt at INFO only when it did not succeed: a herd of 100,000
        # would otherwise spend seconds of the worker's loop formatting log lines
        log.log(logging.DEBUG if out.state == executors.SUCCEEDED else logging.INFO,
                "%s (token %d) ended %s%s", a.execution_id, token, out.state,
                f": {out.error}" if out.error else "")
        self.run.hooks.after_effect(token, a.job, a.scheduled_ms)     # the fault suite's failpoint
        self._report(pb.AttemptResult(
            execution_id=a.execution_id, fencing_token=token, state=out.state,
            exit_code=out.exit_code or 0, http_status=out.http_status or 0, error=out.error,
            output_tail=out.output_tail, started_ms=out.started_ms, ended_ms=out.ended_ms))
