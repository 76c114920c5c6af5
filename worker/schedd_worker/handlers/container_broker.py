"""Rootful containers for a worker that has given up root's capabilities: the container broker.

Why it exists: a worker started as root that separates teams (``[isolation]`` mapping or
``uid_range``, as ``schedd local`` runs it) drops every capability but the few that switching
users takes before its first job (schedd_worker.caps), so that a bug in the worker reached
through the network or a job's output does not hand root to anyone. A rootful engine (podman
as root, the only kind that can give each team's container that team's host uid) needs root's
capabilities. So before dropping them the worker starts this broker: a process of its own that
keeps them and does one thing only, run container attempts the worker asks for.

What it trusts: less than the worker does. It was given the worker's ``[container]`` config at
start (on its stdin, before the worker dropped anything) and keeps it; each request is checked
again here against that config (`refusal`: networks, mounts, pulls, the user) and against what
can reach the engine's command line (`shape_refusal`), the command line is built here, and a
container never runs as uid or gid 0, nor without a team uid, unless the config says
``allow_root_jobs``. A worker taken over gets no more from the broker than a job spec could
ask for.

How they talk: a ``SOCK_SEQPACKET`` socket pair made at start (no path on disk: no job can
connect to it). For each attempt the worker makes a stream socket pair and passes one end over
it (``SCM_RIGHTS``); on that stream it writes the request (one JSON line: the assignment, the
spec, the team's uid:gid, the time left before the attempt's timeout, the stop grace) and may
later write ``cancel``; the broker relays the container's output as it reads it (JSON lines
``{"out": 1|2, "data": base64}``: the worker writes them to the attempt's run log) and answers
with the Result (one JSON line) when the container is gone. If the worker's end closes first (the worker died, or gave up the attempt), the broker
kills and removes the container at once, as the worker itself does when its task is cancelled.

Lifetime: it ignores SIGINT and SIGTERM (a terminal's Ctrl-C or systemd's stop reach the whole
group, and the worker drains its attempts after them) and lives until the worker's end of the
control socket closes, which happens when the worker exits however it exits; it then stops
what is still running and exits. The per-container watchdog (schedd_worker.handlers.container)
still guards each container in case the broker itself is killed.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedd_worker.run_logs import LogSink

from .base import FAILED, Assignment, Result, Stop
from .container import ContainerConfig, ContainerHandler, Ids, MountRule, TeamIds, no_team_ids

__all__ = ["ContainerBroker", "BrokeredContainerHandler", "BrokerError", "config_to_json",
           "config_from_json", "shape_refusal", "main"]

log = logging.getLogger("schedd.worker.container")

START_TIMEOUT_S = 30.0
LINE_LIMIT = 1 << 22                    # a request (env, spec) or a result (the output tail)
READY = b"ready"

# What reaches the engine's command line, checked again here (the cluster checked it when the
# job was stored; the broker does not take the worker's word for it): nothing that could be
# read as an option (a leading '-') or as a second --mount field (',').
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$")
_NETWORK = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_PATH = re.compile(r"^/[^\x00,:\n]{0,1023}$")
_MEMORY = re.compile(r"^[0-9]{1,7}Mi$")


class BrokerError(RuntimeError):
    """The broker could not be started."""


# ------------------------------------------------------------------------------ the config

def config_to_json(cfg: ContainerConfig) -> str:
    d = dataclasses.asdict(cfg)
    d["cgroup_root"] = str(cfg.cgroup_root) if cfg.cgroup_root is not None else None
    return json.dumps(d)


def config_from_json(text: str) -> ContainerConfig:
    d = json.loads(text)
    return ContainerConfig(
        engine=str(d["engine"]), runtime=str(d["runtime"]), networks=tuple(map(str, d["networks"])),
        mounts=tuple(MountRule(str(m["path"]), bool(m["rw"])) for m in d["mounts"]),
        pull=str(d["pull"]), ulimits=tuple(map(str, d["ulimits"])), worker=str(d["worker"]),
        cluster=str(d.get("cluster", "")), cgroup_root=Path(d["cgroup_root"]) if d["cgroup_root"] else None,
        allow_root_jobs=bool(d["allow_root_jobs"]))


def shape_refusal(spec: Mapping[str, Any]) -> str:
    """Why a spec cannot be put on the engine's command line safely ("" when it can)."""
    def bad(what: str, value: Any) -> str:
        return f"container {what} {value!r} is not a valid value"
    if not _IMAGE.match(str(spec.get("image", ""))):
        return bad("image", spec.get("image"))
    for key, rx in (("user", _USER), ("network", _NETWORK), ("workdir", _PATH), ("memory", _MEMORY)):
        if spec.get(key) and not rx.match(str(spec[key])):
            return bad(key, spec[key])
    for key in ("cpu", "pids"):
        if spec.get(key) is not None and not isinstance(spec[key], (int, float)):
            return bad(key, spec[key])
    if not isinstance(spec.get("args") or [], list) or not isinstance(spec.get("command") or "", str):
        return "container command must be a string and args a list"
    for m in spec.get("mounts") or ():
        if not isinstance(m, Mapping) or not all(_PATH.match(str(m.get(k, ""))) for k in ("source", "target")):
            return bad("mount", m)
    return ""


# ------------------------------------------------------------------------------ worker side

@dataclass(slots=True)
class ContainerBroker:
    """The worker's handle on its broker process (started by `start`, before the worker drops
    its capabilities and before any thread)."""
    proc: subprocess.Popen[bytes]
    control: socket.socket
    cfg: ContainerConfig

    @classmethod
    def start(cls, cfg: ContainerConfig) -> ContainerBroker:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "schedd_worker.handlers.container_broker", str(theirs.fileno())],
                stdin=subprocess.PIPE, pass_fds=(theirs.fileno(),), start_new_session=True)
        except OSError as e:
            ours.close()
            raise BrokerError(f"cannot start the container broker: {e}") from None
        finally:
            theirs.close()
        assert proc.stdin is not None
        proc.stdin.write(config_to_json(cfg).encode())
        proc.stdin.close()
        ours.settimeout(START_TIMEOUT_S)
        try:
            ready = ours.recv(16)
        except OSError as e:
            ready = f"no answer ({e})".encode()
        if ready != READY:
            proc.kill()
            proc.wait()
            ours.close()
            raise BrokerError(f"the container broker did not start: {ready.decode(errors='replace')}")
        ours.settimeout(5.0)            # a pass of one fd; the broker reads them at once
        return cls(proc, ours, cfg)

    async def run(self, a: Assignment, spec: Mapping[str, Any], stop: Stop, own: Ids | None) -> Result:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            socket.send_fds(self.control, [b"A"], [theirs.fileno()])
        except OSError as e:
            mine.close()
            return Result(FAILED, error=f"the worker's container broker is gone ({e}): see the worker's log")
        finally:
            theirs.close()
        loop = asyncio.get_running_loop()
        left = None if stop.deadline is None else max(0.001, stop.deadline - loop.time())
        request = {"assignment": dataclasses.asdict(a) | {"labels": dict(a.labels),
                                                           "secret_env": dict(a.secret_env),
                                                           "limits": dict(a.limits),
                                                           "params": dict(a.params)},
                   "spec": dict(spec), "own": list(own) if own is not None else None,
                   "timeout_s": left, "grace": stop.grace}
        reader, writer = await asyncio.open_unix_connection(sock=mine, limit=LINE_LIMIT)
        try:
            writer.write(json.dumps(request).encode() + b"\n")
            await writer.drain()
            return await _answer(reader, writer, stop)
        except (OSError, ValueError, TypeError) as e:
            return Result(FAILED, error=f"the worker's container broker failed ({e}): see the worker's log")
        finally:
            writer.close()              # cancelled here too: the broker removes the container


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stop: Stop) -> Result:
    """The broker's lines until its Result: output goes to the attempt's log, a cancel is passed on."""
    cancelled = asyncio.ensure_future(stop.cancel.wait()) if stop.cancel is not None else None
    try:
        while True:
            raw = await _next_line(reader, writer, cancelled)
            if not raw:
                return Result(FAILED, error="the worker's container broker ended without a result: see the worker's log")
            d = json.loads(raw)
            if "out" not in d:
                break
            stop.log.write(int(d["out"]), base64.b64decode(d["data"]))
    finally:
        if cancelled is not None:
            cancelled.cancel()
    return Result(state=str(d["state"]), exit_code=d.get("exit_code"), http_status=None,
                  error=str(d.get("error", "")), output_tail=str(d.get("output_tail", "")))


class BrokeredContainerHandler:
    """The container handler kind of a worker that dropped root's capabilities: each attempt
    runs in the broker, as the uid:gid `team_ids` gives the job's team."""

    def __init__(self, broker: ContainerBroker, team_ids: TeamIds = no_team_ids) -> None:
        self.broker = broker
        self.team_ids = team_ids

    async def run(self, a: Assignment, spec: Mapping[str, Any], stop: Stop) -> Result:
        own = self.team_ids(a.team)
        if isinstance(own, str):
            return Result(FAILED, error=own)
        return await self.broker.run(a, spec, stop, own)


async def _next_line(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     cancelled: asyncio.Future[Any] | None) -> bytes:
    """The next line, telling the broker `cancel` once if the attempt is cancelled meanwhile."""
    line = asyncio.ensure_future(reader.readline())
    try:
        if cancelled is not None and not cancelled.done():
            await asyncio.wait({line, cancelled}, return_when=asyncio.FIRST_COMPLETED)
            if cancelled.done():
                writer.write(b"cancel\n")
                await writer.drain()
        return await line
    finally:
        line.cancel()


# ------------------------------------------------------------------------------ broker side

class _Relay(LogSink):
    """The container's output, passed to the worker as it is read (the worker writes the log)."""
    __slots__ = ("writer",)

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    def write(self, stream: int, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(json.dumps({"out": stream, "data": base64.b64encode(data).decode()}).encode() + b"\n")


def _request(raw: bytes, cfg: ContainerConfig) -> tuple[Assignment, dict[str, Any], Ids | None, float | None, float] | str:
    """The parts of one request, or why it is refused."""
    try:
        d = json.loads(raw)
        a = Assignment(**d["assignment"])
        spec = dict(d["spec"])
        own = None if d.get("own") is None else (int(d["own"][0]), int(d["own"][1]))
        left = None if d.get("timeout_s") is None else float(d["timeout_s"])
        grace = float(d["grace"])
    except (ValueError, TypeError, KeyError, IndexError) as e:
        return f"bad request ({type(e).__name__}: {e})"
    why = shape_refusal(spec)
    if why:
        return why
    if not cfg.allow_root_jobs:
        if own is None:
            return "no team uid given: this worker runs every container as its team's uid"
        if 0 in own:
            return "a container never runs as uid or gid 0 on this worker"
    return a, spec, own, left, grace


async def _serve_attempt(sock: socket.socket, cfg: ContainerConfig) -> None:
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=LINE_LIMIT)
    try:
        raw = await reader.readline()
        if not raw:
            return
        req = _request(raw, cfg)
        result: Result | None
        if isinstance(req, str):
            result = Result(FAILED, error=f"refused by this worker's container broker: {req}")
        else:
            result = await _run_until_told(reader, writer, cfg, *req)
        if result is None:
            return                      # the worker is gone: nobody to answer
        writer.write(json.dumps(dataclasses.asdict(result)).encode() + b"\n")
        await writer.drain()
    except (OSError, ValueError) as e:
        log.warning("container broker: an attempt's connection failed: %s", e)
    finally:
        writer.close()


async def _run_until_told(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          cfg: ContainerConfig, a: Assignment,
                          spec: dict[str, Any], own: Ids | None, left: float | None,
                          grace: float) -> Result | None:
    """Run the attempt; `cancel` from the worker stops it like a cancel (grace, then kill), the
    worker's end closing kills and removes it at once (None: no one to answer)."""
    loop = asyncio.get_running_loop()
    cancel = asyncio.Event()
    stop = Stop(cancel, None if left is None else loop.time() + left, grace, _Relay(writer))
    handler = ContainerHandler(cfg, lambda team: own)
    run = asyncio.ensure_future(handler.run(a, spec, stop))

    async def listen() -> None:
        while True:
            line = await reader.readline()
            if not line:
                run.cancel()
                return
            if line.strip() == b"cancel":
                cancel.set()

    listener = asyncio.ensure_future(listen())
    try:
        return await run
    except asyncio.CancelledError:
        if listener.done():             # cancelled by the worker's end closing
            return None
        raise
    finally:
        listener.cancel()


async def _serve(control: socket.socket, cfg: ContainerConfig) -> None:
    loop = asyncio.get_running_loop()
    control.setblocking(False)
    gone = asyncio.Event()
    attempts: set[asyncio.Future[None]] = set()

    def readable() -> None:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(control, 16, 8)
        except BlockingIOError:
            return
        except OSError:
            msg, fds = b"", []
        if not msg and not fds:          # the worker's end closed: it exited
            loop.remove_reader(control.fileno())
            gone.set()
            return
        for fd in fds:
            task = asyncio.ensure_future(_serve_attempt(socket.socket(fileno=fd), cfg))
            attempts.add(task)
            task.add_done_callback(attempts.discard)

    loop.add_reader(control.fileno(), readable)
    control.send(READY)
    await gone.wait()
    for task in list(attempts):
        task.cancel()                   # each kills and removes its container
    await asyncio.gather(*attempts, return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m schedd_worker.handlers.container_broker FD``, the config as JSON on stdin;
    started by `ContainerBroker.start` only."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s container-broker[%(process)d] %(message)s")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        control = socket.socket(fileno=int(args[0]))
        cfg = config_from_json(sys.stdin.read())
    except (IndexError, ValueError, KeyError, OSError) as e:
        print(f"container broker: bad start ({e}): it is started by the worker only", file=sys.stderr)
        return 2
    from schedd_worker import caps
    try:
        caps.make_undumpable()          # root-owned anyway; no job reads its memory either way
    except OSError:
        pass
    os.chdir("/")
    asyncio.run(_serve(control, cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
