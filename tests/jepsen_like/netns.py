"""Network namespaces for the fault suite: a partition the way an operator's network fails.

Every member (node "n1".., and "w" for the workers) gets its own `ip netns`, joined to one Linux
bridge in the root namespace by a veth pair, with an address in 10.77.<net>.0/24 (the bridge is
.1: the harness and the effect sink reach the members through it). A partition is iptables DROP
inside a member's namespace: connections stay open, packets vanish, and TCP retransmits once the
rules are flushed (unlike the userspace proxies of proxy.py, which close connections).

    both   INPUT -s peer and OUTPUT -d peer dropped, for every peer given
    out    OUTPUT -d peer dropped: the member receives but cannot send (nor acknowledge)
    in     INPUT -s peer dropped: the member sends but hears nothing

Names: every namespace and link starts with PREFIX and carries the owner's pid (hex) and a
per-process counter, so parallel runs never collide, and `cleanup_stale()` removes what a run
whose process is gone left behind (namespaces, bridge; veth ends go with their namespace). A
namespace's iptables rules live and die with it. Needs root, iproute2 and iptables
(`unavailable()` says why not).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import random
import re
import shutil
import subprocess
from dataclasses import dataclass, field

PREFIX = "sjl"
SUBNET_LOCK = "/tmp/schedd-netns-subnet.lock"    # held while a run picks its 10.77.x.0/24
_counter = itertools.count()
_TAG_RE = re.compile(rf"^{PREFIX}([0-9a-f]{{6}})[0-9a-z]")


class NetnsError(RuntimeError):
    pass


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise NetnsError(f"{' '.join(args)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()}")
    return p


def unavailable() -> str | None:
    """Why namespaces cannot be used here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install -y iproute2 iptables)"
    name = f"{PREFIX}{os.getpid():06x}probe"
    try:
        _run("ip", "netns", "add", name)
        _run("ip", "netns", "exec", name, "iptables", "-w", "-S")
    except (NetnsError, OSError, subprocess.TimeoutExpired) as e:
        return f"cannot create a network namespace with iptables here: {e}"
    finally:
        _run("ip", "netns", "del", name, check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(name: str) -> int | None:
    m = _TAG_RE.match(name)
    return int(m.group(1), 16) if m else None


def cleanup_stale() -> list[str]:
    """Delete namespaces and links of this suite whose owning process is gone (a crashed run)."""
    removed = []
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        pid = _owner(name)
        if pid is not None and not _alive(pid):
            _run("ip", "netns", "del", name, check=False)
            removed.append(name)
    for line in _run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        pid = _owner(name)
        if pid is not None and not _alive(pid):
            _run("ip", "link", "del", name, check=False)
            removed.append(name)
    return removed


def _used_nets() -> set[int]:
    out = _run("ip", "-4", "-o", "addr", "show", check=False).stdout
    return {int(m) for m in re.findall(r"inet 10\.77\.(\d+)\.", out)}


@dataclass
class NetnsNet:
    """One bridge and one namespace per member; close() deletes all of it."""

    members: list[str]
    tag: str = ""
    net: int = 0
    blocked: dict[str, list[tuple[str, str]]] = field(default_factory=dict)   # member -> (how, peer)
    _made: list[tuple[str, str]] = field(default_factory=list)               # ("netns"|"link", name)

    def __post_init__(self) -> None:
        cleanup_stale()
        self.tag = f"{PREFIX}{os.getpid():06x}" + "0123456789abcdefghijklmnopqrstuvwxyz"[next(_counter) % 36]
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ layout

    @property
    def bridge(self) -> str:
        return f"{self.tag}b"

    @property
    def host(self) -> str:
        """The bridge's address in the root namespace (the harness, the sink)."""
        return f"10.77.{self.net}.1"

    def ns(self, member: str) -> str:
        return f"{self.tag}-{member}"

    def addr(self, member: str) -> str:
        return f"10.77.{self.net}.{10 + self.members.index(member)}"

    def exec_prefix(self, member: str) -> list[str]:
        """Prepended to a command line: `ip netns exec` execs it, so its pid is the command's."""
        return ["ip", "netns", "exec", self.ns(member)]

    def _build(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self._made.append(("link", self.bridge))
        with open(SUBNET_LOCK, "a") as lock:    # parallel test workers: one picks at a time
            fcntl.flock(lock, fcntl.LOCK_EX)
            for _ in range(20):                 # a /24 no interface on this machine uses yet
                net = random.SystemRandom().randrange(1, 255)
                if net in _used_nets():
                    continue
                self.net = net
                _run("ip", "addr", "add", f"{self.host}/24", "dev", self.bridge)
                break
            else:
                raise NetnsError("no free 10.77.x.0/24 subnet")
        _run("ip", "link", "set", self.bridge, "up")
        for i, m in enumerate(self.members):
            ns, host_end, ns_end = self.ns(m), f"{self.tag}h{i}", f"{self.tag}p{i}"
            _run("ip", "netns", "add", ns)
            self._made.append(("netns", ns))
            _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            self._made.append(("link", host_end))
            _run("ip", "link", "set", ns_end, "netns", ns)
            _run("ip", "link", "set", host_end, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.addr(m)}/24", "dev", ns_end)
            _run("ip", "-n", ns, "link", "set", ns_end, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        if len([n for n in _used_nets() if n == self.net]) > 1:       # raced with another run
            raise NetnsError(f"subnet 10.77.{self.net}.0/24 taken meanwhile")

    # ------------------------------------------------------------ faults

    def _iptables(self, member: str, *rule: str) -> None:
        _run("ip", "netns", "exec", self.ns(member), "iptables", "-w", *rule)

    def block(self, member: str, peers: list[str], how: str = "both") -> None:
        """Drop `member`'s packets to/from each peer inside its own namespace (see the module)."""
        if how not in ("both", "in", "out"):
            raise ValueError(f"bad direction {how!r}")
        for peer in peers:
            ip = self.addr(peer)
            if how in ("both", "in"):
                self._iptables(member, "-I", "INPUT", "-s", ip, "-j", "DROP")
            if how in ("both", "out"):
                self._iptables(member, "-I", "OUTPUT", "-d", ip, "-j", "DROP")
            self.blocked.setdefault(member, []).append((how, peer))

    def heal(self, member: str | None = None) -> None:
        """Flush the rules of `member` (default: of every member that has any)."""
        for m in [member] if member else list(self.blocked):
            self._iptables(m, "-F")
            self.blocked.pop(m, None)

    def rules(self, member: str) -> str:
        return _run("ip", "netns", "exec", self.ns(member), "iptables", "-w", "-S").stdout

    # ------------------------------------------------------------ teardown

    def close(self) -> None:
        """Delete every namespace and link made (their rules and veth ends go with them). Stop
        the processes running inside first: a namespace outlives its name while a process uses it."""
        for kind, name in reversed(self._made):
            if kind == "netns":
                _run("ip", "netns", "del", name, check=False)
        for kind, name in reversed(self._made):
            if kind == "link":
                _run("ip", "link", "del", name, check=False)
        self._made.clear()
        self.blocked.clear()

    def leftovers(self) -> list[str]:
        """Names of this net still present (empty after close)."""
        ns = [ln.split()[0] for ln in _run("ip", "netns", "list", check=False).stdout.splitlines() if ln.strip()]
        links = [ln.split(":")[1].strip().split("@")[0] for ln in
                 _run("ip", "-o", "link", "show", check=False).stdout.splitlines() if ":" in ln]
        return [n for n in ns + links if n.startswith(self.tag)]
