"""`schedd` command line: serve one node, or run a local cluster."""

from __future__ import annotations

import os

# A node forks children that never use gRPC (pysyncobj's snapshot dump, a backup's image:
# schedd.replication.backup). gRPC's own fork handling restarts its threads in such a child,
# polling the epoll set it shares with the parent (a backup child aborted in ev_epoll1). gRPC
# reads this when it is imported, so it is set here, before anything imports it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from schedd.runtime import config as config_mod
from schedd_worker import cli as worker_cli
from schedd_worker.cli import root_refusal  # noqa: F401 - re-exported: `schedd worker` is schedd-worker


def _setup_logging(level: str, node: str = "") -> None:
    prefix = f"[{node}] " if node else ""
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s {prefix}%(name)s: %(message)s")
    logging.getLogger("pysyncobj").setLevel(logging.WARNING)


def _run(coro, *, uvloop_ok: bool = True) -> None:
    """Run on uvloop where it is available (SCHEDD_UVLOOP=0 turns it off). Workers do not: uvloop
    starts a child in a new session by running Python between fork and exec, and in a process
    with gRPC threads that child can crash (SIGSEGV) before it execs; CPython's own subprocess
    code does setsid in C."""
    if uvloop_ok and os.environ.get("SCHEDD_UVLOOP", "1") != "0":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.run(coro)
            return
    asyncio.run(coro)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        cfg = config_mod.load(args.config, node_id=args.node_id, data_dir=args.data_dir,
                              grpc_address=args.grpc_address, raft_address=args.raft_address,
                              metrics_address=args.metrics_address, fsync=args.fsync, join=args.join)
    except config_mod.ConfigError as e:
        print(f"schedd: config error: {e}", file=sys.stderr)
        return 2
    _setup_logging(args.log_level, cfg.node_id)
    from schedd.runtime.daemon import StartupError, serve  # grpc is imported only for a valid config
    code = 0
    try:
        _run(serve(cfg))
    except StartupError as e:
        print(f"schedd: {e}", file=sys.stderr)
        code = 1
    # Everything is stopped and the journal closed; skip interpreter teardown, where gRPC's
    # background threads can race the module cleanup and abort the process.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cmd_gen_secret(args: argparse.Namespace) -> int:
    """Print a new cluster secret, or write it to a new 0600 file (never over an existing one)."""
    secret = config_mod.generate_secret()
    if not args.out:
        print(secret)
        return 0
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        print(f"schedd gen-secret: {args.out} exists; not overwriting it (move it away first)",
              file=sys.stderr)
        return 1
    except OSError as e:
        print(f"schedd gen-secret: cannot create {args.out}: {e.strerror}", file=sys.stderr)
        return 1
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)                   # whatever the umask
        f.write(secret + "\n")
    print(f"schedd gen-secret: wrote a new cluster secret to {args.out} (mode 0600)", file=sys.stderr)
    return 0


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _node_hosts(nodes: list[str], hosts: list[str]) -> list:
    """NodeSpecs from --nodes and --hosts: `ID=H1,H2` names one node's hosts, a bare `H1,H2`
    every node's; a node with none gets localhost, 127.0.0.1 and ::1."""
    from schedd.security.certs import LOCAL_HOSTS, CertError, NodeSpec
    every: list[str] = []
    own: dict[str, list[str]] = {n: [] for n in nodes}
    for item in hosts:
        node, sep, rest = item.partition("=")
        if sep:
            if node not in own:
                raise CertError(f"--hosts {item!r} names node {node!r}, which --nodes does not list")
            own[node] += _names(rest)
        else:
            every += _names(item)
    return [NodeSpec(n, tuple(dict.fromkeys(own[n] + every)) or LOCAL_HOSTS) for n in nodes]


def _issue_target(args: argparse.Namespace) -> tuple[str, str]:
    """(kind, name) of `certs issue`: `KIND NAME` or one of --node/--worker/--admin/--user."""
    from schedd.security.certs import KINDS, CertError
    flags = [(k, v) for k, v in (("node", args.node), ("worker", args.worker), ("admin", args.admin),
                                 ("user", args.user)) if v]
    given = flags + ([(args.kind, args.name or "")] if args.kind else [])
    if len(given) != 1:
        raise CertError(f"name one certificate: KIND NAME (KIND one of {', '.join(KINDS)}) or one of "
                        "--node, --worker, --admin, --user")
    kind, name = given[0]
    if kind not in KINDS:
        raise CertError(f"certificate kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not name:
        raise CertError(f"name the {kind}: schedd certs issue --dir DIR {kind} NAME")
    return kind, name


def cmd_certs(args: argparse.Namespace) -> int:
    """`schedd certs init|issue`: a deployment's CA and certificates (schedd.security.certs)."""
    from schedd.security import certs
    directory = Path(args.dir)
    try:
        if args.certs_cmd == "init":
            dep = certs.create_deployment(directory, nodes=_node_hosts(_names(args.nodes), args.hosts),
                                          workers=_names(args.workers), admins=_names(args.admins),
                                          users=_names(args.users), overwrite=args.force)
            written = [dep.ca, *dep.leaves.values()]
        else:
            kind, name = _issue_target(args)
            hosts = (_node_hosts([name], args.hosts)[0].hosts if kind == "node"
                     else [h for item in args.hosts for h in _names(item)])   # refused by issue()
            written = [certs.issue(certs.load_ca(directory), directory, kind, name, hosts=hosts,
                                   days=args.days, overwrite=args.force)]
    except (certs.CertError, FileExistsError, OSError, ValueError) as e:
        print(f"schedd certs: {e}", file=sys.stderr)
        return 1
    for files in written:
        print(f"{files.cert}\n{files.key}")
    if args.certs_cmd == "init":
        print(f"schedd certs: move {certs.ca_paths(directory).key} offline once every certificate "
              "is issued (`schedd certs issue` needs it back)", file=sys.stderr)
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    """`schedd health --config FILE`: one grpc.health.v1 Check of this node, as a container
    HEALTHCHECK or a systemd/cron probe runs it. It dials the config's grpc_address (or
    --address) secured with the node's own certificate and CA, as the node dials its peers,
    so the probe needs no credential of its own. Exit 0 when the service is SERVING, else 1."""
    try:
        cfg = config_mod.load(args.config)
    except config_mod.ConfigError as e:
        print(f"schedd health: config error: {e}", file=sys.stderr)
        return 2
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from schedd_client.channels import Security, SecurityError, open_channel
    tls = cfg.tls
    security = (Security() if not tls.enabled else
                Security(tls=True, ca=tls.client_ca, cert=tls.cert if tls.client_ca else None,
                         key=tls.key if tls.client_ca else None))
    address = args.address or cfg.grpc_address
    try:
        with open_channel(address, security) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout).status
    except (grpc.RpcError, SecurityError) as e:
        detail = e.details() if isinstance(e, grpc.RpcError) else str(e)
        print(f"schedd health: {address} ({args.service or 'server'}): {detail}", file=sys.stderr)
        return 1
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    print(f"{address} {args.service or 'server'}: {name}")
    return 0 if status == health_pb2.HealthCheckResponse.SERVING else 1


def cmd_local(args: argparse.Namespace) -> int:
    from schedd.runtime.local import run_local
    _setup_logging(args.log_level, "local")
    return run_local(data_dir=args.data_dir, nodes=args.nodes, base_port=args.base_port,
                     demo=not args.no_demo, fsync=args.fsync, shards=args.shards)


class _VersionAction(argparse.Action):
    """`schedd --version`: this build's facts (schedd.versions), read only when asked."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from schedd.versions import build_info
        print(build_info().one_line())        # stdout, like argparse's own version action
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="schedd", description="Raft-replicated job scheduler daemon")
    p.add_argument("--version", action=_VersionAction,
                   help="print the version, protocol, entry codec, feature level, snapshot format, "
                        "tzdata and croniter of this build, and exit")
    p.add_argument("--log-level", default=os.environ.get("SCHEDD_LOG_LEVEL", "info"),
                   choices=["debug", "info", "warning", "error"])
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="run one cluster node")
    s.add_argument("--config", required=True, help="the node's TOML file")
    s.add_argument("--node-id")
    s.add_argument("--data-dir")
    s.add_argument("--grpc-address")
    s.add_argument("--raft-address")
    s.add_argument("--metrics-address")
    s.add_argument("--fsync", choices=config_mod.FSYNC_MODES)
    s.add_argument("--join", metavar="ADDRS", help="gRPC addresses (comma-separated) of a cluster to ask "
                                                   "to add this node; only with an empty data dir")
    s.set_defaults(func=cmd_serve)

    g = sub.add_parser("gen-secret", help="print a new random cluster secret (or write it to a 0600 file)")
    g.add_argument("--out", metavar="FILE", help="write it to FILE (mode 0600; refuses an existing file)")
    g.set_defaults(func=cmd_gen_secret)

    c = sub.add_parser("certs", help="a deployment's CA and node, worker, admin and user certificates")
    csub = c.add_subparsers(dest="certs_cmd", required=True)
    ci = csub.add_parser("init", help="make a CA and certificates in DIR (keys 0600)")
    ci.add_argument("--dir", required=True, help="where to write ca.pem, node-<id>.pem, ...")
    ci.add_argument("--nodes", default="", metavar="ID,...", help="node ids, e.g. n1,n2,n3")
    ci.add_argument("--workers", default="", metavar="NAME,...", help="worker names")
    ci.add_argument("--admins", default="", metavar="NAME,...",
                    help="operator names (schedctl); an admin certificate holds the management policy")
    ci.add_argument("--users", default="", metavar="NAME,...",
                    help="team members (schedctl): no rights of their own, their team's token decides")
    ci.add_argument("--force", action="store_true", help="overwrite existing files")
    ci.set_defaults(func=cmd_certs)
    cs = csub.add_parser("issue", help="issue one more certificate with DIR's CA (rotation: "
                                       "--force, copy, SIGHUP the node)")
    cs.add_argument("--dir", required=True, help="the directory of `schedd certs init`")
    cs.add_argument("kind", nargs="?", metavar="KIND",
                    help="node, worker, admin (the management policy) or user (no rights of its "
                         "own: a team member's way in under mTLS; its token decides)")
    cs.add_argument("name", nargs="?", metavar="NAME")
    who = cs.add_mutually_exclusive_group()
    who.add_argument("--node", metavar="ID")
    who.add_argument("--worker", metavar="NAME")
    who.add_argument("--admin", metavar="NAME")
    who.add_argument("--user", metavar="NAME")
    cs.add_argument("--days", type=int, default=825, help="validity in days (default 825)")
    cs.add_argument("--force", action="store_true", help="overwrite an existing certificate")
    cs.set_defaults(func=cmd_certs)
    for parser in (ci, cs):
        parser.add_argument("--hosts", action="append", default=[], metavar="[ID=]HOST,...",
                            help="names clients dial a node by (DNS names or IPs); ID= for one "
                                 "node, else every node (default localhost,127.0.0.1,::1)")

    h = sub.add_parser("health", help="check this node's gRPC health (exit 0: SERVING); the container HEALTHCHECK")
    h.add_argument("--config", required=True, help="the node's TOML file (address and TLS files)")
    h.add_argument("--service", default="schedd.liveness",
                   help="schedd.liveness (default: the process serves), schedd.writes (a leader and a "
                        "quorum: readiness), or any service name; '' is the server")
    h.add_argument("--address", help="dial this instead of the config's grpc_address")
    h.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")
    h.set_defaults(func=cmd_health)

    loc = sub.add_parser("local", help="a 3-node cluster on 127.0.0.1 with a demo job, in the foreground")
    loc.add_argument("--data-dir", help="keep data here (default: a temporary folder, removed on exit)")
    loc.add_argument("--nodes", type=int, default=3, choices=[1, 3, 5])
    loc.add_argument("--base-port", type=int, default=7070,
                     help="gRPC ports start here, then Raft, then metrics (default 7070: gRPC on "
                          "7070-7072); 0, or busy ports, pick free ports")
    loc.add_argument("--no-demo", action="store_true", help="do not create the demo job")
    loc.add_argument("--fsync", choices=config_mod.FSYNC_MODES, default="always")
    loc.add_argument("--shards", type=int, default=1, choices=range(1, config_mod.MAX_SHARDS + 1), metavar="S",
                     help="shard groups (default 1): the job table split by name over S Raft groups, each "
                          "with its own leader, on every node")
    loc.set_defaults(func=cmd_local)

    from schedd.runtime import restore          # `schedd restore`: seed a node of a new cluster
    restore.add_parser(sub)

    w = sub.add_parser("worker", help="run attempts pushed by the leader (shell, HTTP); the same as "
                                      "`schedd-worker` (the schedd-worker distribution)")
    worker_cli.add_arguments(w)
    w.set_defaults(func=worker_cli.cmd_worker)
    return p


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("SCHEDD_DIE_WITH_PARENT") == "1":
        from schedd.runtime.cluster import die_with_parent
        die_with_parent()
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):      # `schedd` alone: what it can do, not an error
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
