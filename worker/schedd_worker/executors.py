"""Run ONE attempt of an execution and report how it ended (docs/architecture.md "Facts": handler contract).

`execute(assignment)` runs a shell, HTTP or Python handler to its end and returns an `Outcome`.
It never raises for anything the handler does (a missing binary, a refused connection, an
exception in a Python function, even a bug in this module): every failure is an Outcome. Only
cancelling the task that awaits it propagates `asyncio.CancelledError` — and even then the
attempt is stopped first (process group SIGKILLed, HTTP socket shut, Python task cancelled).
The preferred way to stop an attempt is the `cancel` event, which yields a CANCELLED outcome.

Every handler sees the same facts (`contract_env`): SCHEDD_JOB_ID, SCHEDD_JOB_NAME,
SCHEDD_EXECUTION_ID, SCHEDD_SCHEDULED_TIME (RFC 3339 UTC), SCHEDD_ATTEMPT, SCHEDD_FENCING_TOKEN —
as environment variables (shell), X-Schedd-* headers and a JSON body (HTTP), or a
`HandlerContext` (Python). The execution id is the idempotency key.

The handler kinds are one module each in `schedd_worker.handlers` (shell, http, python, sensor),
behind one interface (`handlers.base.Handler`); their docstrings say what each does. This module
picks the kind, bounds the error and stamps the times.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from schedd_worker.handlers.base import (CANCELLED, ERROR_MAX_BYTES, FAILED, HTTP_READ_LIMIT,
                                         OUTPUT_TAIL_BYTES, SUCCEEDED, TIMED_OUT, Assignment,
                                         Handler, HttpOptions, Result, Stop, bound_error,
                                         contract_env, format_rfc3339)
from schedd_worker.handlers.container import ContainerConfig, ContainerHandler
from schedd_worker.handlers.container_broker import BrokeredContainerHandler, ContainerBroker
from schedd_worker.handlers.http import HttpHandler
from schedd_worker.handlers.python import Call, HandlerContext, PythonHandler, PythonHandlers
from schedd_worker.handlers.python import finish as finish_python, prepare as prepare_python
from schedd_worker.handlers.python import settled
from schedd_worker.handlers.sensor import SensorHandler
from schedd_worker.handlers.shell import ShellHandler, job_environment
from schedd_worker.isolation import IsolationPolicy
from schedd_worker.cgroups import Cgroups
from schedd_worker.run_logs import NO_LOG, LogSink

log = logging.getLogger("schedd.worker.executors")

__all__ = [
    "Assignment", "Outcome", "HandlerContext", "PythonHandlers", "HttpOptions", "Isolation", "NO_ISOLATION", "execute",
    "prepare", "Call", "outcome", "settled",
    "handlers_for", "contract_env", "job_environment",
    "format_rfc3339", "OUTPUT_TAIL_BYTES", "ERROR_MAX_BYTES", "HTTP_READ_LIMIT",
    "SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED",
]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True, frozen=True)
class Outcome:
    state: str               # SUCCEEDED | FAILED | TIMED_OUT | CANCELLED
    started_ms: int
    ended_ms: int
    exit_code: int | None = None     # shell: the exit status, or -N when killed by signal N
    http_status: int | None = None   # http
    error: str = ""                  # human-readable, at most ERROR_MAX_BYTES (UTF-8)
    output_tail: str = ""            # last OUTPUT_TAIL_BYTES of output / body / return value


@dataclass(slots=True, frozen=True)
class Isolation:
    """Who a team's jobs run as and where their cgroups go (schedd_worker.isolation, .cgroups);
    the default maps nothing: jobs run as the worker's user, as before."""
    policy: IsolationPolicy = IsolationPolicy()
    cgroups: Cgroups | None = None


NO_ISOLATION = Isolation()


# ---------------------------------------------------------------------------------- entry point

def prepare(a: Assignment, python_handlers: PythonHandlers | None,
            isolation: Isolation = NO_ISOLATION) -> Call | None:
    """The Python call of `a` resolved ahead of its due time, so the worker does only
    `Call.start()` when it is due; None when `a` is not a Python handler this worker may run
    as it is (`execute` then runs and reports it the usual way)."""
    h = a.handler if isinstance(a.handler, Mapping) else {}
    spec = h.get("python")
    if not spec or not isinstance(spec, Mapping) or any(h.get(k) for k in h if k != "python"):
        return None
    if isolation.policy.refusal(a.team, "python"):
        return None
    call = prepare_python(a, spec, python_handlers)
    return call if isinstance(call, Call) else None


async def execute(a: Assignment, *, cancel: asyncio.Event | None = None,
                  python_handlers: PythonHandlers | None = None, kill_grace_s: float = 5.0,
                  now_ms: Callable[[], int] = _wall_ms,
                  http: HttpOptions = HttpOptions(),
                  isolation: Isolation = NO_ISOLATION,
                  started: tuple[Call, asyncio.Future, int] | None = None,
                  kinds: Mapping[str, Handler] | None = None, run_log: LogSink = NO_LOG) -> Outcome:
    """Run one attempt to its end and return its Outcome. Never raises, except that cancelling
    the awaiting task propagates CancelledError (after stopping the attempt). `http` says what
    HTTP handlers and http sensors may reach (default: HttpOptions(), see schedd_client.net.policy).
    `started`: a prepared Python call already started (call, its future, the wall ms it started
    at), to wait for; `kinds`: the worker's handlers_for(...), built once; `run_log`: where the
    attempt's whole output goes (schedd_worker.run_logs)."""
    grace = max(0.0, float(kill_grace_s))
    started_ms = started[2] if started is not None else now_ms()
    try:
        if started is not None:
            call, fut, _ = started
            timeout = float(a.timeout_s or 0)          # counted from the call's start
            deadline = (asyncio.get_running_loop().time() + timeout
                        - max(0, now_ms() - started_ms) / 1000 if timeout > 0 else None)
            r = await finish_python(a, call, fut, cancel, deadline, grace)
        elif cancel is not None and cancel.is_set():
            r = Result(CANCELLED, error="cancelled before it started")
        else:
            r = await _dispatch(a, cancel, python_handlers, grace, http, isolation, kinds, run_log)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # the contract: every failure is an Outcome
        log.exception("executor failed on %s", a.execution_id)
        r = Result(FAILED, error=f"internal error in the worker: {type(e).__name__}: {e}")
    return outcome(r, started_ms, now_ms())


def outcome(r: Result, started_ms: int, ended_ms: int) -> Outcome:
    """The Outcome a worker reports for a handler's Result (its error bounded)."""
    return Outcome(state=r.state, started_ms=started_ms, ended_ms=ended_ms, exit_code=r.exit_code,
                   http_status=r.http_status, error=bound_error(r.error),
                   output_tail=r.output_tail)


def handlers_for(python_handlers: PythonHandlers | None, http: HttpOptions,
                 isolation: Isolation = NO_ISOLATION,
                 containers: ContainerConfig | ContainerBroker | None = None) -> dict[str, Handler]:
    """Every handler kind by its key in the job's handler object, configured for this worker
    (its keys are the kinds it advertises: WorkerHello.handlers). `containers`: the config
    the start-up probe found working (schedd_worker.handlers.container), run in this process,
    or the broker that runs them for a worker without root's capabilities
    (schedd_worker.handlers.container_broker); None: no containers. Either way a team's
    containers run as the uid its shell jobs get here (`IsolationPolicy.ids_of`)."""
    shell, web = ShellHandler(isolation.policy, isolation.cgroups), HttpHandler(http)
    kinds: dict[str, Handler] = {"shell": shell, "http": web, "sensor": SensorHandler(shell, web)}
    if python_handlers is not None and isolation.policy.python_possible:
        kinds["python"] = PythonHandler(python_handlers)     # advertised: the leader routes by it
    if isinstance(containers, ContainerBroker):
        kinds["container"] = BrokeredContainerHandler(containers, isolation.policy.ids_of)
    elif containers is not None:
        kinds["container"] = ContainerHandler(containers, isolation.policy.ids_of)
    return kinds


def _cannot_run(kind: str, spec: Mapping) -> str:
    """Why this worker has no handler of `kind` (the leader routes by what a worker has, so this
    is an attempt sent before the worker said, or a worker run without a registry)."""
    if kind == "python":
        return f"no python handler named {spec.get('name', '')} on this worker"
    return f"this worker cannot run {kind} jobs (no working container runtime or containers disabled)"


async def _dispatch(a: Assignment, cancel: asyncio.Event | None,
                    handlers: PythonHandlers | None, grace: float, http: HttpOptions,
                    isolation: Isolation, kinds: Mapping[str, Handler] | None,
                    run_log: LogSink = NO_LOG) -> Result:
    h = a.handler if isinstance(a.handler, Mapping) else {}
    kinds = kinds if kinds is not None else handlers_for(handlers, http, isolation)
    kind = next((k for k in ("shell", "http", "python", "container", "sensor") if h.get(k)), "")
    why = isolation.policy.refusal(a.team, kind)
    if why:                                       # an unmapped team, or Python for a mapped one
        return Result(FAILED, error=why)
    loop = asyncio.get_running_loop()
    timeout = float(a.timeout_s or 0)
    stop = Stop(cancel, loop.time() + timeout if timeout > 0 else None, grace, run_log)
    if h.get("sensor") and len(h) == 1:           # a DAG sensor (it checks its own spec)
        return await kinds["sensor"].run(a, h["sensor"], stop)
    kinds_given = [k for k in ("shell", "http", "python", "container") if h.get(k)]
    if len(kinds_given) != 1:
        return Result(FAILED, error=f"unsupported handler: expected exactly one of shell, http, "
                                     f"python, container; got {sorted(h) if h else 'nothing'}")
    kind = kinds_given[0]
    spec = h[kind]
    if not isinstance(spec, Mapping):
        return Result(FAILED, error=f"{kind} handler must be an object")
    if kind not in kinds:
        return Result(FAILED, error=_cannot_run(kind, spec))
    return await kinds[kind].run(a, spec, stop)
