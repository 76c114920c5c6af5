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
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from schedd.dashboard import app as dashboard
from schedd.dashboard.backend import Api
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


def self_address(grpc_address: str) -> str:
    """Where this node dials its own gRPC port: a wildcard bind is dialled on loopback."""
    host, _, port = grpc_address.rpartition(":")
    return f"127.0.0.1:{port}" if host in ("0.0.0.0", "[::]", "") else grpc_address


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


def server_context(tls: TlsSettings) -> ssl.SSLContext | None:
    if not tls.enabled or tls.cert is None or tls.key is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(tls.cert), str(tls.key))
    return ctx


async def start(address: str, tls: TlsSettings, registry: CollectorRegistry, grpc_address: str,
                channel_factory: Callable[[str], grpc.aio.Channel]) -> HttpServer:
    """Bind `address` and serve /metrics and the dashboard; raises HttpRefused or OSError."""
    why = refusal(address, tls)
    if why:
        raise HttpRefused(why)
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]")
    context = server_context(tls)
    api = Api(self_address(grpc_address), channel_factory)
    app = dashboard.build(api, secure=context is not None, port=int(port_text))

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
    return HttpServer(runner, api, tls, context, f"{scheme}://{shown}:{port_text}/")

