"""Which network targets the cluster may send requests to (SLA webhooks from the leader, HTTP
jobs and http sensors from a worker): a pure decision, `NetPolicy.decide(host, ip)`.

A policy is two lists of rules. A rule is an IP network (``10.0.0.0/8``, ``::1/128``), a single
address (``127.0.0.1``), a host name (``hooks.example.com``), a domain suffix (``*.corp``), or
``*`` (everything). The decision, for a host name and ONE address it resolved to:

1. a target matching an ``allow`` rule is allowed (allow rules are the operator's exceptions);
2. else a target matching a ``deny`` rule is refused;
3. else it is allowed.

``deny`` always starts with DEFAULT_DENY (loopback, "this host", link-local, cloud metadata
addresses) unless a policy is built with ``defaults=False``; a configured ``deny`` adds to it. So
``allow = ["127.0.0.1"]`` lets a test reach its own loopback server, and ``deny = ["*"]`` with an
``allow`` list turns the policy into a strict allow-list.

The caller resolves the host once, asks `decide` for each address and connects to an address it
allowed (schedd_client.net.outbound): no second lookup can change the answer (DNS rebinding). A host
name rule trusts DNS for that name: allowing ``hooks.internal`` allows whatever it resolves to.
IPv4-mapped IPv6 addresses (``::ffff:127.0.0.1``) are judged as the IPv4 address they carry.

No I/O here: no resolving, no sockets, no clock.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["NetPolicy", "Rule", "Decision", "PolicyError", "DEFAULT_DENY", "DEFAULT_DENY_RULES", "parse_rule",
           "parse_rules", "make_policy", "split_list"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# What no request from the cluster should reach unless an operator says so. Private networks
# (10/8, 172.16/12, 192.168/16, fc00::/7) are not in it: internal webhooks are common; deny
# them in the config where they hold something to protect.
DEFAULT_DENY: tuple[str, ...] = (
    "127.0.0.0/8",          # loopback: the node's own services (metrics, Raft, gRPC)
    "::1/128",              # loopback (IPv6)
    "0.0.0.0/8",            # "this host": 0.0.0.0 reaches local listeners on Linux
    "::/128",               # the unspecified IPv6 address, same
    "169.254.0.0/16",       # link-local, incl. 169.254.169.254 (AWS, GCP, Azure, OpenStack metadata)
    "fe80::/10",            # link-local (IPv6)
    "fd00:ec2::254/128",    # AWS metadata (IPv6)
    "100.100.100.200/32",   # Alibaba Cloud metadata
    "metadata.google.internal",
)

_HOST_RE = re.compile(r"^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$")


class PolicyError(ValueError):
    """A rule that is neither a network, an address, a host name nor ``*``."""


@dataclass(slots=True, frozen=True)
class Rule:
    text: str                       # as configured, for messages
    network: IPNetwork | None = None
    host: str = ""                  # lower-case name; starts with "." for a "*.suffix" rule
    everything: bool = False

    def matches(self, host: str, ip: IPAddress) -> bool:
        if self.everything:
            return True
        if self.network is not None:
            return ip.version == self.network.version and ip in self.network
        if self.host.startswith("."):
            return host.endswith(self.host)
        return host == self.host


@dataclass(slots=True, frozen=True)
class Decision:
    allowed: bool
    reason: str                     # "denied by 127.0.0.0/8", "allowed by 127.0.0.1", "not denied"


def split_list(text: str) -> list[str]:
    """"a, b,,c" -> ["a", "b", "c"]: the form flags and environment variables use."""
    return [p.strip() for p in text.split(",") if p.strip()]


def _norm_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


def _norm_ip(ip: str | IPAddress) -> IPAddress:
    addr = ip if not isinstance(ip, str) else ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def parse_rule(text: str) -> Rule:
    if not isinstance(text, str) or not text.strip():
        raise PolicyError(f"empty network rule {text!r}")
    t = text.strip()
    if t == "*":
        return Rule(t, everything=True)
    try:
        return Rule(t, network=ipaddress.ip_network(t.strip("[]"), strict=True))
    except ValueError as e:
        if "/" in t or t.replace(".", "").isdigit() or ":" in t:
            raise PolicyError(f"bad network {t!r}: {e}") from None
    host = _norm_host(t)
    if len(host) > 253 or not _HOST_RE.match(host):
        raise PolicyError(f"bad network rule {t!r}: expected a network (10.0.0.0/8), an address, "
                          "a host name, *.domain or *")
    return Rule(t, host=host[1:] if host.startswith("*.") else host)


def parse_rules(items: Iterable[str]) -> tuple[Rule, ...]:
    return tuple(parse_rule(x) for x in items)


DEFAULT_DENY_RULES = parse_rules(DEFAULT_DENY)


@dataclass(slots=True, frozen=True)
class NetPolicy:
    allow: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = DEFAULT_DENY_RULES

    def decide(self, host: str, ip: str | IPAddress) -> Decision:
        """Whether a request to `host` may connect to `ip` (one address `host` resolved to, or
        the literal address of the URL)."""
        h = _norm_host(host)
        try:
            addr = _norm_ip(ip)
        except ValueError:
            return Decision(False, f"{ip!r} is not an IP address")
        for r in self.allow:
            if r.matches(h, addr):
                return Decision(True, f"allowed by {r.text}")
        for r in self.deny:
            if r.matches(h, addr):
                return Decision(False, f"denied by {r.text}")
        return Decision(True, "not denied")

    def describe(self) -> str:
        allow = ",".join(r.text for r in self.allow) or "-"
        return f"allow {allow}; deny {','.join(r.text for r in self.deny) or '-'}"


def make_policy(allow: Iterable[str] = (), deny: Iterable[str] = (), *,
                defaults: bool = True) -> NetPolicy:
    """A policy from configured lists; `deny` adds to DEFAULT_DENY unless defaults=False.
    Raises PolicyError naming the first bad rule."""
    base = DEFAULT_DENY_RULES if defaults else ()
    return NetPolicy(allow=parse_rules(allow), deny=base + parse_rules(deny))
