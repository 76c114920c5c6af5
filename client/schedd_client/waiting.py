"""Waiting for a run to finish: the SDK's ``wait_for`` (blocking and awaited), what ``schedctl
... --wait`` prints while it waits, and the exit status that says how the run ended.

A run is read again until it reaches an end state, at intervals that grow from 0.1 s to 1 s
(each read goes to the leader, so the answer is never older than the wait). What is shown of a
run's output goes through an ``OutputSource``: today ``RecordedTail`` prints each attempt's output
tail as the cluster recorded it, once the run has ended; a source that streams the log as it is
written fits the same two calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, TypeVar

import grpc

from .errors import SchedError

# How a run ended, as schedctl's exit status (also in `schedctl --help` and the README).
EXIT_SUCCEEDED = 0
EXIT_FAILED = 3          # FAILED, LOST, UPSTREAM_FAILED: the run (or a DAG run) did not succeed
EXIT_TIMED_OUT = 4       # the run hit its own timeout
EXIT_CANCELLED = 5
EXIT_SKIPPED = 6         # recorded and never run (overlap, backlog, deadline)
EXIT_WAIT_TIMEOUT = 7    # --timeout passed first: the run goes on
EXIT_STATUS = {"SUCCEEDED": EXIT_SUCCEEDED, "FAILED": EXIT_FAILED, "LOST": EXIT_FAILED,
               "UPSTREAM_FAILED": EXIT_FAILED, "TIMED_OUT": EXIT_TIMED_OUT, "CANCELLED": EXIT_CANCELLED,
               "SKIPPED": EXIT_SKIPPED}
EXIT_HELP = ("Exit status: 0 success, 1 failure, 2 usage error. With --wait (job trigger, dag run, "
             "run retry): 0 the run succeeded, 3 it failed (or was lost, or a task failed), 4 it timed "
             "out, 5 it was cancelled, 6 it was skipped, 7 --timeout passed before it ended (it goes on).")
ENDED = frozenset(EXIT_STATUS)
DAG_RUN_ENDED = frozenset({"SUCCEEDED", "FAILED"})

FIRST_POLL_S, MAX_POLL_S = 0.1, 1.0
T = TypeVar("T")


class WaitTimeout(SchedError):
    """The run had not ended when the wait's timeout passed (DEADLINE_EXCEEDED); it goes on.
    ``last`` is the run as last read."""

    default_code = grpc.StatusCode.DEADLINE_EXCEEDED

    def __init__(self, message: str, last: object) -> None:
        super().__init__(message)
        self.last = last


def _next_poll(interval: float) -> float:
    return min(MAX_POLL_S, interval * 1.5)


def _left(deadline: float | None, what: str, last: object) -> float:
    if deadline is None:
        return float("inf")
    left = deadline - time.monotonic()
    if left <= 0:
        raise WaitTimeout(f"{what} had not ended when the wait timed out", last)
    return left


def wait_until(read: Callable[[], T], ended: Callable[[T], bool], timeout: float | None, what: str,
               on_read: Callable[[T], None] | None = None) -> T:
    """Read until `ended`; raises WaitTimeout after `timeout` seconds (None: no limit)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    interval = FIRST_POLL_S
    while True:
        last = read()
        if on_read is not None:
            on_read(last)
        if ended(last):
            return last
        time.sleep(min(interval, _left(deadline, what, last)))
        interval = _next_poll(interval)


async def async_wait_until(read: Callable[[], Awaitable[T]], ended: Callable[[T], bool], timeout: float | None,
                           what: str) -> T:
    """`wait_until`, awaited."""
    deadline = None if timeout is None else time.monotonic() + timeout
    interval = FIRST_POLL_S
    while True:
        last = await read()
        if ended(last):
            return last
        await asyncio.sleep(min(interval, _left(deadline, what, last)))
        interval = _next_poll(interval)


def run_ended(run: object) -> bool:
    return getattr(run, "state", "") in ENDED


def dag_run_ended(run: object) -> bool:
    return getattr(run, "state", "") in DAG_RUN_ENDED


class OutputSource(Protocol):
    """What `--wait` shows of a run's output: `seen` is called with every read of the run,
    `lines` once it has ended; each returns text to print."""

    def seen(self, run: object) -> Iterable[str]: ...

    def lines(self, run: object) -> Iterable[str]: ...


class RecordedTail:
    """The output tail of each attempt, as the cluster recorded it with the attempt's result."""

    def seen(self, run: object) -> Iterable[str]:
        return ()

    def lines(self, run: object) -> Iterable[str]:
        for a in getattr(run, "attempts", ()):
            if a.output_tail:
                yield f"--- output of attempt {a.number} ({a.state}, tail as recorded) ---"
                yield a.output_tail.rstrip("\n")
