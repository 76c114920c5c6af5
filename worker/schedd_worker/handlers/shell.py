"""The shell handler kind: a process group run to its end.

Shell
    `/bin/sh -c command`, or argv without a shell, in its own session (so its own process
    group), with a minimal environment (`job_environment`: PATH, HOME, LANG, the variables the
    job names in `inherit_env`, its `env`, the contract), stdin from /dev/null, stdout and
    stderr on pipes of their own that the worker reads: every byte goes to the attempt's run log
    (`Stop.log`, schedd_worker.run_logs) in the order read, and only the last OUTPUT_TAIL_BYTES of
    both are kept in memory for the result (memory stays bounded whatever the job prints). On timeout or cancel the whole group
    gets SIGTERM, then SIGKILL after `kill_grace_s`, and the outcome is reported only once no
    member is left. When the main process exits on its own, processes it left behind in its
    group (background children) get the same TERM/KILL treatment before the outcome is
    returned: a reported attempt has nothing still running. (A process that moved to a session
    or group of its own, with setsid or shell job control, has left on purpose and is not
    tracked.) exit_code is the exit status, or -N when signal N ended the main process. Once the
    main process has exited, the outcome follows its exit status even if the timeout or cancel
    strikes while leftovers are being stopped. Cancelling the awaiting task SIGKILLs the group
    at once, even mid-start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from typing import Any

from pathlib import Path

from schedd_worker.cgroups import Cgroups
from schedd_worker.isolation import (DIRECT, NO_TOOLS, HostTools, IsolationError, IsolationPolicy, LaunchPlan,
                                     launch)

from schedd_worker.run_logs import NO_LOG, STDERR, STDOUT, LogSink

from .base import (FAILED, SUCCEEDED, Assignment, Capture, Result, Stop, contract_env, race,
                   stopped)

__all__ = ["ShellHandler", "job_environment"]

log = logging.getLogger("schedd.worker.executors")

DRAIN_S = 0.5                   # after the main process exits: wait this long for the pipe to close
KILL_WAIT_S = 5.0               # after SIGKILL: give the kernel this long to clear the group


class ShellHandler:
    """``{"command": "..."}`` (``/bin/sh -c``) or ``{"argv": [...]}``, with ``workdir``, ``env``
    and ``inherit_env``; run as the team's user with the job's limits (`isolation`), in an
    attempt cgroup when the worker has one (`cgroups`)."""

    def __init__(self, isolation: IsolationPolicy | None = None,
                 cgroups: Cgroups | None = None) -> None:
        self.isolation = isolation or IsolationPolicy()
        self.cgroups = cgroups
        self.tools = HostTools.found()

    async def run(self, a: Assignment, spec: Mapping[str, Any], stop: Stop) -> Result:
        plan = self.isolation.plan(a.team, spec.get("workdir") or None, a.limits)
        if isinstance(plan, str):
            return Result(FAILED, error=plan)
        cgroup = None
        if self.cgroups is not None and a.limits:
            cgroup = self.cgroups.create(a.fencing_token, a.limits)
        try:
            return await _run(a, spec, stop.cancel, stop.deadline, stop.grace, plan, cgroup,
                              self.tools, stop.log)
        finally:
            if cgroup is not None:
                await asyncio.to_thread(Cgroups.remove, cgroup)


BASE_ENV = ("PATH", "HOME", "LANG")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def job_environment(a: Assignment, spec: Mapping, worker_env: Mapping[str, str]) -> dict[str, str]:
    """What a shell job's process sees: PATH, HOME and LANG of the worker, the worker variables
    the job names in `inherit_env`, its own `env` and `env_secret`, then the SCHEDD_* contract
    (which wins). Nothing else of the worker's environment: its unit's secrets are not every
    job's, and no SCHEDD_* variable of the worker's (its token, its context) is inherited even if
    a job names one (the cluster refuses such names; a worker does not rely on that)."""
    env = {k: worker_env[k] for k in BASE_ENV if k in worker_env}
    env.setdefault("PATH", DEFAULT_PATH)
    names = spec.get("inherit_env") or ()
    if isinstance(names, (list, tuple)):         # never the worker's own SCHEDD_TOKEN, context...
        env.update({n: worker_env[n] for n in names if isinstance(n, str) and n in worker_env
                    and not n.startswith("SCHEDD_")})
    job_env = spec.get("env") or {}
    if isinstance(job_env, Mapping):
        env.update({str(k): str(v) for k, v in job_env.items()})
    env.update(a.secret_env)
    env.update(contract_env(a))
    return env


def _group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in group `pgid`.

    killpg(pgid, 0) alone is not enough: an orphaned member that exited stays a zombie until
    its new parent reaps it, and some container inits (PID 1) never do."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _ShellProtocol(asyncio.SubprocessProtocol):
    """Feeds stdout and stderr straight into the capture (a bounded tail and the run log; no
    StreamReader buffer) and tells apart "the main process exited" from "the pipes closed":
    with Python 3.11's asyncio.subprocess, Process.wait() waits for both, and hangs while a
    background child still holds stdout."""

    def __init__(self, out: Capture) -> None:
        loop = asyncio.get_running_loop()
        self.out = out
        self.open_pipes = 2
        self.exited: asyncio.Future = loop.create_future()
        self.eof: asyncio.Future = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.out.feed(STDERR if fd == 2 else STDOUT, data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self.open_pipes -= 1
        if self.open_pipes <= 0 and not self.eof.done():
            self.eof.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


async def _wait_group_gone(transport: asyncio.SubprocessTransport, pgid: int,
                           timeout: float) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    delay = 0.005
    while True:
        if transport.get_returncode() is not None and not _group_alive(pgid):
            return True
        if loop.time() >= end:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)


async def _kill_group(transport: asyncio.SubprocessTransport, pgid: int, grace: float) -> None:
    """SIGTERM the group, wait `grace`, SIGKILL what is left; return once the group is empty."""
    _signal_group(pgid, signal.SIGTERM)
    if grace > 0 and await _wait_group_gone(transport, pgid, grace):
        return
    _signal_group(pgid, signal.SIGKILL)
    if not await _wait_group_gone(transport, pgid, KILL_WAIT_S):
        log.warning("process group %d still has members %.0fs after SIGKILL", pgid, KILL_WAIT_S)


def _kill_started(f: asyncio.Future) -> None:
    """For a start interrupted by task cancellation: kill whatever it started."""
    if f.cancelled() or f.exception() is not None:
        return
    transport = f.result()[0]
    _signal_group(transport.get_pid(), signal.SIGKILL)
    transport.close()


def _into_cgroup(cgroup: Path, pid: int, wait_w: int) -> str:
    """Move the waiting launcher into the attempt's cgroup, then let it go on ("" when done,
    else why not: the attempt must not run outside the limits it asked for)."""
    try:
        Cgroups.attach(cgroup, pid)
        os.write(wait_w, b"g")
        return ""
    except OSError as e:
        return f"cannot move the attempt into cgroup {cgroup}: {e.strerror or e}"
    finally:
        os.close(wait_w)


def _exit_result(rc: int) -> tuple[str, str]:
    if rc == 0:
        return SUCCEEDED, ""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return FAILED, f"killed by signal {name}"
    return FAILED, f"exit status {rc}"


async def _run(a: Assignment, spec: Mapping, cancel: asyncio.Event | None,
               deadline: float | None, grace: float, plan: LaunchPlan = DIRECT,
               cgroup: Path | None = None, tools: HostTools = NO_TOOLS,
               sink: LogSink = NO_LOG) -> Result:
    command = spec.get("command")
    argv = spec.get("argv")
    if command and argv:
        return Result(FAILED, error="a shell handler needs a command or an argv, not both")
    if command:
        if not isinstance(command, str):
            return Result(FAILED, error="shell command must be a string")
        args = ["/bin/sh", "-c", command]
    elif argv:
        if not isinstance(argv, (list, tuple)) or not all(isinstance(x, str) for x in argv):
            return Result(FAILED, error="shell argv must be a list of strings")
        args = list(argv)
    else:
        return Result(FAILED, error="a shell handler needs a command or an argv")

    workdir = spec.get("workdir") or None
    if plan.uid is not None:
        workdir = None                  # the launcher enters plan.cwd as the team's user
    if workdir is not None:
        if not os.path.exists(workdir):
            return Result(FAILED, error=f"working directory {workdir} does not exist")
        if not os.path.isdir(workdir):
            return Result(FAILED, error=f"working directory {workdir} is not a directory")

    env = job_environment(a, spec, os.environ)
    given = spec.get("env")
    own: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    env.update({k: v for k, v in plan.env.items() if k not in own})   # the team user's HOME...

    loop = asyncio.get_running_loop()
    out = Capture(sink)
    proto: _ShellProtocol | None = None

    def factory() -> _ShellProtocol:
        nonlocal proto
        proto = _ShellProtocol(out)
        return proto

    try:
        way = launch(plan, args, wait=cgroup is not None, tools=tools)
    except IsolationError as e:
        return Result(FAILED, error=str(e))
    if way.argv is not args:
        args, workdir = way.argv, None       # the launcher enters plan.cwd as the team's user
    wait_r, wait_w = os.pipe() if way.waits else (-1, -1)
    # Shielded: if our task is cancelled while the pipes are still being connected, asyncio
    # would SIGKILL only the main pid and leave the rest of the group running.
    start = asyncio.ensure_future(loop.subprocess_exec(
        factory, *args, stdin=wait_r if wait_r >= 0 else subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=workdir, env=env, start_new_session=True, **way.popen))
    try:
        transport, _ = await asyncio.shield(start)
    except asyncio.CancelledError:
        while not start.done():              # a start takes milliseconds: see it through,
            try:                             # kill what it started, then propagate
                await asyncio.shield(start)
            except asyncio.CancelledError:
                pass
            except Exception:  # noqa: BLE001 - nothing started; the cancellation still wins
                break
        _kill_started(start)
        if wait_w >= 0 and start.done() and not start.cancelled() and start.exception() is None:
            os.close(wait_w)
        raise
    except (OSError, ValueError, TypeError) as e:   # not found, not executable, NUL in argv...
        return Result(FAILED, error=f"cannot start {args[0]}: {e}")
    finally:
        if wait_r >= 0:
            os.close(wait_r)
            if not start.done() or start.cancelled() or start.exception() is not None:
                os.close(wait_w)          # nothing started that would wait on it
    assert proto is not None
    pgid = transport.get_pid()   # start_new_session: the child leads its own session and group
    if cgroup is not None:
        moved = _into_cgroup(cgroup, pgid, wait_w)
        if moved:
            _signal_group(pgid, signal.SIGKILL)
            await _wait_group_gone(transport, pgid, KILL_WAIT_S)
            transport.close()
            return Result(FAILED, error=moved)
    try:
        how = await race(proto.exited, cancel, deadline)
        if how != "done":
            await _kill_group(transport, pgid, grace)
            await asyncio.wait({proto.eof}, timeout=1.0)
            state, error = stopped(how, a)
            return Result(state, exit_code=transport.get_returncode(), error=error,
                           output_tail=out.text())
        rc = transport.get_returncode()
        assert rc is not None                # proto.exited fired: the process has exited
        # The main process is gone. Let the output drain; then anything it left behind in its
        # group (background children, maybe holding the pipe) is stopped: once reported, the
        # attempt must have nothing still running.
        await asyncio.wait({proto.eof}, timeout=DRAIN_S)
        if _group_alive(pgid):
            log.info("%s: stopping processes left behind in group %d", a.execution_id, pgid)
            await _kill_group(transport, pgid, grace)
            await asyncio.wait({proto.eof}, timeout=1.0)
        state, error = _exit_result(rc)
        return Result(state, exit_code=rc, error=error, output_tail=out.text())
    except asyncio.CancelledError:
        _signal_group(pgid, signal.SIGKILL)
        raise
    finally:
        # Closes the pipe even if a process that left the group (setsid) still holds it.
        # (If the main process were still running, close() would SIGKILL it.)
        transport.close()
