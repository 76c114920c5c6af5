"""`schedd-worker` (also `schedd worker`): run the attempts the leader pushes (shell, HTTP, Python
handlers registered through `schedd_worker.Worker`, DAG sensors).

No uvloop here: uvloop starts a child in a new session by running Python between fork and exec,
and in a process with gRPC threads that child can crash (SIGSEGV) before it execs; CPython's own
subprocess code does setsid in C.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.metadata
import logging
import os
import sys
from pathlib import Path
from typing import Any

from schedd_proto import PROTOCOL_VERSION
from schedd_worker.config import ConfigError, WorkerConfig, load_config
from schedd_worker.isolation import IsolationPolicy
from schedd_worker.timers import DEFAULT_AHEAD

__all__ = ["main", "build_parser", "version_line", "add_arguments", "cmd_worker", "root_refusal", "separation"]


def setup_logging(level: str, name: str = "") -> None:
    prefix = f"[{name}] " if name else ""
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s {prefix}%(name)s: %(message)s")


def _whole_number(minimum: int):
    """An argparse type: a whole number of at least `minimum`, or a one-line error."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {n}")
        return n
    return parse


_non_negative_int, _positive_int = _whole_number(0), _whole_number(1)


def _seconds(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not x >= 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text}")
    return x


def _labels(text: str) -> dict[str, str]:
    """"k=v,k=v" -> dict; "" -> {}."""
    out: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected key=value pairs separated by commas, "
                                             f"got {part!r}")
        if key in out:
            raise argparse.ArgumentTypeError(f"label {key!r} given twice")
        out[key] = value
    return out


def _rules(text: str) -> list[str]:
    """"a,b" -> ["a", "b"], each a valid network rule (schedd_client.net.policy)."""
    from schedd_client.net.policy import PolicyError, parse_rule, split_list
    items = split_list(text)
    try:
        for x in items:
            parse_rule(x)
    except PolicyError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return items


def _uid_range(text: str) -> tuple[int, int]:
    from schedd_worker.uids import UidError, parse_range
    try:
        return parse_range(text)
    except UidError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _quiet_grpc_fork() -> None:
    """Before gRPC is imported: a worker forks a child per shell attempt (which execs at once),
    and gRPC's fork handlers would only log "skipping fork() handlers" for each one."""
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


def _cluster(text: str) -> list[str]:
    _quiet_grpc_fork()
    from schedd_client.context import parse_cluster
    try:
        return parse_cluster(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def root_refusal(euid: int, allow_root: bool, mapped: bool = False, *, flag: str = "--allow-root",
                 can_map: bool = True) -> str:
    """Why a worker must not start as this user ("" when it may). Without team mappings jobs run
    as the worker's user: as root, any job owns the host. With them ([isolation.teams] in the
    config) root is how the worker switches users; it then keeps only CAP_SETUID, CAP_SETGID and
    CAP_KILL, and no job runs as root. `flag`/`can_map`: how the caller says yes (the CLI's flag,
    the SDK's parameter; the SDK has no team mappings)."""
    if euid == 0 and not allow_root and not mapped:
        mapping = ("give it a uid range (--uid-range 61000-61999: each team's jobs run as a uid of "
                   "their own), map teams to users in its --config ([isolation.teams.<team>]), "
                   if can_map else "")
        return ("refusing to run as root: every job would run as root. Run the worker as an "
                "unprivileged user (deploy/schedd-worker.service uses User=schedd-jobs), "
                f"{mapping}or pass {flag} if you really mean it")
    return ""


#: the built-in values of the settings a flag or the config file may give (flag > file > these)
DEFAULTS: dict[str, Any] = {"slots": 4, "ahead": DEFAULT_AHEAD, "pool": "", "labels": {}, "name": None, "drain_grace": 30.0,
                            "http_allow": [], "http_deny": [], "http_keep_bytes": 4096,
                            "allow_root": False, "cluster": None}


def _settings(args: argparse.Namespace, cfg: WorkerConfig | None) -> argparse.Namespace:
    """`args` with every setting resolved: the flag if given, else the file's, else DEFAULTS."""
    out = argparse.Namespace(**vars(args))
    values = cfg.values if cfg is not None else {}
    for key, default in DEFAULTS.items():
        if getattr(args, key, None) is None:
            if key == "cluster" and "cluster" in values:
                setattr(out, key, _cluster(values["cluster"]))
            elif key in ("http_allow", "http_deny") and key in values:
                setattr(out, key, _rules(",".join(values[key])))
            else:
                setattr(out, key, values.get(key, default))
    return out


def _policy(cfg: WorkerConfig | None, args: argparse.Namespace, euid: int) -> IsolationPolicy:
    """The config's team mappings plus the uid range (flag > file), and who the worker is."""
    from schedd_worker.uids import DEFAULT_STATE_DIR, TeamUids
    policy = cfg.isolation if cfg is not None else IsolationPolicy()
    span = args.uid_range or (cfg.uid_range if cfg is not None else None)
    uids = None
    if span is not None:
        state = args.state_dir or (cfg.state_dir if cfg is not None else "") or DEFAULT_STATE_DIR
        uids = TeamUids(span[0], span[1], Path(state),
                        taken=frozenset(u.uid for u in policy.teams.values()))
    return dataclasses.replace(policy, uids=uids, worker_uid=euid)


def separation(euid: int, policy: IsolationPolicy, can_switch: bool) -> str:
    """Why this worker's jobs cannot be told apart by uid ("" when each team runs as its own).
    A root worker with a mapping or a range switches users; anything else runs every job as the
    worker's uid (a laptop's user, or root with --allow-root)."""
    others = bool(policy.uids) or any(u.uid != euid for u in policy.teams.values())
    if policy.mapped and others and (euid == 0 or can_switch):
        return ""
    who = "root" if euid == 0 else f"this worker's user (uid {euid})"
    return (f"every job runs as {who}: any job can read the others' environment "
            "(/proc/<pid>/environ, secrets included) and files, and signal them. Run the worker "
            "as root with [isolation] uid_range or --uid-range (a uid per team), or use container "
            "jobs (docs/workers.md \"Isolation on workers\")")


def _isolation(policy: IsolationPolicy, cgroup: str, euid: int):
    """The Isolation of this worker (team users, attempt cgroups), its own capabilities cut
    down to what switching users takes when it runs as root (its containers then run in the
    broker it started before: `_containers`). Raises SystemExit with why not."""
    from schedd_worker.cgroups import CgroupError, Cgroups
    from schedd_worker.executors import Isolation
    from schedd_worker.uids import UidError
    from schedd_worker import caps
    others = [u for u in policy.teams.values() if (u.uid, u.gid) != (euid, os.getegid())]
    try:
        cgroups = Cgroups.from_setting(cgroup)
        if policy.uids is not None:
            policy.uids.prepare()
    except (CgroupError, UidError, OSError) as e:
        raise SystemExit(f"schedd worker: error: [isolation]: {e}") from None
    keep = caps.KEEP + ((caps.CAP_CHOWN,) if policy.uids is not None else ())  # team folders
    if policy.mapped and euid == 0:
        try:
            caps.drop_capabilities(keep)
        except OSError as e:
            raise SystemExit(f"schedd worker: error: cannot drop capabilities: {e}") from None
    elif (others or policy.uids) and not caps.has_caps(keep):
        who = (f"team {others[0].team!r} maps to user {others[0].user!r}" if others
               else "[isolation] uid_range gives each team its own uid")
        raise SystemExit(f"schedd worker: error: {who}, and this worker (uid {euid}) cannot switch "
                         "users: run it as root (it keeps only CAP_SETUID, CAP_SETGID, CAP_KILL"
                         "[, CAP_CHOWN]) or give it those capabilities (systemd AmbientCapabilities=)")
    return Isolation(policy=policy, cgroups=cgroups)


def _log_store(args: argparse.Namespace, cfg: WorkerConfig | None, euid: int, log: logging.Logger):
    """The run log folder (flag > [logs] dir > <state dir>/logs > the default for the worker's
    user) and its bounds (flags > [logs]); None when logs are off. A folder named explicitly
    that cannot be made stops the worker; the default one only warns (the runs then keep
    their tail alone)."""
    import dataclasses as dc
    from schedd_worker.run_logs import LogLimits, LogStore
    from schedd_worker.uids import DEFAULT_STATE_DIR
    if args.no_logs or (cfg is not None and not cfg.logs_enabled):
        return None
    limits = cfg.logs if cfg is not None else LogLimits()
    try:
        limits = dc.replace(limits, **{k: v for k, v in (
            ("attempt_bytes", args.log_attempt_bytes), ("total_bytes", args.log_total_bytes),
            ("max_age_s", args.log_max_age)) if v is not None})
    except ValueError as e:
        raise SystemExit(f"schedd worker: error: {e}") from None
    named = args.log_dir or (cfg.logs_dir if cfg is not None else "")
    state = args.state_dir or (cfg.state_dir if cfg is not None else "")
    if named:
        root = Path(named)
    elif state or euid == 0:
        root = Path(state or DEFAULT_STATE_DIR) / "logs"
    else:
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        root = Path(base) / "schedd-worker" / "logs"
    try:
        return LogStore(root, limits)
    except OSError as e:
        if named:
            raise SystemExit(f"schedd worker: error: run logs: cannot use {root}: {e}") from None
        log.warning("run logs are off: cannot use %s (%s); set [logs] dir or --log-dir", root, e)
        return None


def _undumpable(log: logging.Logger) -> None:
    """No job (even one of the worker's own uid) reads the worker's token from /proc/<pid>."""
    from schedd_worker import caps
    try:
        caps.make_undumpable()
    except OSError as e:
        log.warning("cannot make the worker non-dumpable (%s): a job of the worker's own uid "
                    "could read its environment and memory", e)


def _say_who_runs_jobs(policy: IsolationPolicy, log: logging.Logger) -> None:
    parts = [f"{t} -> {u.user} (uid {u.uid})" for t, u in sorted(policy.teams.items())]
    if policy.uids is not None:
        parts.append(f"every other team -> its own uid from {policy.uids.first}-{policy.uids.last}"
                     f" (folders in {policy.uids.state_dir / 'work'})")
    elif parts:
        parts.append("other teams are refused")
    if parts:
        log.info("jobs run as: %s", "; ".join(parts))


def _http_options(args: argparse.Namespace):
    from schedd_client.net.policy import PolicyError, make_policy
    from schedd_worker.executors import HttpOptions
    try:
        policy = make_policy(allow=args.http_allow, deny=args.http_deny)
        return HttpOptions(policy=policy, keep_bytes=args.http_keep_bytes)
    except (PolicyError, ValueError) as e:
        raise SystemExit(f"schedd worker: error: {e}") from None


def cmd_worker(args: argparse.Namespace, *, euid: int | None = None) -> int:
    """`euid`: who the worker is (default os.geteuid(); tests pass another to play a user)."""
    import signal
    import socket

    cfg = None
    if getattr(args, "config", None):
        try:
            cfg = load_config(args.config)
        except ConfigError as e:
            print(f"schedd worker: error: {e}", file=sys.stderr)
            return 2
    try:
        args = _settings(args, cfg)
    except argparse.ArgumentTypeError as e:
        print(f"schedd worker: error: {args.config}: {e}", file=sys.stderr)
        return 2
    euid = os.geteuid() if euid is None else euid
    policy = _policy(cfg, args, euid)
    why = root_refusal(euid, args.allow_root, mapped=policy.mapped)
    if why:
        print(f"schedd worker: {why}", file=sys.stderr)
        return 2
    from schedd_worker import caps
    shared = separation(euid, policy, caps.has_caps((caps.CAP_SETUID, caps.CAP_SETGID)))
    if shared and (args.isolation == "require" or (cfg is not None and cfg.require)):
        print(f"schedd worker: refusing to start: isolation is required and {shared}",
              file=sys.stderr)
        return 2
    name = args.name or f"{socket.gethostname()}-{os.getpid()}"
    from schedd_client.context import resolve
    try:
        cluster, security = resolve(args.cluster, ca=args.ca, cert=args.cert, key=args.key,
                                    token=args.token, context=args.context)
    except ValueError as e:        # ContextError, a bad address
        print(f"schedd worker: error: {e}", file=sys.stderr)
        return 2
    setup_logging(args.log_level, name)
    log = logging.getLogger("schedd.worker")
    logs = _log_store(args, cfg, euid, log)
    # Before gRPC or anything else starts a thread: capabilities are per thread. The container
    # probe (subprocesses only, no thread) goes first: it decides whether the worker keeps them.
    containers = _containers(args, cfg, name, log, root=euid == 0, policy=policy,
                             cluster=_cluster_key(cluster, security))
    isolation = _isolation(policy, cfg.cgroup if cfg is not None else "off", euid)
    if shared:
        log.warning("jobs are not isolated from each other: %s", shared)
    _quiet_grpc_fork()
    from schedd_worker.hooks import configure_worker
    from schedd_worker.runtime import CredentialRefused, WorkerRuntime

    try:           # gRPC's credentials: only now, after the probe (capabilities are per thread)
        security.credentials_for_channel()
    except ValueError as e:        # SecurityError
        print(f"schedd worker: error: {e}", file=sys.stderr)
        return 2
    http = _http_options(args)
    _say_who_runs_jobs(isolation.policy, log)
    runtime = WorkerRuntime(cluster, name=name, slots=args.slots, ahead=args.ahead, pool=args.pool,
                            labels=args.labels, drain_grace_s=args.drain_grace, http=http,
                            hooks=configure_worker(name), isolation=isolation, security=security,
                            containers=containers, logs=logs)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(sig: signal.Signals) -> None:
            if stop.is_set():
                log.warning("%s again: cancelling running attempts now", sig.name)
                runtime.hurry()
            else:
                log.info("%s: draining (up to %gs; send it again to cancel running attempts)",
                         sig.name, args.drain_grace)
                stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        log.info("worker %s: %d slots, pool %r, labels %s, cluster %s (%s), http: %s", name,
                 args.slots, args.pool, args.labels, ",".join(cluster), security.describe(),
                 http.policy.describe())
        await runtime.run(stop)

    _undumpable(log)          # before the first job can run
    code = 0
    try:
        asyncio.run(main())   # not uvloop: see the module doc
    except CredentialRefused:  # logged at ERROR by the runtime, with what to do
        code = 2
    # Like serve: skip interpreter teardown, where gRPC's threads can race module cleanup (and a
    # Python handler thread that ignored its cancel event would keep the process alive).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _cluster_key(cluster: list[str], security) -> str:
    """The schedd.cluster label of this worker's containers (handlers.container.cluster_key)."""
    from schedd_worker.handlers.container import cluster_key
    try:
        ca = security.ca.read_bytes() if security.ca is not None else None
    except OSError:
        ca = None
    return cluster_key(cluster, ca)


def _containers(args: argparse.Namespace, cfg: WorkerConfig | None, name: str, log: logging.Logger,
                root: bool = False, policy: IsolationPolicy | None = None, cluster: str = ""):
    """What runs this worker's containers after the start-up probe: their config (run in this
    process), the broker holding it (a root worker that separates teams: it drops root's
    capabilities in `_isolation`, which a rootful engine needs, so a process of its own keeps
    them: schedd_worker.handlers.container_broker), or None (off, or no working engine or
    runtime: it then does not advertise "container" and gets no such job). Containers left by
    an earlier run of this worker (same name, same cluster) are removed first. Before any thread starts."""
    import dataclasses
    from schedd_worker.handlers.container import ContainerConfig, cgroup_v1_root, probe, sweep
    from schedd_worker.handlers.container_broker import BrokerError, ContainerBroker
    base = cfg.container if cfg is not None else ContainerConfig()
    choice = args.container_runtime or (cfg.container_runtime if cfg is not None else "auto")
    if choice == "off":
        log.info("container jobs: off")
        return None
    if policy is None:
        policy = cfg.isolation if cfg is not None else None
    base = dataclasses.replace(base, engine=args.container_engine or base.engine, worker=name, cluster=cluster,
                               runtime="" if choice == "auto" else choice, cgroup_root=cgroup_v1_root(),
                               allow_root_jobs=bool(policy and policy.allow_root_jobs))
    found = probe(base)
    if found.config is None:
        log.warning("container jobs: off: %s", found.why)
        return None
    sweep(found.config)
    brokered = root and policy is not None and policy.mapped
    log.info("container jobs: %s, runtime %s, networks none%s, %d mount rule(s), pull %s%s", found.config.engine,
             found.config.runtime or "default", "".join(f", {n}" for n in found.config.networks),
             len(found.config.mounts), found.config.pull,
             "; run by a broker process that keeps root's capabilities, which this worker drops, "
             "each container as its team's uid with none" if brokered else "")
    if not brokered:
        return found.config
    try:
        return ContainerBroker.start(found.config)
    except BrokerError as e:
        log.warning("container jobs: off: %s", e)
        return None


def add_arguments(w: argparse.ArgumentParser) -> None:
    """The worker's flags (on `schedd-worker` and on the daemon's `schedd worker`)."""
    w.add_argument("--cluster", type=_cluster, default=None,
                   help="node gRPC addresses host:port,host:port (default: $SCHEDD_CLUSTER, "
                        "else 127.0.0.1:7070); any node will do")
    w.add_argument("--config", metavar="FILE",
                   help="the worker's TOML config (schedd_worker.config): these settings, the "
                        "team -> Unix user mapping ([isolation.teams]) and cgroups; a flag given "
                        "here wins over the file")
    w.add_argument("--slots", type=_positive_int, default=None, help="concurrent attempts (default 4)")
    w.add_argument("--ahead", type=_non_negative_int, default=None,
                   help=f"assignments not yet due held beyond the slots, so a herd due at one instant is "
                        f"pushed before it (default {DEFAULT_AHEAD}; 0: no more than the slots)")
    w.add_argument("--pool", default=None, help="the pool this worker serves (default: none)")
    w.add_argument("--context", metavar="FILE",
                   help="a context file with the cluster, CA/cert/key and token (default: "
                        "$SCHEDD_CONTEXT)")
    w.add_argument("--ca", metavar="FILE", help="connect with TLS trusting this CA "
                                                "(default: $SCHEDD_CA)")
    w.add_argument("--cert", metavar="FILE", help="the worker's client certificate for mTLS "
                                                  "(default: $SCHEDD_CERT)")
    w.add_argument("--key", metavar="FILE", help="its key (default: $SCHEDD_KEY)")
    w.add_argument("--labels", type=_labels, default=None, metavar="K=V,...",
                   help="labels jobs may require, e.g. region=eu,gpu=1")
    w.add_argument("--name", help="unique worker name (default: <hostname>-<pid>)")
    w.add_argument("--drain-grace", type=_seconds, default=None, metavar="S",
                   help="on SIGTERM, let running attempts finish this long, then cancel them "
                        "(default 30)")
    w.add_argument("--http-allow", type=_rules, action="extend", default=None, metavar="NET,...",
                   help="networks/hosts HTTP jobs and http sensors may reach although the deny "
                        "list refuses them, e.g. 127.0.0.1 or 10.1.0.0/16 or *.corp")
    w.add_argument("--http-deny", type=_rules, action="extend", default=None, metavar="NET,...",
                   help="networks/hosts to refuse besides the defaults (loopback, link-local, "
                        "cloud metadata); '*' makes --http-allow a strict allow-list")
    w.add_argument("--http-keep-bytes", type=int, default=None, metavar="N",
                   help="bytes of an HTTP answer kept as the run's output tail (0-4096, "
                        "default 4096; 0 keeps none)")
    w.add_argument("--token", default=None, metavar="TOKEN",
                   help="worker token <accessor>.<secret> (default: $SCHEDD_TOKEN; prefer the variable: "
                        "a command line is visible to other users)")
    w.add_argument("--container-runtime", default=None, metavar="RUNTIME",
                   help="container jobs: auto (default: the engine's runtime, else runc, probed at "
                        "start), off (this worker runs none), or a runtime's name (runc, crun) to force")
    w.add_argument("--container-engine", choices=("podman", "docker"), default=None,
                   help="the container CLI (default podman; docker takes the same arguments)")
    w.add_argument("--uid-range", type=_uid_range, default=None, metavar="FIRST-LAST",
                   help="run each team's jobs as its own uid from this range, e.g. 61000-61999 "
                        "(no passwd entry needed; needs root), for teams --config does not map")
    w.add_argument("--state-dir", default=None, metavar="DIR",
                   help="where the team -> uid table and the teams' working folders are kept "
                        "(default /var/lib/schedd-worker)")
    w.add_argument("--log-dir", default=None, metavar="DIR",
                   help="where run logs are kept, one folder per attempt (default: <state dir>/logs "
                        "as root, else ~/.local/state/schedd-worker/logs)")
    w.add_argument("--no-logs", action="store_true",
                   help="keep no run logs (runs then show only the output tail of the Raft log)")
    w.add_argument("--log-attempt-bytes", type=_positive_int, default=None, metavar="N",
                   help="run log bound per attempt: its head and tail are kept (default 16 MiB)")
    w.add_argument("--log-total-bytes", type=_positive_int, default=None, metavar="N",
                   help="run logs of this worker in all: the oldest go first (default 1 GiB)")
    w.add_argument("--log-max-age", type=_seconds, default=None, metavar="S",
                   help="remove a run log this long after its attempt ended (default 7 days)")
    w.add_argument("--isolation", choices=("auto", "require"), default="auto",
                   help="require: refuse to start unless each team's jobs run as a uid of their "
                        "own (auto: warn once when they cannot)")
    w.add_argument("--allow-root", action="store_true", default=None,
                   help="run even as root without team mappings (jobs then run as root too); "
                        "refused otherwise")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="schedd-worker",
                                description="run attempts pushed by the schedd leader (shell, HTTP)")
    p.add_argument("--version", action="version", version=version_line(),
                   help="print the worker's version and the protocol it speaks, and exit")
    p.add_argument("--log-level", default=os.environ.get("SCHEDD_LOG_LEVEL", "info"),
                   choices=["debug", "info", "warning", "error"])
    add_arguments(p)
    return p


def version_line() -> str:
    """What ``schedd-worker --version`` prints: this worker's version, the client it runs on and
    the API protocol, as ``schedctl --version`` says its own."""
    versions = []
    for dist in ("schedd-worker", "schedd-client"):
        try:
            versions.append(importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            versions.append("unknown")
    return f"schedd-worker {versions[0]} (schedd-client {versions[1]}, protocol {PROTOCOL_VERSION})"


def main(argv: list[str] | None = None, *, euid: int | None = None) -> int:
    return cmd_worker(build_parser().parse_args(argv), euid=euid)


if __name__ == "__main__":
    sys.exit(main())
