"""The container handler kind: one attempt run as one container of the job's image.

Why the engine's CLI (``podman run``) and not the podman Python bindings: the bindings talk to
podman's API service, a socket that must be running (a systemd unit, or ``podman system
service``) and is one more daemon to secure and keep alive; the CLI needs nothing else, is what
an operator debugs with (``podman ps --filter label=schedd.worker=w1``), and is argument-
compatible with docker's CLI for everything used here, so ``[container] engine = "docker"``
runs the same code path. (Only the start-up probe's ``--rootfs`` is podman's own.)

An attempt:
- is checked against the worker's config first (`ContainerConfig`): a network other than
  ``none`` must be listed in ``networks``, every mount's source must lie under an allowlisted
  path (read-write only where that entry says so), ``pull: if-missing`` must be permitted;
  otherwise it FAILS with the reason before anything starts;
- runs as the uid:gid its team's shell jobs run as on this worker (``[isolation.teams]``, or
  the team's uid from ``[isolation] uid_range``), with no capability (``--cap-drop ALL``) and
  ``no-new-privileges``: containers are rootful, so uid 0 inside is uid 0 on the host and the
  separation that shell jobs get would otherwise not hold. Such a team's spec may name only its
  own uid as ``user`` (`refusal`); on a worker that does not separate teams the image's user, or
  the spec's, is used;
- runs ``<engine> run`` attached, in its own session, with the container named
  ``schedd-<token>-<random>`` and labelled schedd.execution, schedd.fencing, schedd.worker and
  schedd.cluster (a digest of the cluster's CA, or of its addresses without TLS);
  output (stdout and stderr, each on its own pipe) goes to the run log and the tail as a shell
  job's (`Capture`), the exit code reported;
- gets its environment (the job's env, its env_secret, the SCHEDD_* contract) through
  ``--env-file /dev/fd/N``, a pipe the worker writes and closes: nothing on disk, nothing on
  any command line (/proc/*/cmdline) and nothing in the engine's own environment;
- on timeout or cancel: ``<engine> stop -t <grace> NAME``, then ``rm -f``; the outcome is
  TIMED_OUT / CANCELLED as for a shell job;
- is always removed (``rm -f``) before the outcome is reported;
- with a memory limit on a cgroup v1 host, runs under a parent cgroup the worker makes
  (``--cgroup-parent=/schedd-attempt-<token>``, memory.limit_in_bytes = the limit): podman's
  ``State.OOMKilled`` stays false there, so an exit by SIGKILL (137) with the parent's
  failcnt > 0 (or its peak at the limit) is reported as "killed: out of memory (limit N MiB)".
  On cgroup v2 podman's own OOMKilled is trusted. The parent's directories are removed after.
- never outlives its worker by more than a moment: beside each container runs a watchdog,
  ``sh -c 'cat >/dev/null; <engine> rm -f NAME ...' `` in its own session, whose stdin is
  the read end of a pipe only the worker holds the write end of (close-on-exec: no job or
  engine process inherits it). When the worker dies, even by SIGKILL, the pipe closes, cat
  returns and the container is removed; when the attempt ends normally the worker kills the
  watchdog first. A worker that restarts removes every container labelled with its name and
  its cluster (`sweep`): it holds none yet. Both labels, because workers of two clusters on
  one host may share a name, and one's restart must not remove the other's running containers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedd_worker.run_logs import STDERR, STDOUT

from .base import (FAILED, SUCCEEDED, Assignment, Capture, Result, Stop, contract_env, race, stopped)

__all__ = ["ContainerConfig", "MountRule", "ContainerHandler", "Probe", "probe", "sweep", "run_argv",
           "refusal", "DEFAULT_ULIMITS", "TeamIds", "no_team_ids", "container_user"]

log = logging.getLogger("schedd.worker.container")

# runc on a host whose hard limits are below podman's defaults (1048576 open files) fails with
# "error setting rlimit type 7: operation not permitted" unless the limits are given. nproc is
# RLIMIT_NPROC: per uid over the whole host (no user namespace), and uid 0 is exempt from it,
# so it bounds nothing for a root container and everything a mapped team's uid runs for its
# containers (docs/workers.md "Container jobs"); a container's own bound is its `pids` (cgroup).
DEFAULT_ULIMITS = ("nofile=1024:1024", "nproc=1024:1024")
ENGINE_TIMEOUT_S = 60.0          # a stop/rm/inspect that takes longer is logged and left
LABEL_WORKER = "schedd.worker"
LABEL_CLUSTER = "schedd.cluster"
CGROUP_V1 = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class MountRule:
    """A host path (and what is under it) jobs may bind-mount; read-write only if `rw`."""
    path: str
    rw: bool = False


@dataclass(frozen=True, slots=True)
class ContainerConfig:
    """The worker's ``[container]`` section: what its containers may do."""
    engine: str = "podman"                      # podman | docker (same CLI arguments)
    runtime: str = ""                           # "" = try the engine's default, then runc
    networks: tuple[str, ...] = ()              # allowed besides "none": "host", named networks
    mounts: tuple[MountRule, ...] = ()
    pull: str = "never"                         # never | if-missing: the most a job may ask
    ulimits: tuple[str, ...] = DEFAULT_ULIMITS
    worker: str = ""                            # the worker's name (labels, the restart sweep)
    cluster: str = ""                           # `cluster_key` of the cluster it serves (likewise)
    cgroup_root: Path | None = field(default=None)   # cgroup v1 hierarchy root for OOM tracking
    allow_root_jobs: bool = False               # [isolation] allow_root_jobs: a mapped team may be root


Ids = tuple[int, int]
# Who a team's containers run as on this worker: its (uid, gid) when the worker separates teams
# (the same uid its shell jobs get), None when it does not, or why the team cannot run here.
TeamIds = Callable[[str], "Ids | str | None"]


def no_team_ids(team: str) -> None:
    """A worker that does not separate teams: the image (or the spec) decides the user."""
    return None


# ------------------------------------------------------------------------------ policy, argv

def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def refusal(spec: Mapping[str, Any], cfg: ContainerConfig, own: Ids | None = None) -> str:
    """Why this worker refuses the attempt ("" when it runs it): its config decides networks,
    mounts, pulls and, for a team with its own uid here (`own`), the user, whatever the
    (cluster-wide valid) spec asks."""
    why = _user_refusal(spec, cfg, own)
    if why:
        return why
    network = spec.get("network") or "none"
    if network != "none" and network not in cfg.networks:
        allowed = ", ".join(("none", *cfg.networks))
        return f"container network {network!r} is not allowed on this worker (allowed: {allowed})"
    if (spec.get("pull") or "never") == "if-missing" and cfg.pull != "if-missing":
        return "container pull 'if-missing' is not allowed on this worker (its [container] pull is 'never')"
    for m in spec.get("mounts") or ():
        source = os.path.realpath(str(m.get("source", "")))
        rule = next((r for r in cfg.mounts if _under(source, os.path.realpath(r.path))), None)
        if rule is None:
            return f"mount source {m.get('source')!r} is not under a path this worker allows"
        if not m.get("read_only", True) and not rule.rw:
            return f"mount source {m.get('source')!r} may be mounted read-only only on this worker"
    return ""


def _user_refusal(spec: Mapping[str, Any], cfg: ContainerConfig, own: Ids | None) -> str:
    """A team that has its own uid on this worker runs its containers as that uid, which its
    spec's `user` may repeat but not change: containers are rootful (uid 0 inside is uid 0 on
    the host), and any other uid is another identity on the host, perhaps another team's (its
    files in an allowlisted mount, its process limit). A name is resolved in the image's
    /etc/passwd, which the worker cannot see and the image's author controls (any name may be
    uid 0), so such a team names numbers."""
    user = str(spec.get("user") or "")
    if not user or own is None or cfg.allow_root_jobs:
        return ""
    parts = user.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 2:
        return (f"container user {user!r}: this worker runs the team's containers as its own uid "
                f"{own[0]}, so `user` names that number (a name is resolved inside the image and "
                "may be root)")
    if any(int(p) == 0 for p in parts):
        return (f"container user {user!r}: this worker separates teams, and their containers never "
                "run as uid or gid 0 (containers are rootful: root inside is root on the host)")
    if int(parts[0]) != own[0] or (len(parts) == 2 and int(parts[1]) != own[1]):
        return (f"container user {user!r}: this worker runs the team's containers as its own "
                f"uid:gid {own[0]}:{own[1]}, and no other (another uid is another identity on "
                "this host)")
    return ""


def container_user(spec: Mapping[str, Any], own: Ids | None) -> str:
    """The --user of an attempt: the spec's (checked by `refusal`), else the team's own
    uid:gid on this worker, else the image's ("")."""
    if spec.get("user"):
        return str(spec["user"])
    return f"{own[0]}:{own[1]}" if own is not None else ""


def _engine_args(cfg: ContainerConfig) -> list[str]:
    return [cfg.engine, *(["--runtime", cfg.runtime] if cfg.runtime and cfg.engine == "podman" else [])]


def run_argv(a: Assignment, spec: Mapping[str, Any], cfg: ContainerConfig, name: str,
             env_fd: int, cgroup_parent: str = "", own: Ids | None = None) -> list[str]:
    """The ``<engine> run`` command line of an attempt. No value of the job's environment is on
    it (they come from `env_fd`); everything else was checked by the cluster's validation."""
    argv = _engine_args(cfg) + ["run", "--name", name, "--env-file", f"/dev/fd/{env_fd}",
                                "--label", f"schedd.execution={a.execution_id}",
                                "--label", f"schedd.fencing={a.fencing_token}",
                                "--label", f"{LABEL_WORKER}={cfg.worker}",
                                "--label", f"{LABEL_CLUSTER}={cfg.cluster}",
                                "--network", spec.get("network") or "none",
                                "--pull", "missing" if spec.get("pull") == "if-missing" else "never",
                                # no capability at all, none to gain: a spec cannot add one
                                "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
                                "--log-driver", "none"]
    if cgroup_parent:
        argv += ["--cgroup-parent", cgroup_parent]
    for limit in cfg.ulimits:
        argv += ["--ulimit", limit]
    if spec.get("read_only", True):
        argv.append("--read-only")
    if spec.get("memory"):
        mib = memory_mib(spec)
        argv += ["--memory", f"{mib}m", "--memory-swap", f"{mib}m"]
    if spec.get("cpu"):
        argv += ["--cpus", f"{float(spec['cpu']):g}"]
    if spec.get("pids"):
        argv += ["--pids-limit", str(int(spec["pids"]))]
    user = container_user(spec, own)
    if user:
        argv += ["--user", user]
    if spec.get("workdir"):
        argv += ["--workdir", str(spec["workdir"])]
    for m in spec.get("mounts") or ():
        ro = "true" if m.get("read_only", True) else "false"
        argv += ["--mount", f"type=bind,source={m['source']},target={m['target']},readonly={ro}"]
    if spec.get("command"):
        argv += ["--entrypoint", "/bin/sh", str(spec["image"]), "-c", str(spec["command"])]
    else:
        argv += [str(spec["image"]), *[str(x) for x in spec.get("args") or ()]]
    return argv


def memory_mib(spec: Mapping[str, Any]) -> int:
    """The canonical "<N>Mi" of schedd.core.model.container_spec, as a number."""
    return int(str(spec["memory"]).removesuffix("Mi"))


def env_file(a: Assignment, spec: Mapping[str, Any]) -> bytes | str:
    """The --env-file text: the job's env, its secret env, then the contract (which wins). A
    value with a newline cannot be said in that format: the reason is returned instead."""
    env: dict[str, str] = {}
    given = spec.get("env")
    if isinstance(given, Mapping):
        env.update({str(k): str(v) for k, v in given.items()})
    env.update(a.secret_env)
    env.update(contract_env(a))
    bad = sorted(k for k, v in env.items() if "\n" in v or "\r" in v or "\0" in v)
    if bad:
        return f"container env {bad[0]!r}: a value with a line break cannot be passed to a container"
    return "".join(f"{k}={v}\n" for k, v in env.items()).encode()


# ------------------------------------------------------------------------------ the handler

class ContainerHandler:
    """``{"image": ..., "command"|"args": ..., ...}`` (schedd.core.model.container_spec) run with
    the worker's engine under its `ContainerConfig`; `team_ids` says who each team's containers
    run as (the worker's isolation: schedd_worker.executors.team_ids)."""

    def __init__(self, cfg: ContainerConfig, team_ids: TeamIds = no_team_ids) -> None:
        self.cfg = cfg
        self.team_ids = team_ids

    async def run(self, a: Assignment, spec: Mapping[str, Any], stop: Stop) -> Result:
        own = self.team_ids(a.team)
        if isinstance(own, str):
            return Result(FAILED, error=own)
        why = refusal(spec, self.cfg, own)
        if why:
            return Result(FAILED, error=f"refused by this worker: {why}")
        content = env_file(a, spec)
        if isinstance(content, str):
            return Result(FAILED, error=content)
        name = f"schedd-{a.fencing_token}-{secrets.token_hex(3)}"
        cgroup = _make_cgroup(self.cfg, a.fencing_token, spec)
        try:
            return await _attempt(a, spec, self.cfg, name, content, stop, cgroup, own)
        finally:
            if cgroup is not None:
                await asyncio.to_thread(_remove_cgroup, self.cfg, cgroup)


async def _attempt(a: Assignment, spec: Mapping[str, Any], cfg: ContainerConfig, name: str,
                   content: bytes, stop: Stop, cgroup: str | None, own: Ids | None) -> Result:
    watch_w, watchdog = await _start_watchdog(cfg, name)
    try:
        return await _run(a, spec, cfg, name, content, stop, cgroup, own)
    finally:
        # Normal end (or our task cancelled): the container is gone or going; the watchdog goes
        # first, so that closing its pipe does not run a second rm.
        if watchdog is not None:
            _kill(watchdog.pid)
        os.close(watch_w)
        if watchdog is not None:
            await watchdog.wait()


async def _start_watchdog(cfg: ContainerConfig, name: str) -> tuple[int, asyncio.subprocess.Process | None]:
    """A process that removes the container when the worker dies (module docstring). The second
    rm, a second later, catches a container whose start was under way when the first ran."""
    r, w = os.pipe()                        # both O_CLOEXEC: only the watchdog gets `r` (as stdin)
    rm = " ".join([*_engine_args(cfg), "rm", "-f", *(["-t", "0"] if cfg.engine == "podman" else [])])
    script = f'cat >/dev/null; {rm} "$0" >/dev/null 2>&1; sleep 1; exec {rm} "$0" >/dev/null 2>&1'
    try:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", script, name, stdin=r, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        log.warning("container %s: no watchdog (%s); it may outlive this worker", name, e)
        proc = None
    finally:
        os.close(r)
    return w, proc


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _write_env(fd: int, content: bytes) -> None:
    """Feed the env pipe (in a thread: more than a pipe's 64 KiB would block) and close it."""
    try:
        view = memoryview(content)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError:
        pass                                 # the engine died before reading it: it says why
    finally:
        os.close(fd)


async def _run(a: Assignment, spec: Mapping[str, Any], cfg: ContainerConfig, name: str,
               content: bytes, stop: Stop, cgroup: str | None, own: Ids | None) -> Result:
    env_r, env_w = os.pipe()
    argv = run_argv(a, spec, cfg, name, env_r, cgroup or "", own)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(env_r,), start_new_session=True)
    except OSError as e:
        os.close(env_w)
        return Result(FAILED, error=f"cannot start {cfg.engine}: {e}")
    finally:
        os.close(env_r)
    threading.Thread(target=_write_env, args=(env_w, content), daemon=True).start()
    out = Capture(stop.log)
    assert proc.stdout is not None and proc.stderr is not None
    reader = asyncio.ensure_future(asyncio.gather(_pump(proc.stdout, out, STDOUT),
                                                  _pump(proc.stderr, out, STDERR)))
    exited = asyncio.ensure_future(proc.wait())
    try:
        how = await race(exited, stop.cancel, stop.deadline)
        if how != "done":
            await _stop_container(cfg, name, stop.grace)
            await asyncio.wait({exited}, timeout=ENGINE_TIMEOUT_S)
            await asyncio.wait({reader}, timeout=1.0)
            state, error = stopped(how, a)
            return Result(state, exit_code=proc.returncode, error=error, output_tail=out.text())
        await asyncio.wait({reader}, timeout=1.0)
        rc = proc.returncode
        assert rc is not None
        oom = await _oom_killed(cfg, name, cgroup, rc)
        state, error = _exit_result(rc, spec, oom, cfg.engine)
        return Result(state, exit_code=rc, error=error, output_tail=out.text())
    except asyncio.CancelledError:
        _kill(proc.pid)
        await asyncio.shield(_engine(cfg, "rm", "-f", *(["-t", "0"] if cfg.engine == "podman" else []), name))
        raise
    finally:
        reader.cancel()
        exited.cancel()
        await _engine(cfg, "rm", "-f", *(["-t", "0"] if cfg.engine == "podman" else []), name)


async def _pump(stream: asyncio.StreamReader, out: Capture, which: int) -> None:
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return
        out.feed(which, chunk)


async def _engine(cfg: ContainerConfig, *args: str) -> tuple[int, str]:
    """Run one engine command to its end: (exit status, output); -1 when it could not run."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *_engine_args(cfg), *args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT)
    except OSError as e:
        return -1, str(e)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), ENGINE_TIMEOUT_S)
    except TimeoutError:
        _kill(proc.pid)
        await proc.wait()
        log.warning("%s %s: no answer in %gs", cfg.engine, " ".join(args), ENGINE_TIMEOUT_S)
        return -1, "timed out"
    return proc.returncode or 0, out.decode(errors="replace")


async def _stop_container(cfg: ContainerConfig, name: str, grace: float) -> None:
    """SIGTERM, `grace` seconds, SIGKILL (the engine's stop), then removal."""
    await _engine(cfg, "stop", "-t", str(max(0, int(grace))), name)
    await _engine(cfg, "rm", "-f", name)


async def _oom_killed(cfg: ContainerConfig, name: str, cgroup: str | None, rc: int) -> bool:
    if rc != 137:
        return False
    if cgroup is not None and cfg.cgroup_root is not None:
        return _v1_limit_hit(cfg.cgroup_root / "memory" / cgroup.lstrip("/"))
    code, out = await _engine(cfg, "inspect", "--format", "{{.State.OOMKilled}}", name)
    return code == 0 and out.strip() == "true"


def _v1_limit_hit(memory_dir: Path) -> bool:
    """Whether the attempt's memory cgroup (v1) reached its limit: failcnt counts the charges
    refused at the limit, max_usage_in_bytes is its peak (oom_control's oom_kill stays 0 here)."""
    try:
        failcnt = int((memory_dir / "memory.failcnt").read_text())
        peak = int((memory_dir / "memory.max_usage_in_bytes").read_text())
        limit = int((memory_dir / "memory.limit_in_bytes").read_text())
    except (OSError, ValueError):
        return False
    return failcnt > 0 or peak >= limit


def _exit_result(rc: int, spec: Mapping[str, Any], oom: bool, engine: str) -> tuple[str, str]:
    if rc == 0:
        return SUCCEEDED, ""
    if oom:
        return FAILED, f"killed: out of memory (limit {memory_mib(spec)} MiB)"
    if rc == 125:
        return FAILED, f"the container did not run: {engine} failed (exit status 125; see the output)"
    if rc in (126, 127):
        return FAILED, f"exit status {rc}: the command could not be run in the image"
    if rc > 128:
        try:
            return FAILED, f"killed by signal {signal.Signals(rc - 128).name} (exit status {rc})"
        except ValueError:
            pass
    return FAILED, f"exit status {rc}"


# ------------------------------------------------------------------------------ cgroup v1

def _make_cgroup(cfg: ContainerConfig, token: int, spec: Mapping[str, Any]) -> str | None:
    """The parent cgroup (v1) of an attempt with a memory limit, or None (no limit, cgroup v2,
    not writable: podman's own accounting is used)."""
    if cfg.cgroup_root is None or not spec.get("memory"):
        return None
    rel = f"schedd-attempt-{token}"
    memory = cfg.cgroup_root / "memory" / rel
    try:
        memory.mkdir(exist_ok=True)
        (memory / "memory.limit_in_bytes").write_text(str(memory_mib(spec) << 20))
    except OSError as e:
        log.warning("no attempt cgroup %s (%s): an OOM kill is reported as exit 137", memory, e)
        _remove_cgroup(cfg, f"/{rel}")
        return None
    return f"/{rel}"


def _remove_cgroup(cfg: ContainerConfig, rel: str) -> None:
    """The engine makes the parent in every controller (with a conmon child): remove them all,
    deepest first."""
    if cfg.cgroup_root is None:
        return
    for controller in cfg.cgroup_root.iterdir():
        top = controller / rel.lstrip("/")
        if not top.is_dir():
            continue
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            _rmdir(d)
        _rmdir(top)


def _rmdir(d: Path) -> None:
    try:
        d.rmdir()
    except OSError as e:
        log.warning("cannot remove cgroup %s: %s", d, e)


def cgroup_v1_root() -> Path | None:
    """The cgroup v1 hierarchy root when its memory controller is writable here, else None."""
    memory = CGROUP_V1 / "memory"
    if (memory / "memory.limit_in_bytes").exists() and os.access(memory, os.W_OK):
        return CGROUP_V1
    return None


# ------------------------------------------------------------------------------ start-up

@dataclass(frozen=True, slots=True)
class Probe:
    """What the start-up probe found: the config to run with, or why containers are off."""
    config: ContainerConfig | None
    why: str = ""


def probe(cfg: ContainerConfig, candidates: Sequence[str] = ("", "runc")) -> Probe:
    """Is the engine there and does a runtime work? ``<engine> info`` first; then, with podman
    and a static busybox on the host, a tiny container from a root filesystem made here
    (``--rootfs``: no image, no registry, nothing to configure) with the configured runtime, or
    the engine's default then runc. A probe image would need configuring and pulling; a busybox
    is on most hosts, and without one the engine's info is trusted. Blocking (start-up only)."""
    if shutil.which(cfg.engine) is None:
        return Probe(None, f"{cfg.engine} is not installed")
    info = _call([cfg.engine, "info", "--format", "{{.Host.OCIRuntime.Name}}"
                  if cfg.engine == "podman" else "{{.DefaultRuntime}}"])
    if info[0] != 0:
        return Probe(None, f"`{cfg.engine} info` failed: {info[1].strip()[-300:]}")
    busybox = _static_busybox()
    if cfg.engine != "podman" or busybox is None:
        return Probe(cfg)
    tried = []
    for runtime in ([cfg.runtime] if cfg.runtime else list(candidates)):
        trial = dataclasses.replace(cfg, runtime=runtime)
        why = _try_rootfs(trial, busybox)
        if not why:
            return Probe(trial)
        tried.append(f"{runtime or 'default'}: {why}")
    return Probe(None, "no working container runtime (" + "; ".join(tried) + ")")


def _call(argv: list[str], timeout: float = ENGINE_TIMEOUT_S) -> tuple[int, str]:
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


def _static_busybox() -> str | None:
    path = shutil.which("busybox")
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(16384)
    except OSError:
        return None
    return None if b"ld-linux" in head or b"ld-musl" in head else path


def _try_rootfs(cfg: ContainerConfig, busybox: str) -> str:
    with tempfile.TemporaryDirectory(prefix="schedd-probe-") as root:
        (Path(root) / "bin").mkdir()
        shutil.copy2(busybox, Path(root) / "bin" / "busybox")
        argv = [*_engine_args(cfg), "run", "--rm", "--network", "none", "--log-driver", "none",
                *[x for u in cfg.ulimits for x in ("--ulimit", u)], "--rootfs", root, "/bin/busybox", "true"]
        code, out = _call(argv)
    return "" if code == 0 else out.strip()[-300:] or f"exit status {code}"


def cluster_key(addresses: list[str], ca_pem: bytes | None) -> str:
    """What tells this worker's containers from those of a same-named worker of another cluster
    on the host: a digest of the cluster's CA certificate (stable when members change), or of
    its sorted addresses when it has no TLS."""
    seed = ca_pem if ca_pem else ",".join(sorted(addresses)).encode()
    return hashlib.sha256(seed).hexdigest()[:16]


def sweep(cfg: ContainerConfig) -> list[str]:
    """Remove every container labelled with this worker's name and cluster: at start it holds
    none, so any such container is left from an earlier run of it (the watchdog missed it).
    Returns them."""
    code, out = _call([*_engine_args(cfg), "ps", "-a", "--filter", f"label={LABEL_WORKER}={cfg.worker}",
                       "--filter", f"label={LABEL_CLUSTER}={cfg.cluster}", "--format", "{{.Names}}"])
    names = [n for n in out.split() if n] if code == 0 else []
    if names:
        _call([*_engine_args(cfg), "rm", "-f", *names])
        log.warning("removed %d container(s) left by an earlier run of worker %s: %s", len(names),
                    cfg.worker, ", ".join(names))
    return names
