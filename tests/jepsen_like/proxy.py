"""Userspace TCP proxies, one per Raft link, for partitions and delay (no tc netem here).

pysyncobj keeps ONE connection per pair of nodes, opened by the node with the larger address, and
the dialer names itself in its first message. So one proxy per unordered pair sees both
directions: the dialer is told (SCHEDD_RAFT_DIAL) to dial the proxy instead of its peer. A
sharded cluster has one Raft group per shard: on the shared Raft port one proxy per pair carries
every group's connection; with per-group ports (the node's Raft port + k) one proxy per pair
and shard. Every control acts on all of a pair's links at once (a partition cuts a node off in
every group).

A link is `ok`, `cut` (connections closed, new ones accepted and closed at once), stalled in one
direction (bytes held, as a one-way partition: TCP delivers nothing until healed), or delayed
(each chunk forwarded `delay_ms` after it arrived, order kept).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time


class Link:
    def __init__(self, a: str, b: str, target: str, shard: int = 0) -> None:
        self.a, self.b = a, b          # a dials b (node ids); target is b's real raft address
        self.target = target
        self.shard = shard             # the Raft group it carries (0: an unsharded cluster's only one)
        self.port = 0
        self.cut = False
        self.stall = {("a", "b"): False, ("b", "a"): False}
        self.delay_ms = 0
        self.conns: set = set()
        self.bytes = {("a", "b"): 0, ("b", "a"): 0}
        self.refused = 0

    def blocked(self, src: str, dst: str) -> bool:
        return self.cut or self.stall[(self._side(src), self._side(dst))]

    def _side(self, node: str) -> str:
        return "a" if node == self.a else "b"


class ProxyNet:
    """All link proxies of a cluster, served by one asyncio loop in a daemon thread."""

    def __init__(self) -> None:
        self.links: dict[tuple[frozenset, int], Link] = {}     # (pair, shard) -> link
        self.loop = asyncio.new_event_loop()
        self._servers = []
        self._thread = threading.Thread(target=self.loop.run_forever, name="proxynet", daemon=True)
        self._thread.start()

    def call(self, fn, *args):
        fut = asyncio.run_coroutine_threadsafe(self._wrap(fn, *args), self.loop)
        return fut.result(timeout=10)

    @staticmethod
    async def _wrap(fn, *args):
        return fn(*args)

    def add_link(self, a: str, b: str, target: str, shard: int = 0) -> Link:
        link = Link(a, b, target, shard)
        fut = asyncio.run_coroutine_threadsafe(self._serve(link), self.loop)
        link.port = fut.result(timeout=10)
        self.links[(frozenset((a, b)), shard)] = link
        return link

    async def _serve(self, link: Link) -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        server = await asyncio.start_server(lambda r, w: self._handle(link, r, w), sock=sock)
        self._servers.append(server)
        return sock.getsockname()[1]

    async def _handle(self, link: Link, reader, writer) -> None:
        if link.cut:
            link.refused += 1
            writer.close()
            return
        host, port = link.target.rsplit(":", 1)
        try:
            ur, uw = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        pair = (writer, uw)
        link.conns.add(pair)
        t1 = asyncio.ensure_future(self._pump(link, ("a", "b"), reader, uw))
        t2 = asyncio.ensure_future(self._pump(link, ("b", "a"), ur, writer))
        await asyncio.wait({t1, t2}, return_when=asyncio.FIRST_COMPLETED)
        for t in (t1, t2):
            t.cancel()
        link.conns.discard(pair)
        for w in pair:
            try:
                w.close()
            except Exception:  # noqa: BLE001
                pass

    async def _pump(self, link: Link, direction, reader, writer) -> None:
        q: asyncio.Queue = asyncio.Queue()

        async def forward():
            while True:
                due, data = await q.get()
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                while link.stall[direction] and not link.cut:
                    await asyncio.sleep(0.02)
                writer.write(data)
                await writer.drain()

        fwd = asyncio.ensure_future(forward())
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                link.bytes[direction] += len(data)
                q.put_nowait((time.monotonic() + link.delay_ms / 1000, data))
                if fwd.done():
                    return
        except (ConnectionError, OSError):
            return
        finally:
            fwd.cancel()

    # ---------------------------------------------------------------- controls (any thread)

    def _links(self, a: str, b: str) -> list[Link]:
        """Every link between a and b (one per shard group); KeyError if there is none."""
        pair = frozenset((a, b))
        out = [link for (p, _), link in self.links.items() if p == pair]
        if not out:
            raise KeyError(f"no link between {a} and {b}")
        return out

    def cut(self, a: str, b: str) -> None:
        links = self._links(a, b)

        def do():
            for link in links:
                link.cut = True
                for pair in list(link.conns):
                    for w in pair:
                        w.close()
        self.call(do)

    def stall(self, src: str, dst: str, on: bool = True) -> None:
        """Hold every byte from src to dst (a one-way partition) until healed."""
        links = self._links(src, dst)

        def do():
            for link in links:
                link.stall[(link._side(src), link._side(dst))] = on
        self.call(do)

    def delay(self, a: str, b: str, ms: int) -> None:
        links = self._links(a, b)

        def do():
            for link in links:
                link.delay_ms = ms
        self.call(do)

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        links = self._links(a, b) if a else list(self.links.values())

        def do():
            for link in links:
                link.cut = False
                link.delay_ms = 0
                for k in link.stall:
                    link.stall[k] = False
        self.call(do)

    def close(self) -> None:
        def do():
            for s in self._servers:
                s.close()
            for link in self.links.values():
                for pair in list(link.conns):
                    for w in pair:
                        w.close()
        try:
            self.call(do)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
