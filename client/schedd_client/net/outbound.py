"""HTTP connections that obey a `NetPolicy` (schedd_client.net.policy): the one way the leader (SLA
webhooks) and the workers (HTTP jobs, http sensors) open a connection to a URL a user gave.

`checked_connection(policy, url, ...)` resolves the URL's host ONCE, asks the policy about every
address it got, and makes the http.client connection dial an address that was allowed (the
first, in resolver order), never the name again: what was checked is what is connected to, so
a DNS answer that changes between check and connect (rebinding) changes nothing. TLS still
verifies the certificate against the host name (SNI and the Host header keep the name).

No redirect is ever followed here (http.client does not follow them): a caller that got a 3xx
reports it. A refused target raises `Refused` (an OSError, so callers that report connection
errors report it too) whose message names the address and the rule.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.parse
from collections.abc import Callable

from schedd_client.net.policy import NetPolicy

__all__ = ["Refused", "checked_connection", "resolve_allowed", "request_path"]

Resolver = Callable[..., list]


class Refused(ConnectionRefusedError):
    """The outbound policy refuses every address the host resolved to."""


def resolve_allowed(policy: NetPolicy, host: str, port: int,
                    resolver: Resolver = socket.getaddrinfo) -> tuple[int, tuple]:
    """(family, sockaddr) of the first address of `host` the policy allows; raises Refused
    (naming the first refused address and its rule) when there is none."""
    infos = resolver(host, port, 0, socket.SOCK_STREAM)
    first_no = ""
    for family, _type, _proto, _name, sockaddr in infos:
        d = policy.decide(host, sockaddr[0])
        if d.allowed:
            return family, sockaddr
        first_no = first_no or f"{sockaddr[0]} ({d.reason})"
    raise Refused(f"the outbound network policy refuses {host}: {first_no or 'no address'}")


def _connector(policy: NetPolicy, host: str, port: int, resolver: Resolver) -> Callable:
    def create_connection(_address, timeout=socket._GLOBAL_DEFAULT_TIMEOUT, source_address=None):
        family, sockaddr = resolve_allowed(policy, host, port, resolver)
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:
                sock.settimeout(timeout)
            sock.connect(sockaddr)
        except BaseException:
            sock.close()
            raise
        return sock
    return create_connection


def checked_connection(policy: NetPolicy, url: str, *, timeout: float | None,
                       verify: bool = True,
                       resolver: Resolver = socket.getaddrinfo) -> http.client.HTTPConnection:
    """An unconnected http.client connection for `url` whose connect() dials only an address the
    policy allows. Raises ValueError for a URL that is not http(s)://host."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("unsupported url (http:// or https:// with a host only)")
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if parts.scheme == "https":
        ctx = ssl.create_default_context()
        if not verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=ctx)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn._create_connection = _connector(policy, host, port, resolver)  # type: ignore[attr-defined]
    return conn


def request_path(url: str) -> str:
    """The path and query of `url` for the request line ("/" when empty)."""
    parts = urllib.parse.urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
