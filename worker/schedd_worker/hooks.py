"""The worker's test-mode hooks (the fault suite, tests/jepsen_like): its history recorder, the
per-link dialing of the cluster, and its one failpoint. Built once from the environment by
`configure_worker` and passed to `WorkerRuntime`; the default `NO_HOOKS` does nothing.

Environment (honoured only with SCHEDD_TEST_MODE=1; refused otherwise):

    SCHEDD_HISTORY_DIR   record a JSON-lines history into DIR/worker-<name>.jsonl (one O_APPEND
                         write per line, wall-clock `ts` in seconds)
    SCHEDD_WORKER_DIAL   JSON {"<node grpc address>": "<address to dial instead>"}: dial the
                         cluster (status, the stream, redirects) through per-link proxies
    SCHEDD_FAILPOINT_DIR the harness arms `crash_after_effect` by creating the file
                         DIR/worker-<name>.crash_after_effect: the worker SIGKILLs itself after its
                         handler returned (the effect is made) and before the result is reported

The daemon's own hooks (schedd/testing) follow the same file and line formats; this module is
the worker's copy so that the worker distribution needs nothing of the daemon.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TestModeError", "Recorder", "Failpoints", "WorkerEvents", "RecordedEvents", "NO_EVENTS", "WorkerHooks",
           "NO_HOOKS", "configure_worker", "test_mode"]


class TestModeError(RuntimeError):
    """A test-only setting outside test mode (SCHEDD_TEST_MODE=1)."""


def test_mode() -> bool:
    """Whether this process runs under the test suite (SCHEDD_TEST_MODE=1)."""
    return os.environ.get("SCHEDD_TEST_MODE") == "1"


class Recorder:
    """Appends one JSON object per line; each line is a single write(2) on an O_APPEND fd. The
    fault suite's history format, written by nodes (schedd.testing), workers and the harness."""

    def __init__(self, path: str, proc: str) -> None:
        self.proc = proc
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def __call__(self, type_: str, **fields: Any) -> None:
        rec = {"ts": time.time(), "proc": self.proc, "type": type_, **fields}
        data = (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            os.write(self._fd, data)


@dataclass(slots=True)
class Failpoints:
    """One-shot failpoints armed from outside: the file DIR/<proc>.<name> exists. Consuming it is
    an unlink, so a failpoint fires once however many tasks reach it."""

    directory: str
    proc: str
    rec: Recorder | None = None

    def take(self, name: str) -> bool:
        try:
            os.unlink(os.path.join(self.directory, f"{self.proc}.{name}"))
        except OSError:
            return False
        return True

    def crash(self, name: str, **fields: Any) -> None:
        """kill -9 this process (no cleanup, no flush), as a crash would."""
        if self.rec is not None:
            self.rec("failpoint", proc_name=self.proc, name=name, action="crash", pid=os.getpid(), **fields)
        os.kill(os.getpid(), signal.SIGKILL)


class WorkerEvents:
    """What a worker tells the fault suite's history about its attempts, at the points the
    checker reads (received, rejected, handler started and ended, result acknowledged). This
    default tells nothing: every method does nothing, so the runtime calls them without a test
    branch on its hot path; `RecordedEvents` writes them."""

    __slots__ = ()

    def received(self, worker: str, a: Any) -> None:
        """An assignment (pb.Assignment) arrived."""

    def rejected(self, worker: str, a: Any, why: str) -> None:
        """The worker refused an assignment, saying why."""

    def started(self, worker: str, a: Any) -> None:
        """Its handler started."""

    def ended(self, worker: str, a: Any, state: str) -> None:
        """Its handler returned (before the result is reported)."""

    def acked(self, worker: str, token: int, outcome: str) -> None:
        """The leader acknowledged its result."""


NO_EVENTS = WorkerEvents()


class RecordedEvents(WorkerEvents):
    """The events as history lines (the fault suite's format: w_recv, w_reject, h_start, h_end,
    w_ack)."""

    __slots__ = ("rec",)

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    def received(self, worker: str, a: Any) -> None:
        self.rec("w_recv", worker=worker, job=a.job, scheduled_ms=a.scheduled_ms, token=a.fencing_token,
                 attempt=a.attempt, term=a.term, due_ms=a.due_ms)

    def rejected(self, worker: str, a: Any, why: str) -> None:
        self.rec("w_reject", worker=worker, job=a.job, scheduled_ms=a.scheduled_ms,
                 token=a.fencing_token, term=a.term, why=why)

    def started(self, worker: str, a: Any) -> None:
        self.rec("h_start", worker=worker, job=a.job, scheduled_ms=a.scheduled_ms,
                 token=a.fencing_token, attempt=a.attempt)

    def ended(self, worker: str, a: Any, state: str) -> None:
        self.rec("h_end", worker=worker, job=a.job, scheduled_ms=a.scheduled_ms,
                 token=a.fencing_token, attempt=a.attempt, state=state)

    def acked(self, worker: str, token: int, outcome: str) -> None:
        self.rec("w_ack", worker=worker, token=token, outcome=outcome)


@dataclass(slots=True, frozen=True)
class WorkerHooks:
    """What the fault suite may change in a worker; every field's default does nothing."""

    record: Recorder | None = None                      # the history; None: record nothing
    events: WorkerEvents = NO_EVENTS                    # the attempts' events in it
    dial_map: Mapping[str, str] = field(default_factory=dict)
    failpoints: Failpoints | None = None

    def dial(self, addr: str) -> str:
        """The address to dial for the node at `addr` (a proxy in the fault suite)."""
        return self.dial_map.get(addr, addr) if self.dial_map else addr

    def after_effect(self, token: int, job: str, t: int) -> None:
        """After a handler returned and before its result is reported."""
        fp = self.failpoints
        if fp is not None and fp.take("crash_after_effect"):
            fp.crash("crash_after_effect", token=token, job=job, scheduled_ms=t)


NO_HOOKS = WorkerHooks()


def configure_worker(name: str) -> WorkerHooks:
    """The hooks the environment asks for (workers have no config file); NO_HOOKS when it asks
    for none. Raises TestModeError for a test-only variable outside test mode."""
    proc = f"worker-{name}"
    raw_dial = os.environ.get("SCHEDD_WORKER_DIAL", "")
    history = os.environ.get("SCHEDD_HISTORY_DIR", "")
    fp_dir = os.environ.get("SCHEDD_FAILPOINT_DIR", "")
    if not (raw_dial or history or fp_dir):
        return NO_HOOKS
    if not test_mode():
        if raw_dial or fp_dir:
            raise TestModeError("SCHEDD_WORKER_DIAL and SCHEDD_FAILPOINT_DIR are for the test suite "
                                "only (need SCHEDD_TEST_MODE=1)")
        return NO_HOOKS                                  # a history outside test mode: ignored
    rec = None
    if history:
        os.makedirs(history, exist_ok=True)
        rec = Recorder(os.path.join(history, f"{proc}.jsonl"), proc)
    fps = None
    if fp_dir:
        os.makedirs(fp_dir, exist_ok=True)
        fps = Failpoints(fp_dir, proc, rec)
    dial = {str(k): str(v) for k, v in json.loads(raw_dial).items()} if raw_dial else {}
    return WorkerHooks(record=rec, events=RecordedEvents(rec) if rec is not None else NO_EVENTS,
                       dial_map=dial, failpoints=fps)
