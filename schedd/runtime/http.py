"""The node's HTTP port (`metrics_address`): /metrics (Prometheus) and the web dashboard.

One aiohttp server on the event loop replaces prometheus_client's thread. It speaks HTTPS with
the node's certificate whenever [tls] is set (the same files as the gRPC port, re-read on
SIGHUP); plaintext HTTP is allowed only on a loopback bind, because the dashboard takes tokens
and a scrape tells a lot about the cluster. Browsers are not asked for client certificates: a
dashboard user logs in with a token, and a scraper needs none.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from schedd.dashboard import app as dashboard
from schedd.dashboard.backend import Api
from schedd.dashboard.live import STREAMS, Streams
from schedd.dashboard.login_codes import LoginCodes
from schedd.security.startup import is_loopback_bind
from schedd.settings import TlsSettings

log = logging.getLogger("schedd.http")


class HttpRefused(ValueError):
    """The HTTP port may not serve as configured (the message names the key and the fix)."""


def refusal(address: str, tls: TlsSettings) -> str | None:
    """Why `metrics_address` may not be served (None: it may): plaintext off loopback."""
    if tls.enabled or is_loopback_bind(address):
        return None
    return (f"refusing to serve the dashboard and /metrics over plain HTTP on metrics_address = {address!r}, "
            "which is not a loopback address: set [tls] cert and key (the port then speaks HTTPS), "
            "or bind 127.0.0.1 / [::1]")


SOCKET_NAME = "dashboard.sock"
MAX_SOCKET_PATH = 100                 # sun_path holds 108 bytes
DASHBOARD_SOURCE = "dashboard"        # the audit records' source of the dashboard's calls


def local_socket(data_dir: Path) -> Path | None:
    """The unix socket the dashboard dials this node's gRPC API on, in the private data dir
    (0700: only the node's user can connect). None when the path is too long for a socket:
    the dashboard then dials the gRPC address (which, with TLS and no client_ca, must be a
    certificate the system roots trust)."""
    path = Path(data_dir) / SOCKET_NAME
    return path if len(str(path)) <= MAX_SOCKET_PATH else None


def self_address(grpc_address: str) -> str:
    """Where this node dials its own gRPC port: a wildcard bind is dialled on loopback."""
    host, _, port = grpc_address.rpartition(":")
    return f"127.0.0.1:{port}" if host in ("0.0.0.0", "[::]", "") else grpc_address


def unix_channel(address: str) -> grpc.aio.Channel:
    """A plaintext channel over the node's private unix socket: the token is the credential."""
    return grpc.aio.insecure_channel(address)


@dataclass(slots=True)
class HttpServer:
    """The running HTTP port; `url` is the dashboard's address as a browser would type it."""

    runner: web.AppRunner
    api: Api
    tls: TlsSettings
    context: ssl.SSLContext | None
    url: str
    _closed: bool = field(default=False)

    def reload(self) -> None:
        """SIGHUP: new handshakes use the re-read certificate (open connections keep theirs)."""
        if self.context is None or self.tls.cert is None or self.tls.key is None:
            return
        try:
            self.context.load_cert_chain(str(self.tls.cert), str(self.tls.key))
            log.info("TLS: the HTTP port serves the re-read certificate")
        except (OSError, ssl.SSLError) as e:
            log.warning("SIGHUP: the HTTP port keeps its certificate: %s", e)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.runner.cleanup()
            await self.api.close()


class _LiveStreams:
    """The dashboard's open live streams (page events, run logs), at scrape time."""

    def __init__(self, streams: Streams) -> None:
        self._streams = streams

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("schedd_dashboard_live_streams", "Server-sent event streams the dashboard holds open "
                              "(each holds a watch or a log stream of the API)")
        g.add_metric([], self._streams.count())
        yield g


def server_context(tls: TlsSettings) -> ssl.SSLContext | None:
    if not tls.enabled or tls.cert is None or tls.key is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(tls.cert), str(tls.key))
    return ctx


def advertised_url(url: str, address: str, grpc_address: str) -> str:
    """The dashboard's address for a link given to someone elsewhere: a wildcard bind
    (0.0.0.0:9101) is reached at the host the node's gRPC address names (what clients and peers
    dial), when that one is not a wildcard too; else `url` as served."""
    host = address.rpartition(":")[0].strip("[]")
    grpc_host = grpc_address.rpartition(":")[0]
    if host not in ("", "0.0.0.0", "::") or grpc_host.strip("[]") in ("", "0.0.0.0", "::"):
        return url
    scheme = url.partition("://")[0]
    return f"{scheme}://{grpc_host}:{address.rpartition(':')[2]}/"


async def start(address: str, tls: TlsSettings, registry: CollectorRegistry, api_address: str,
                channel_factory: Callable[[str], grpc.aio.Channel], *, codes: LoginCodes | None = None,
                grpc_address: str = "") -> HttpServer:
    """Bind `address` and serve /metrics and the dashboard, whose calls go to `api_address` (the
    node's unix socket, or its gRPC address) through `channel_factory`; raises HttpRefused or
    OSError. `codes`: the one-time login codes the node's API mints (their `url` is set here,
    once the port serves: `advertised_url`)."""
    why = refusal(address, tls)
    if why:
        raise HttpRefused(why)
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]")
    context = server_context(tls)
    api = Api(api_address, channel_factory)
    app = dashboard.build(api, secure=context is not None, port=int(port_text), codes=codes)
    registry.register(_LiveStreams(app[STREAMS]))

    async def metrics(request: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, registry)   # collect holds the node lock briefly
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host or None, int(port_text), ssl_context=context, reuse_address=True)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    scheme = "https" if context is not None else "http"
    shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else (f"[{host}]" if ":" in host else host)
    url = f"{scheme}://{shown}:{port_text}/"
    if codes is not None:
        codes.url = advertised_url(url, address, grpc_address)
    return HttpServer(runner, api, tls, context, url)

