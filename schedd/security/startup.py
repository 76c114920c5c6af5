"""When a node may serve gRPC in plaintext: a pure rule the daemon checks before it binds.

Why a rule and not a warning: a scheduler runs whatever command a caller submits, so a plaintext
port reachable from the network is remote code execution for anyone on it. Plaintext is allowed
only when BOTH hold: every gRPC bind address is loopback (or a unix socket), and the operator
said so (``[tls] insecure = true``). Anything else without TLS refuses to start, and the message
names the address and the config keys that fix it. No DNS lookups: a host name other than
``localhost`` (RFC 6761: always loopback) may resolve anywhere, so it counts as not loopback.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

FIX_TLS = "set [tls] cert and key (and [tls] client_ca to require client certificates)"


def is_loopback_bind(address: str) -> bool:
    """True for ``127.x.x.x:P``, ``[::1]:P``, ``localhost:P`` and ``unix:...``; False for a
    wildcard (``0.0.0.0``, ``[::]``), any other address or host name, or something unparsable."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return False
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def plaintext_refusal(binds: Mapping[str, str] | Sequence[str], *, tls: bool,
                      insecure: bool) -> str | None:
    """None if the node may start; else why not, in one line for the operator.

    `binds` maps each config key to the address it binds (``{"grpc_address": "0.0.0.0:7070"}``)
    so the message can name the key; a plain list of addresses is labelled "bind address"."""
    named = list(binds.items()) if isinstance(binds, Mapping) else [("bind address", a) for a in binds]
    if tls:
        return None
    exposed = [(k, a) for k, a in named if not is_loopback_bind(a)]
    if exposed:
        key, addr = exposed[0]
        more = f" (and {len(exposed) - 1} more)" if len(exposed) > 1 else ""
        why = ("[tls] insecure = true allows plaintext on loopback addresses only"
               if insecure else "no TLS is configured")
        return (f"refusing to serve plaintext gRPC on {key} = {addr!r}{more}, which is not a "
                f"loopback address: {why}; {FIX_TLS}, or bind 127.0.0.1 / [::1]")
    if not insecure:
        where = ", ".join(f"{k} = {a!r}" for k, a in named) or "no address"
        return (f"refusing to serve plaintext gRPC on {where}: no TLS is configured; {FIX_TLS}, "
                "or, for a loopback-only node, set [tls] insecure = true")
    return None
