"""A cluster of `schedd serve` processes on 127.0.0.1: used by `schedd local`, the integration
and fault tests, and the benchmarks, so there is one way to lay out configs, start, stop, kill
and restart nodes.

Every process is started here and stopped by its process id; ports are free ports picked at
start; each child gets PR_SET_PDEATHSIG so it dies with its parent even after a SIGKILL.
"""

from __future__ import annotations

import base64
import ctypes
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import grpc

from schedd.core.commands import FEATURES
from schedd.settings import Limits
from schedd.security import certs
from schedd_client.channels import Security, open_channel
from schedd_proto import acl_pb2, acl_pb2_grpc
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc

PR_SET_PDEATHSIG = 1
ADMIN_TOKEN_FILE = "admin.token"       # the management token, 0600 in the cluster's root
WORKER_TOKEN_FILE = "worker.token"     # the harness's worker token, likewise
WORKER_POLICY = "harness-worker"


def _read_secret(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


def _write_secret(path: Path, secret: str) -> None:
    certs.write_atomic(path, (secret + "\n").encode(), certs.KEY_MODE, overwrite=True)


def _private_dir(path: Path) -> None:
    """Make `path` (and its parents) and leave it 0700 whatever the umask: a cluster's root holds
    the CA key, the cluster secret and the tokens, and its logs name what the nodes did."""
    path.mkdir(mode=certs.DIR_MODE, parents=True, exist_ok=True)
    path.chmod(certs.DIR_MODE)


def _open_log(path: Path) -> BinaryIO:
    """A process's log, opened for appending and kept 0600 (one found with a looser mode too)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, certs.KEY_MODE)
    os.fchmod(fd, certs.KEY_MODE)
    return os.fdopen(fd, "ab")


PORT_BAND_ENV = "SCHEDD_PORT_BAND"     # "LO-HI": where local clusters pick their ports


def port_band(n: int) -> tuple[int, int]:
    """Where `restartable_ports` picks a base: $SCHEDD_PORT_BAND ("LO-HI", inclusive) when set,
    so parallel runs (pytest-xdist workers, several `schedd local`s) can be kept apart; else the
    12,000 ports below the kernel's ephemeral range."""
    if spec := os.environ.get(PORT_BAND_ENV, "").strip():
        try:
            lo_s, hi_s = spec.split("-")
            lo, hi = int(lo_s), int(hi_s) - n + 1
        except ValueError:
            raise ValueError(f"{PORT_BAND_ENV}={spec!r}: expected LO-HI, e.g. 20000-25999") from None
        if not 1024 < lo < hi <= 65536 - n:
            raise ValueError(f"{PORT_BAND_ENV}={spec!r}: needs 1024 < LO and room for {n} ports below HI")
        return lo, hi
    try:
        eph = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        eph = 32768
    return max(1025, eph - 12000), eph - n


def restartable_ports(n: int) -> int:
    """A base for n consecutive free ports BELOW the kernel's ephemeral range: a node killed and
    restarted must get its ports back, and a port of the ephemeral range can meanwhile become the
    source port of any outgoing connection on this machine (seen in the fault suite: a
    restarted node failed to bind its gRPC port)."""
    lo, hi = port_band(n)
    rng = random.SystemRandom()
    for _ in range(200):
        base = rng.randrange(lo, hi)
        if ports_free(list(range(base, base + n))):
            return base
    raise RuntimeError(f"no {n} free consecutive ports in {lo}-{hi + n - 1}")


def ports_free(ports: list[int]) -> bool:
    """Whether a node could bind each port now. Test-bound with SO_REUSEADDR, as the nodes'
    servers bind (gRPC, pysyncobj, aiohttp): a port in TIME_WAIT after a quick stop is free to
    them, and counting it taken sent a restarted `schedd local` to other ports for a minute."""
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def die_with_parent() -> None:
    """Ask the kernel to SIGTERM this process when its parent dies (Linux), so a SIGKILLed test
    or `schedd local` leaves no node behind. Called by the child itself at start (see
    DIE_WITH_PARENT): no Python may run between fork and exec in a process that uses gRPC, so
    there is no preexec_fn."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        return
    if os.getppid() == 1:
        os._exit(1)


DIE_WITH_PARENT = "SCHEDD_DIE_WITH_PARENT"


@dataclass
class NodeProc:
    id: str
    raft: str
    grpc: str
    metrics: str
    config: Path
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> subprocess.Popen | None:
        """The process while it runs (None: never started, or exited)."""
        return self.proc if self.proc is not None and self.proc.poll() is None else None

    def alive(self) -> bool:
        return self.running() is not None


@dataclass
class LocalCluster:
    root: Path
    size: int = 3
    base_port: int = 0
    fsync: str = "always"
    raft: dict = field(default_factory=dict)
    scheduler: dict = field(default_factory=dict)
    limits: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)      # the nodes' [metrics] table
    env: dict = field(default_factory=dict)
    log_level: str = "info"
    # Outbound policy exceptions (schedd_client.net.policy): a test whose webhooks or HTTP jobs go to its
    # own 127.0.0.1 server opts in here, e.g. ("127.0.0.1",); the defaults refuse loopback.
    webhook_allow: tuple[str, ...] = ()
    worker_http_allow: tuple[str, ...] = ()
    test_mode: bool = False          # writes test_mode = true (failpoints, clock admin; with SCHEDD_TEST_MODE=1)
    shards: int = 1                  # shard groups (`shards = S`): node i's Raft ports are a block of S
    # (the shared port uses the block's first; "per_group" uses all S, as a cluster made before it)
    raft_ports: str = ""             # `raft_ports` written when set ("": the nodes' default, shared)
    # Access control ([acl] enabled): on, as in production; a test that needs it off says so
    # (acl=False writes `enabled = false`). `acl_settings` adds other [acl] keys (rate limits).
    # With it on, wait_leader() bootstraps (the management token, kept in root/admin.token so a
    # harness rebuilt on the same root reuses it) and start_worker() gives each worker the
    # harness's worker token (worker_token()).
    acl: bool = True
    acl_settings: dict = field(default_factory=dict)
    admin_token: str = ""            # set by bootstrap(): the harness's own calls use it
    harness_worker_token: str = ""   # set by worker_token()
    # Test harnesses: a node's host (default 127.0.0.1; e.g. its network namespace's address),
    # and a command prefix per process ("n1", "worker:w1") that execs the rest of the command
    # line, so the started pid is still the daemon's (`ip netns exec NS`, `nsenter -t PID -m --`).
    hosts: dict[str, str] = field(default_factory=dict)
    wrap: dict[str, list[str]] = field(default_factory=dict)
    # TLS: a deployment (schedd.security.certs) in root/tls, every node serving with its
    # certificate and requiring client certificates when `mtls`; workers, `channel()` and
    # `client()` connect with their own. On by default, as in production; a test that needs
    # plaintext says so (tls=False: `[tls] insecure = true`, loopback only).
    tls: bool = True
    mtls: bool = True
    nodes: dict[str, NodeProc] = field(default_factory=dict)
    workers: dict[str, NodeProc] = field(default_factory=dict)
    last_seen: dict = field(default_factory=dict)     # what leader() saw last, for error messages

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        _private_dir(self.root)
        _private_dir(self.root / "logs")
        secret_file = self.root / "cluster.secret"
        if not secret_file.exists():
            _write_secret(secret_file, base64.b64encode(secrets.token_bytes(32)).decode())
        n, s = self.size, self.shards
        base = self.base_port or restartable_ports(self.ports_needed(n, s))
        for i in range(n):
            nid = f"n{i + 1}"
            host = self.hosts.get(nid, "127.0.0.1")
            # One shard: gRPC ports, then Raft, then metrics. S shards: gRPC, metrics, then a block
            # of S Raft ports per node: its first is the node's one Raft port (and, with
            # raft_ports = "per_group", shard k's is the node's Raft port + k on every node).
            raft = base + n + i if s == 1 else base + 2 * n + i * s
            metrics = base + 2 * n + i if s == 1 else base + n + i
            self.nodes[nid] = NodeProc(
                id=nid, grpc=f"{host}:{base + i}", raft=f"{host}:{raft}",
                metrics=f"{host}:{metrics}", config=self.root / f"{nid}.toml",
                log=self.root / "logs" / f"{nid}.log")
        if self.tls:
            self._make_deployment()
        self.admin_token = self.admin_token or _read_secret(self.root / ADMIN_TOKEN_FILE)
        self.harness_worker_token = self.harness_worker_token or _read_secret(self.root / WORKER_TOKEN_FILE)
        for node in self.nodes.values():
            self._write_config(node)

    @staticmethod
    def ports_needed(nodes: int, shards: int = 1) -> int:
        """Consecutive ports a cluster of `nodes` nodes and `shards` shards uses from its base."""
        return nodes * (2 + shards)

    @property
    def tls_dir(self) -> Path:
        return self.root / "tls"

    def _make_deployment(self) -> None:
        if certs.ca_paths(self.tls_dir).cert.exists():
            return                                          # a restarted harness keeps its CA
        specs = [certs.NodeSpec(n.id, tuple(dict.fromkeys([n.grpc.rpartition(":")[0],
                                                           *certs.LOCAL_HOSTS])))
                 for n in self.nodes.values()]
        certs.create_deployment(self.tls_dir, nodes=specs, admins=["admin"])

    def leaf(self, kind: str, name: str) -> certs.Issued:
        """The certificate files of `kind/name` in this cluster's deployment (issued on first use)."""
        paths = certs.leaf_paths(self.tls_dir, kind, name)
        if not paths.cert.exists():
            certs.issue(certs.load_ca(self.tls_dir), self.tls_dir, kind, name)
        return certs.Issued(cert=paths.cert, key=paths.key)

    def security(self, kind: str = "admin", name: str = "admin", token: str | None = None) -> Security:
        """How a client of this cluster connects (plaintext when TLS is off): `kind/name`'s
        certificate, and `token` (for the admin: the management token once bootstrapped)."""
        if token is None and kind == "admin":
            token = self.admin_token or None
        if not self.tls:
            return Security(token=token)
        if not self.mtls:
            return Security(ca=certs.ca_paths(self.tls_dir).cert, token=token)
        leaf = self.leaf(kind, name)
        return Security(ca=certs.ca_paths(self.tls_dir).cert, cert=leaf.cert, key=leaf.key, token=token)

    def write_context(self, path: Path | None = None, *, kind: str = "admin", name: str = "admin",
                      token: str | None = None) -> Path:
        """A context file (schedd_client.context) for `kind/name` of this cluster: what
        SCHEDD_CONTEXT points schedctl, the SDK and schedd-worker at."""
        path = Path(path) if path is not None else self.root / f"context-{kind}-{name}.toml"
        sec = self.security(kind, name, token)
        token = sec.token
        lines = [f"cluster = {_toml(self.grpc_addresses)}"]
        lines += [f"{k} = {_toml(str(v))}" for k, v in (("ca", sec.ca), ("cert", sec.cert),
                                                         ("key", sec.key)) if v is not None]
        if token is not None:
            lines.append(f"token = {_toml(token)}")
        first = next(iter(self.nodes), None)
        if first is not None and self.nodes[first].metrics:
            lines.append(f"dashboard = {_toml(self.http_url(first))}")
        certs.write_atomic(path, ("\n".join(lines) + "\n").encode(), certs.KEY_MODE, overwrite=True)
        return path

    def http_url(self, nid: str, path: str = "/") -> str:
        """Node `nid`'s HTTP port (the dashboard, /metrics): HTTPS with TLS, as the node serves it."""
        return f"{'https' if self.tls else 'http'}://{self.nodes[nid].metrics}{path}"

    @property
    def metrics_ca(self) -> str | None:
        """The CA a client of the nodes' HTTP ports trusts (None: plain HTTP, a cluster without TLS)."""
        return str(certs.ca_paths(self.tls_dir).cert) if self.tls else None

    def http_get(self, nid: str, path: str, timeout: float = 5.0) -> str:
        """GET `path` from node `nid`'s HTTP port, trusting this cluster's CA; the body as text."""
        import ssl
        import urllib.request
        context = ssl.create_default_context(cafile=str(certs.ca_paths(self.tls_dir).cert)) if self.tls else None
        with urllib.request.urlopen(self.http_url(nid, path), timeout=timeout, context=context) as r:
            return r.read().decode()

    def channel(self, nid: str) -> grpc.Channel:
        """A blocking channel to node `nid`, secured like an admin's."""
        return open_channel(self.nodes[nid].grpc, self.security())

    def client(self, **kw):
        """An SDK Client of this cluster, secured like an admin's (keywords go to Client)."""
        from schedd_client import Client
        return Client(self.cluster_arg, security=kw.pop("security", None) or self.security(), **kw)

    def _tls_lines(self, node: NodeProc) -> list[str]:
        if not self.tls:
            return ["\n[tls]", "insecure = true"]
        leaf = certs.leaf_paths(self.tls_dir, "node", node.id)
        lines = ["\n[tls]", f'cert = "{leaf.cert}"', f'key = "{leaf.key}"']
        if self.mtls:
            lines.append(f'client_ca = "{certs.ca_paths(self.tls_dir).cert}"')
        return lines

    # ------------------------------------------------------------ layout

    def _write_config(self, node: NodeProc, join: list[str] | None = None) -> None:
        """`join`: a node added at run time: no peers, `join = [...]` (schedd.runtime.join)."""
        lines = [
            f'node_id = "{node.id}"',
            f'data_dir = "{self.root / node.id}"',
            f'raft_address = "{node.raft}"',
            f'grpc_address = "{node.grpc}"',
            f'metrics_address = "{node.metrics}"',
            f'secret_file = "{self.root / "cluster.secret"}"',
            f'fsync = "{self.fsync}"',
        ] + (["test_mode = true"] if self.test_mode else []) + ([f"shards = {self.shards}"] if self.shards > 1 else []) \
            + ([f'raft_ports = "{self.raft_ports}"'] if self.raft_ports else [])
        webhooks = {"allow": list(self.webhook_allow)} if self.webhook_allow else {}
        acl = {"enabled": self.acl, **self.acl_settings}
        for section, values in (("raft", self.raft), ("scheduler", self.scheduler),
                                ("webhooks", webhooks), ("limits", self.limits), ("acl", acl),
                                ("metrics", self.metrics)):
            if values:
                lines.append(f"\n[{section}]")
                lines += [f"{k} = {_toml(v)}" for k, v in values.items()]
        if join is not None:
            lines.insert(1, f"join = {_toml(join)}")
        lines += self._tls_lines(node)
        for peer in self.nodes.values() if join is None else ():
            if peer.id != node.id:
                lines += ["\n[[peers]]", f'id = "{peer.id}"', f'raft_address = "{peer.raft}"',
                          f'grpc_address = "{peer.grpc}"']
        certs.write_atomic(node.config, ("\n".join(lines) + "\n").encode(), certs.KEY_MODE, overwrite=True)

    @property
    def grpc_addresses(self) -> list[str]:
        return [n.grpc for n in self.nodes.values()]

    @property
    def cluster_arg(self) -> str:
        return ",".join(self.grpc_addresses)

    # ------------------------------------------------------------ processes

    def start(self) -> None:
        for nid in self.nodes:
            self.start_node(nid)

    def start_node(self, nid: str) -> NodeProc:
        node = self.nodes[nid]
        if node.alive():
            return node
        env = {**os.environ, **self.env, DIE_WITH_PARENT: "1"}
        with _open_log(node.log) as logf:
            node.proc = subprocess.Popen(
                [*self.wrap.get(nid, ()), sys.executable, "-m", "schedd", "--log-level", self.log_level, "serve",
                 "--config", str(node.config)],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True)
        return node

    def new_node(self, nid: str, *, join: list[str] | None = None) -> NodeProc:
        """Lay out (not start) one more node, `nid`, on fresh ports, whose config asks the
        cluster at `join` (default: every node's gRPC address) to add it (`schedd serve --join`)."""
        base = restartable_ports(2 + self.shards)
        host = self.hosts.get(nid, "127.0.0.1")
        raft, metrics = (base + 1, base + 2) if self.shards == 1 else (base + 2, base + 1)   # S > 1: S Raft ports
        node = self.nodes[nid] = NodeProc(
            id=nid, grpc=f"{host}:{base}", raft=f"{host}:{raft}", metrics=f"{host}:{metrics}",
            config=self.root / f"{nid}.toml", log=self.root / "logs" / f"{nid}.log")
        if self.tls:
            certs.issue(certs.load_ca(self.tls_dir), self.tls_dir, "node", nid,
                        hosts=tuple(dict.fromkeys([host, *certs.LOCAL_HOSTS])), overwrite=True)
        self._write_config(node, join=join if join is not None else
                           [n.grpc for n in self.nodes.values() if n.id != nid])
        return node

    def start_worker(self, name: str, *, slots: int = 4, pool: str = "", drain_grace_s: float = 10.0,
                     extra_env: dict | None = None, extra_args: tuple[str, ...] = (),
                     context: bool = False, token: str | None = None,
                     uid_range: tuple[int, int] | None = None, state_dir: Path | None = None) -> NodeProc:
        """A `schedd worker` process connected to this cluster: by flags, or with `context` by
        a context file of its own (write_context) named in SCHEDD_CONTEXT, and no flags
        (`extra_args`: more flags, e.g. ("--config", path); `token`: its worker token, passed
        in the environment; None: the harness's worker token when ACL is on, "": none).
        `uid_range`, `state_dir`: run each team's jobs as its own uid (`--uid-range`; a worker
        started as root then gets no --allow-root)."""
        w = self.workers.get(name)
        if w is not None and w.alive():
            return w
        if token is None:
            token = self.worker_token() if self.acl else ""
        w = self.workers[name] = NodeProc(id=name, raft="", grpc="", metrics="", config=Path(),
                                          log=self.root / "logs" / f"worker-{name}.log")
        args = [*self.wrap.get(f"worker:{name}", ()), sys.executable, "-m", "schedd", "--log-level",
                self.log_level, "worker", "--name", name, "--slots", str(slots),
                "--drain-grace", str(drain_grace_s)]
        extra_env = dict(extra_env or {})
        if context:
            extra_env["SCHEDD_CONTEXT"] = str(self.write_context(kind="worker", name=name,
                                                                 token=token or None))
        else:
            args += ["--cluster", self.cluster_arg]
        if pool:
            args += ["--pool", pool]
        if self.tls and not context:
            sec = self.security("worker", name)
            args += ["--ca", str(sec.ca)] + (["--cert", str(sec.cert), "--key", str(sec.key)]
                                             if sec.cert is not None else [])
        if "--log-dir" not in extra_args and "--config" not in extra_args and state_dir is None:
            args += ["--log-dir", str(self.root / "worker-logs" / name)]   # its own, in the harness's root
        args += list(extra_args)
        if token:                  # through the environment: never on a command line (ps shows it)
            extra_env = {**(extra_env or {}), "SCHEDD_TOKEN": token}
        if self.worker_http_allow:
            args += ["--http-allow", ",".join(self.worker_http_allow)]
        if uid_range is not None:
            args += ["--uid-range", f"{uid_range[0]}-{uid_range[1]}"]
            args += ["--state-dir", str(state_dir)] if state_dir is not None else []
        elif os.geteuid() == 0:
            # A local cluster runs everything as whoever started it (the suite runs as root in
            # some containers); a deployed worker must not (see `schedd worker --allow-root`).
            args.append("--allow-root")
        env = {**os.environ, "GRPC_ENABLE_FORK_SUPPORT": "false", **self.env, **(extra_env or {}),
               DIE_WITH_PARENT: "1"}
        with _open_log(w.log) as logf:
            w.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=env, start_new_session=True)
        return w

    def signal_worker(self, name: str, sig: int) -> None:
        proc = self.workers[name].running()
        if proc is not None:
            os.kill(proc.pid, sig)

    def signal_node(self, nid: str, sig: int) -> None:
        proc = self.nodes[nid].running()
        if proc is not None:
            os.kill(proc.pid, sig)

    def kill_node(self, nid: str) -> None:
        """SIGKILL and reap."""
        proc = self.nodes[nid].running()
        if proc is not None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def stop_node(self, nid: str, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`."""
        proc = self.nodes[nid].running()
        if proc is None:
            return
        try:
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def stop(self, timeout: float = 15.0) -> None:
        for w in self.workers.values():
            if (proc := w.running()) is not None:
                os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        for node in self.nodes.values():
            if (proc := node.running()) is not None:
                os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for nid, node in self.nodes.items():
            if node.proc is None:
                continue
            try:
                node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill_node(nid)

    # ------------------------------------------------------------ access control

    def bootstrap(self, timeout: float = 60.0) -> str:
        """`acl bootstrap` once the cluster has a leader: the management token (kept for the
        harness's own status calls and in root/admin.token, and returned; a cluster bootstrapped
        already returns the token it got)."""
        if self.admin_token:
            return self.admin_token
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for node in self.nodes.values():
                if not node.alive():
                    continue
                with self.channel(node.id) as ch:
                    try:
                        out = acl_pb2_grpc.AclStub(ch).Bootstrap(acl_pb2.BootstrapRequest(), timeout=5.0)
                    except grpc.RpcError as e:
                        last = f"{e.code().name}: {e.details()}"
                        continue
                self.admin_token = out.secret
                _write_secret(self.root / ADMIN_TOKEN_FILE, out.secret)
                self._token_known(deadline)
                return out.secret
            time.sleep(0.2)
        raise TimeoutError(f"ACL bootstrap did not succeed within {timeout:g}s (last: {last})")

    def _token_known(self, deadline: float) -> None:
        """Until every running node accepts the new management token (a follower learns it when
        it applies the bootstrap; on a loaded machine that can take longer than it waits), so the
        harness's first call through any node is not refused as an invalid token."""
        while time.monotonic() < deadline:
            if all(self.status(n) is not None for n, node in self.nodes.items() if node.alive()):
                return
            time.sleep(0.1)

    def worker_token(self, max_slots: int | None = None) -> str:
        """The harness's worker token (created once, kept 0600 in root/worker.token and reused by
        a harness on the same root): serves every pool and team, with `max_slots` slots (default:
        as many as [limits] max_worker_slots lets one worker claim: the node's limit is the one a
        test exercises, not the token's)."""
        if self.harness_worker_token:
            return self.harness_worker_token
        self.wait_leader()
        if max_slots is None:
            max_slots = int(self.limits.get("max_worker_slots", Limits().max_worker_slots))
        with self.client(timeout=30) as client:
            client.acl_put_policy(WORKER_POLICY, {"pool:*": ["serve"], "team:*": ["serve"]},
                                  description="this cluster's own workers serve every pool and team")
            self.harness_worker_token = client.acl_create_token(
                kind="worker", policies=[WORKER_POLICY], description="this cluster's own workers",
                max_slots=max_slots).secret
        _write_secret(self.root / WORKER_TOKEN_FILE, self.harness_worker_token)
        return self.harness_worker_token

    # ------------------------------------------------------------ observation

    def status(self, nid: str | None = None, timeout: float = 2.0) -> pb.ClusterStatus | None:
        """Cluster status as seen by node `nid` (default: the first that answers)."""
        order = [nid] if nid else [n for n in self.nodes if self.nodes[n].alive()]
        for n in order:
            with self.channel(n) as ch:
                try:
                    return pb_grpc.ClusterStub(ch).Status(pb.ClusterStatusRequest(), timeout=timeout)
                except grpc.RpcError:
                    continue
        return None

    def wait_feature_level(self, level: int | None = None, timeout: float = 30.0) -> int:
        """Until the cluster's feature level is `level` (default: this build's highest): a new
        cluster starts at level 1 and its first leader raises it once every voter reports in, so
        a test of a newer entry kind waits for that as an operator's first command would."""
        want = FEATURES.max_level if level is None else level
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.status()
            if s is not None and s.feature_level >= want:
                return int(s.feature_level)
            time.sleep(0.1)
        raise TimeoutError(f"feature level {want} not reached within {timeout:g}s; logs in {self.root / 'logs'}")

    def node_info(self, nid: str, timeout: float = 2.0, with_digest: bool = False,
                  digest_at: int = 0) -> pb.NodeStatus | None:
        with self.channel(nid) as ch:
            try:
                return pb_grpc.ClusterStub(ch).NodeInfo(
                    pb.NodeInfoRequest(with_digest=with_digest, digest_at=digest_at), timeout=timeout)
            except grpc.RpcError:
                return None

    def leader(self) -> str | None:
        """The id of a node that leads AND has its term's epoch applied (ready to fire)."""
        best = None
        self.last_seen = {}
        for nid, node in self.nodes.items():
            if not node.alive():
                continue
            info = self.node_info(nid, timeout=1.0)
            self.last_seen[nid] = (info.role, info.term, info.leader_epoch) if info else None
            if info is not None and info.role == "leader" and info.leader_epoch == info.term:
                if best is None or info.term > best[1]:
                    best = (nid, info.term)
        return best[0] if best else None

    def wait_leader(self, timeout: float = 60.0, exclude: str | None = None) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [(n, p.proc) for n, p in self.nodes.items() if p.proc is not None and not p.alive()
                    and n != exclude and p.proc.returncode not in (-signal.SIGKILL, -signal.SIGTERM, 0)]
            if dead:
                codes = ", ".join(f"{n} (exit {proc.returncode})" for n, proc in dead)
                raise RuntimeError(f"node(s) {codes} exited: see {self.root / 'logs'}")
            if self.acl and not self.admin_token and not (self.tls and self.mtls):
                # Without an admin certificate even NodeInfo needs the management token.
                self.bootstrap(timeout=max(1.0, deadline - time.monotonic()))
            lead = self.leader()
            if lead is not None and lead != exclude:
                if self.acl and not self.admin_token:
                    self.bootstrap(timeout=max(1.0, deadline - time.monotonic()))
                return lead
            time.sleep(0.1)
        raise TimeoutError(f"no leader within {timeout:g}s (last seen {self.last_seen}); "
                           f"logs in {self.root / 'logs'}")

    def wait_shards(self, timeout: float = 60.0) -> dict[int, str]:
        """Wait until every shard group has a leader (as node n1's replicas see them); shard ->
        its leader's node id."""
        deadline = time.monotonic() + timeout
        seen: dict[int, str] = {}
        while time.monotonic() < deadline:
            try:
                with self.client(timeout=5) as c:
                    seen = {s.shard: s.leader_id for s in c.list_shards().items}
            except Exception:  # noqa: BLE001 - not up yet: ask again
                seen = {}
            if len(seen) == self.shards and all(seen.values()):
                return seen
            time.sleep(0.2)
        raise TimeoutError(f"not every shard has a leader within {timeout:g}s (last seen {seen}); "
                           f"logs in {self.root / 'logs'}")

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
