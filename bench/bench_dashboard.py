#!/usr/bin/env python
"""What a dashboard user waits for, and what open dashboards cost the node, on a 3-node cluster
(TLS, mTLS and access control on, as in production: bench/_schedd.py).

    python bench/bench_dashboard.py [--jobs 10000] [--instants 10000] [--loads 5]
                                    [--dashboards 10] [--duration 60] [--rate 100] [--rounds 1]
                                    [--no-browser] [--no-live]

1. Pages (Debian's chromium, headless, driven by Selenium as tests/integration/test_dashboard.py
   does, logged in through a one-time link): for each load, first-contentful-paint (the Paint
   Timing API) and "filled": `performance.now()` when the element the page's script fills is
   there (a MutationObserver installed before the page's own scripts run, with
   Page.addScriptToEvaluateOnNewDocument), and "drawn": the frame after that. Both are measured
   from the navigation's start. Pages: Jobs with 10 jobs (baseline), then with --jobs; a Job page
   whose job has 10 backfilled instants (baseline) and --instants, loaded alternately; and on that
   page the user's way to the backfilled instants (they lie before the job's creation, which the
   first window starts from): choose the 1-week window, then *Earlier*, timed from the click to
   the window's table filled and drawn.
2. Live cost: --rate jobs `@every 1s` run by the recording worker (--rate fires/s). Phases of
   --duration each, alternating: no dashboard, then --dashboards emulated Jobs pages holding
   only the stream, then --dashboards full ones, on the leader's dashboard (aiohttp clients, each
   its own session, doing what jobs.js and common.js do: /jobs once, /api/events held open, each
   `changed` patched into the rows shown, /api/jobs loaded on `ready`, every 30 s and when a
   change cannot be patched (a job added or removed, or one that sorts onto the page), one load
   at a time; gzip accepted). The leader's CPU (/proc/<pid>/stat) in each phase; the difference
   is the dashboards' share.
3. Bytes per live update on the Jobs page, from phase 2: the event stream's bytes (HTTP body,
   before TLS) per `changed`, and the loads' responses (status line, headers and body as sent,
   compressed) spread over the `changed` events.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import html
import json
import os
import re
import shutil
import ssl
import statistics
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._metrics import cpu_seconds, percentile
from bench._schedd import Schedd, periodic_specs, running
from schedd_client import Client, job_spec

NOWHERE = "nowhere"                  # a pool no worker serves: the jobs' runs wait, and nothing runs
JOBS_QUERY = "text=&team=&state=&pool=&size=50&after="   # what jobs.js asks at first
FALLBACK_S = 30.0                    # common.js: a reload however quiet the stream
WEEK_MS = 7 * 86_400_000

# Installed before the page's own scripts: when the page's content is filled, and each redraw of
# the Job page's timeline (its window loaded).
OBSERVER = r"""
(function () {
  var d = window.__dash = {filled: 0, drawn: 0, timelines: 0};
  function filled() {
    var p = location.pathname;
    if (p === "/jobs") {
      var t = document.getElementById("total");
      return t && t.textContent && document.querySelector("#jobs tbody tr");
    }
    if (p.indexOf("/jobs/") === 0) {
      var s = document.getElementById("spec"), c = document.getElementById("instant-count"),
          r = document.getElementById("runs-total");
      return s && s.children.length && c && c.textContent && r && r.textContent &&
             document.querySelector("#timeline svg");
    }
    return false;
  }
  new MutationObserver(function (recs) {
    recs.forEach(function (r) { if (r.target.id === "timeline") { d.timelines += 1; } });
    if (!d.filled && filled()) {
      d.filled = performance.now();
      requestAnimationFrame(function () { setTimeout(function () { d.drawn = performance.now(); }, 0); });
    }
  }).observe(document, {childList: true, subtree: true, characterData: true});
})();
"""

# On the Job page: the 1-week window, then *Earlier*: from the click to the window's rows drawn.
EARLIER = r"""
var want = arguments[0], done = arguments[arguments.length - 1], d = window.__dash;
function waitFor(test, then) {
  var t0 = performance.now();
  (function poll() {
    if (test()) { then(); } else if (performance.now() - t0 > 100000) { done(["timeout", "window"]); }
    else { setTimeout(poll, 5); }
  })();
}
var seen = d.timelines, sel = document.getElementById("window");
sel.value = "168";
sel.dispatchEvent(new Event("change"));
waitFor(function () { return d.timelines > seen; }, function () {
  var mark = d.timelines, count = document.getElementById("instant-count"), t0 = performance.now();
  setTimeout(function () {
    done(["timeout", count.textContent, document.getElementById("status").textContent, d.timelines - mark]);
  }, 100000);
  new MutationObserver(function (recs, mo) {
    if (d.timelines > mark && count.textContent.indexOf(want) === 0 && document.querySelector("#instants tbody tr")) {
      mo.disconnect();
      var filled = performance.now() - t0;
      requestAnimationFrame(function () { setTimeout(function () { done([filled, performance.now() - t0]); }, 0); });
    }
  }).observe(document.body, {childList: true, subtree: true, characterData: true});
  document.getElementById("earlier").click();
});
"""


def pct(xs: list[float], q: float) -> float:
    return percentile(xs, q) or 0.0


def load_text() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


# ---------------------------------------------------------------- 1. pages in chromium

def browser():
    """Headless chromium; the cluster's CA is not in its store, so its certificate is accepted."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or ""
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900",
                "--disable-gpu"):
        opts.add_argument(arg)
    opts.accept_insecure_certs = True
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver") or ""), options=opts)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": OBSERVER})
    driver.set_script_timeout(180)
    return driver


def wait_js(driver, expr: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(f"return {expr};")
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(f"{expr} not true within {timeout} s at {driver.current_url}")


def load_page(driver, url: str) -> tuple[float, float, float]:
    """One navigation: first-contentful-paint, filled, drawn (ms from the navigation's start)."""
    driver.get(url)
    wait_js(driver, "window.__dash && window.__dash.drawn")
    fcp = driver.execute_script(
        "var e = performance.getEntriesByName('first-contentful-paint')[0]; return e ? e.startTime : -1;")
    d = driver.execute_script("return window.__dash;")
    return float(fcp), float(d["filled"]), float(d["drawn"])


@dataclass(slots=True)
class Samples:
    rows: dict[str, list[tuple[float, ...]]] = field(default_factory=dict)

    def add(self, kind: str, xs: tuple[float, ...]) -> None:
        self.rows.setdefault(kind, []).append(xs)


def measure_pages(s: Schedd, args: argparse.Namespace) -> Samples:
    cl, lead = s.client, s.c.wait_leader(60)
    t0 = int(time.time()) * 1000
    start = t0 - 10 * 86_400_000           # ten days ago: inside the window *Earlier* shows from the 1-week window
    few, many = "inst-few", "inst-many"
    specs = [job_spec(f"job-{i:05d}", schedule="0 3 * * *", command="true", pool=NOWHERE) for i in range(8)]
    # Each instant is a waiting run; with the default history_limit (1,000) the runs past it leave
    # memory and the ledger shows only about 2,000 of them, so the job keeps them all.
    specs += [job_spec(n, schedule="* * * * * *", command="true", pool=NOWHERE, paused=True,
                       history_limit=max(1000, args.instants)) for n in (few, many)]
    cl.put_jobs(specs)
    cl.backfill_job(few, start, start + 9_000)
    t = time.perf_counter()
    r = cl.backfill_job(many, start, start + (args.instants - 1) * 1000)
    print(f"backfilled {r.created} instants of {many} in {time.perf_counter() - t:.1f} s")
    base = s.c.http_url(lead).rstrip("/")
    out = Samples()
    driver = browser()
    try:
        with Client(s.c.nodes[lead].grpc, security=s.c.security()) as on_leader:
            link = on_leader.login_link()
        driver.get(link)
        wait_js(driver, "location.pathname === '/jobs' && window.__dash && window.__dash.drawn")
        driver.get(base + "/jobs")                                     # warm: the static files cached
        wait_js(driver, "window.__dash && window.__dash.drawn")
        for _ in range(args.loads):
            out.add("Jobs, 10 jobs", load_page(driver, base + "/jobs"))
        for _ in range(args.loads):
            for name, n, label in ((few, 10, "10"), (many, args.instants, f"{args.instants:,}")):
                out.add(f"Job, {label} instants", load_page(driver, f"{base}/jobs/{name}"))
                want = f"({n}+)" if n >= 10_000 else f"({n})"
                got = driver.execute_async_script(EARLIER, want)
                if got[0] == "timeout":
                    raise TimeoutError(f"the week before on {name} did not show {want}: {got[1:]}")
                out.add(f"Job, {label} instants: 1 week, Earlier", (float("nan"), *map(float, got)))
        print(f"{load_text()} before registering {args.jobs - 10:,} more jobs")
        t = time.perf_counter()
        more = [job_spec(f"job-{i:05d}", schedule="0 3 * * *", command="true", pool=NOWHERE)
                for i in range(8, args.jobs - 2)]
        s.put(more)
        print(f"registered {len(more):,} jobs in {time.perf_counter() - t:.1f} s; {load_text()}")
        driver.get(base + "/jobs")
        wait_js(driver, "window.__dash && window.__dash.drawn")
        for _ in range(args.loads):
            out.add(f"Jobs, {args.jobs:,} jobs", load_page(driver, base + "/jobs"))
    finally:
        driver.quit()
    return out


def print_pages(out: Samples, loads: int) -> None:
    print(f"\nPages in headless chromium, {loads} loads each (ms from navigation start; "
          "for 'Earlier': from the click)")
    print(f"{'page':<36} {'FCP p50':>8} {'FCP p95':>8} {'filled p50':>10} {'filled p95':>10} "
          f"{'drawn p50':>9} {'drawn p95':>9}")
    for kind, rows in out.rows.items():
        fcp, filled, drawn = ([r[i] for r in rows] for i in range(3))
        f50 = f"{pct(fcp, .5):8.0f}" if fcp[0] == fcp[0] else f"{'-':>8}"
        f95 = f"{pct(fcp, .95):8.0f}" if fcp[0] == fcp[0] else f"{'-':>8}"
        print(f"{kind:<36} {f50} {f95} {pct(filled, .5):10.0f} {pct(filled, .95):10.0f} "
              f"{pct(drawn, .5):9.0f} {pct(drawn, .95):9.0f}")


# ---------------------------------------------------------------- 2, 3. live dashboards

@dataclass(slots=True)
class Page:
    """One emulated Jobs page: what it received and asked."""

    sse_bytes: int = 0
    changed: int = 0
    patches: int = 0
    ready: int = 0
    reloads: int = 0
    reload_bytes: int = 0
    reload_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _response_bytes(resp, body: bytes) -> int:
    """Status line, headers and body as the server sent them (before TLS and chunking)."""
    head = len(f"HTTP/1.1 {resp.status} {resp.reason}\r\n") + 2
    head += sum(len(k) + len(v) + 4 for k, v in resp.raw_headers)
    return head + len(body)


async def _login(session, base: str, token: str) -> None:
    """The login form, as a user pasting the token: its CSRF value from the form (and cookie)."""
    async with session.get(base + "/login") as r:
        form = await r.text()
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    if csrf is None:
        raise RuntimeError("the login page has no CSRF field")
    async with session.post(base + "/login", data={"csrf": html.unescape(csrf.group(1)), "token": token,
                                                   "next": "/jobs"}) as r:
        await r.read()
    if not any(c.key.startswith("schedd_session") for c in session.cookie_jar):
        raise RuntimeError(f"login refused: {r.url}")


@dataclass(slots=True)
class Listing:
    """What the emulated Jobs page shows (jobs.js's `shown`, `names`, `next`), and its patch rule:
    a changed row it shows is patched in; it loads again for a removed job, an added one (no
    filters here: every job is wanted), or a changed one that sorts onto its page but is not on it."""

    names: list[str] = field(default_factory=list)
    rows: dict[str, dict] = field(default_factory=dict)
    next: str = ""
    loaded: bool = False

    def show(self, body: dict) -> None:
        self.rows = {j["name"]: j for j in body["jobs"]}
        self.names = [j["name"] for j in body["jobs"]]
        self.next, self.loaded = body["next"], True

    def on_page(self, name: str) -> bool:
        return not self.next or not self.names or name <= self.names[-1]

    def patch(self, change: dict) -> bool:
        if not self.loaded or change.get("reload") or change.get("removed") or change.get("added"):
            return False
        rows = change.get("rows") or []
        if any(j["name"] not in self.rows and self.on_page(j["name"]) for j in rows):
            return False
        for j in rows:
            old = self.rows.get(j["name"])
            if old is not None:                 # jobs.js's `merged`: the strip by run id, the newest 20
                recent = {r["id"]: r for r in old["recent"] + j["recent"]}
                j["recent"] = sorted(recent.values(), key=lambda r: r["ms"])[-20:]
                self.rows[j["name"]] = j
        return True


async def dashboard(base: str, token: str, ctx: ssl.SSLContext | None, page: Page, ready: asyncio.Event,
                    counting: asyncio.Event, reloading: bool = True) -> None:
    """What jobs.js and common.js's `follow` do, over HTTP: the page, its stream, its loads (on
    `ready`, every 30 s, and when a change cannot be patched in: `Listing.patch`), one at a time,
    a change heard during a load patched after it (`reloading` False: the stream only, to tell
    the watch's cost from the page's). Answers as the browser takes them: gzip accepted, the
    bytes counted as sent."""
    import aiohttp
    host = urlsplit(base).hostname
    jar = aiohttp.CookieJar(unsafe=host == "127.0.0.1")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx if ctx is not None else True, limit=6), cookie_jar=jar,
                                     timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
                                     auto_decompress=False) as session:
        await _login(session, base, token)
        async with session.get(base + "/jobs") as r:
            await r.read()
        busy, again = False, False
        listing = Listing()
        held: list[dict] = []

        async def reload() -> None:
            nonlocal busy, again, held
            if busy:
                again = True
                return
            busy = True
            try:
                while True:
                    again = False
                    t = time.perf_counter()
                    async with session.get(base + "/api/jobs?" + JOBS_QUERY,
                                           headers={"Accept": "application/json",
                                                    "Accept-Encoding": "gzip, deflate"}) as r:
                        body = await r.read()
                    if counting.is_set():
                        page.reloads += 1
                        page.reload_bytes += _response_bytes(r, body)
                        page.reload_ms.append((time.perf_counter() - t) * 1000)
                    if r.status != 200:
                        page.errors.append(f"/api/jobs {r.status}")
                    else:
                        coding = r.headers.get("Content-Encoding", "")
                        raw = (gzip.decompress(body) if coding == "gzip" else zlib.decompress(body) if coding == "deflate"
                               else body)
                        listing.show(json.loads(raw))
                    if again:
                        continue
                    changes, held = held, []
                    patched = [listing.patch(c) for c in changes]
                    if counting.is_set():
                        page.patches += sum(patched)
                    if all(patched):
                        return
            finally:
                busy = False

        spawned: set[asyncio.Future] = set()

        def spawn_reload() -> None:
            if reloading:
                task = asyncio.ensure_future(reload())
                spawned.add(task)
                task.add_done_callback(spawned.discard)

        def apply(change: dict) -> bool:
            """common.js's `apply`: held during a load; patched, or False (a load is due)."""
            if busy:
                held.append(change)
                return True
            if not listing.patch(change):
                return False
            if counting.is_set():
                page.patches += 1
            return True

        async def fallback() -> None:
            while True:
                await asyncio.sleep(FALLBACK_S)
                spawn_reload()

        timer = asyncio.ensure_future(fallback())
        try:
            if reloading:
                await reload()
            async with session.get(base + "/api/events?watch=jobs&" + JOBS_QUERY,      # the page's own listing
                                   headers={"Accept": "text/event-stream"}) as r:
                if r.status != 200:
                    page.errors.append(f"/api/events {r.status}: {await r.text()}")
                    ready.set()
                    return
                event, data = "", ""
                async for line in r.content:
                    if counting.is_set():
                        page.sse_bytes += len(line)
                    text = line.decode().rstrip("\n")
                    if text.startswith("event:"):
                        event = text[6:].strip()
                    elif text.startswith("data:"):
                        data = text[5:].strip()
                    elif text == "" and event:
                        if event == "ready":
                            page.ready += 1
                            ready.set()
                            held.clear()
                            spawn_reload()
                        elif event == "changed":
                            if counting.is_set():
                                page.changed += 1
                            if reloading and not apply(json.loads(data)):
                                spawn_reload()
                        event, data = "", ""
        finally:
            for task in (timer, *spawned):
                task.cancel()
            await asyncio.gather(timer, *spawned, return_exceptions=True)


@dataclass(slots=True)
class Phase:
    mode: str                        # "none", "streams only", "pages"
    dashboards: int
    seconds: float
    leader_cpu: float
    nodes_cpu: float
    worker_cpu: float
    fires: int
    load: str
    pages: list[Page]


def _fires(records: Path) -> int:
    try:
        with records.open("rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


async def _phase(s: Schedd, n: int, duration: float, reloading: bool = True) -> Phase:
    lead = s.c.wait_leader(60)
    base = s.c.http_url(lead).rstrip("/")
    ctx = ssl.create_default_context(cafile=s.c.metrics_ca) if s.c.metrics_ca else None
    pages = [Page() for _ in range(n)]
    readies = [asyncio.Event() for _ in range(n)]
    counting = asyncio.Event()
    tasks = [asyncio.ensure_future(dashboard(base, s.c.admin_token, ctx, p, e, counting, reloading))
             for p, e in zip(pages, readies)]
    try:
        if tasks:
            all_ready = asyncio.ensure_future(asyncio.gather(*(e.wait() for e in readies)))
            waiting: list[asyncio.Future[Any]] = [all_ready, *tasks]
            await asyncio.wait(waiting, timeout=120, return_when=asyncio.FIRST_COMPLETED)
            for t in tasks:
                if t.done() and t.exception() is not None:
                    raise RuntimeError("an emulated dashboard failed") from t.exception()
            if not all_ready.done():
                raise TimeoutError("the dashboards' streams were not ready within 120 s")
            await asyncio.sleep(2)                    # the first reloads done: steady state
        pids = s.pids()
        before = {k: cpu_seconds(p) or 0.0 for k, p in pids.items()}
        fires0, t0 = _fires(s.records), time.monotonic()
        counting.set()
        await asyncio.sleep(duration)
        counting.clear()
        took = time.monotonic() - t0
        after = {k: cpu_seconds(p) or 0.0 for k, p in pids.items()}
        fires = _fires(s.records) - fires0
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for t in tasks:
        if t.done() and not t.cancelled() and t.exception() is not None:
            raise t.exception()            # type: ignore[misc]
    d = {k: after[k] - before[k] for k in pids}
    nodes = sum(v for k, v in d.items() if k != "worker")
    mode = "none" if not n else "pages" if reloading else "streams only"
    return Phase(mode, n, took, d[lead], nodes, d.get("worker", 0.0), fires, load_text(), pages)


def measure_live(s: Schedd, args: argparse.Namespace) -> list[Phase]:
    s.put(periodic_specs(s, args.rate, 1))
    time.sleep(3)                                   # past the lookahead: fires at the full rate
    out = []
    for _ in range(args.rounds):
        for n, reloading in ((0, True), (args.dashboards, False), (args.dashboards, True)):
            p = asyncio.run(_phase(s, n, args.duration, reloading))
            out.append(p)
            print(f"phase: {n} dashboards ({p.mode}), {p.seconds:.0f} s, leader {p.leader_cpu / p.seconds * 100:.1f}% "
                  f"of a core, {p.fires / p.seconds:.0f} fires/s, {p.load}", flush=True)
    return out


def _core(phases: list[Phase], mode: str, what: str = "leader_cpu") -> float:
    """Mean % of one core over the phases of `mode`."""
    xs = [getattr(p, what) / p.seconds * 100 for p in phases if p.mode == mode]
    return statistics.mean(xs) if xs else float("nan")


def print_live(phases: list[Phase], args: argparse.Namespace) -> None:
    print(f"\nLive: {args.rate} jobs every second (recording worker), {args.dashboards} emulated Jobs pages "
          f"(aiohttp, each its own session) on the leader's dashboard; phases of {args.duration:.0f} s")
    print(f"{'dashboards':<16} {'fires/s':>8} {'leader %core':>12} {'3 nodes %core':>13} {'worker %core':>12}  load")
    for p in phases:
        label = f"{p.dashboards} ({p.mode})" if p.dashboards else "none"
        print(f"{label:<16} {p.fires / p.seconds:8.0f} {p.leader_cpu / p.seconds * 100:12.1f} "
              f"{p.nodes_cpu / p.seconds * 100:13.1f} {p.worker_cpu / p.seconds * 100:12.1f}  {p.load}")
    for mode in ("streams only", "pages"):
        print(f"dashboards' share, {mode}: leader {_core(phases, mode) - _core(phases, 'none'):+.1f}% of one core "
              f"(3 nodes {_core(phases, mode, 'nodes_cpu') - _core(phases, 'none', 'nodes_cpu'):+.1f}%)"
              + ("; target <= 5%" if mode == "pages" else ""))
    pages = [pg for p in phases if p.mode == "pages" for pg in p.pages]
    changed = sum(pg.changed for pg in pages)
    reloads = sum(pg.reloads for pg in pages)
    patches = sum(pg.patches for pg in pages)
    sse = sum(pg.sse_bytes for pg in pages)
    rbytes = sum(pg.reload_bytes for pg in pages)
    ms = [x for pg in pages for x in pg.reload_ms]
    errors = [e for p in phases for pg in p.pages for e in pg.errors]
    if not changed:
        print(f"no live update counted (changed {changed}, reloads {reloads}); errors: {errors[:3]}")
        return
    page_s = sum(p.seconds * p.dashboards for p in phases if p.mode == "pages")
    share = (_core(phases, "pages") - _core(phases, "streams only")) / 100 * sum(p.seconds for p in phases
                                                                                  if p.mode == "pages")
    print(f"per page: {changed / page_s:.2f} changed/s, {patches / page_s:.2f} patched/s, {reloads / page_s:.3f} loads/s "
          f"(on `ready`, the 30 s fallback, and changes that could not be patched); load p50 {pct(ms, .5):.0f} ms, "
          f"p95 {pct(ms, .95):.0f} ms (client side, this process)"
          + (f"; leader CPU per load {share / reloads * 1000:.0f} ms (pages less streams only, over the loads)"
             if reloads else ""))
    reload_each = rbytes / reloads if reloads else 0.0
    print(f"bytes per live update (Jobs page, 50 of {args.rate} jobs): stream {sse / changed:,.0f} B per `changed` "
          f"(the changed rows; heartbeats included) + loads {rbytes / changed:,.0f} B per `changed` "
          f"({reload_each:,.0f} B per load: status line, headers, body as sent) = "
          f"{(sse + rbytes) / changed:,.0f} B; {(sse + rbytes) / page_s:,.0f} B/s per page; before TLS")
    if errors:
        print(f"errors: {len(errors)}, e.g. {errors[:3]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000, help="jobs on the large Jobs page (default 10,000)")
    ap.add_argument("--instants", type=int, default=10_000, help="instants of the large Job page (default 10,000)")
    ap.add_argument("--loads", type=int, default=5, help="loads of each page (default 5)")
    ap.add_argument("--dashboards", type=int, default=10, help="emulated Jobs pages open (default 10)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds per live phase (default 60; the target: 600)")
    ap.add_argument("--rate", type=int, default=100, help="fires per second in the live phases (default 100)")
    ap.add_argument("--rounds", type=int, default=1, help="pairs of live phases, without and with (default 1)")
    ap.add_argument("--no-browser", action="store_true", help="skip the page loads (part 1)")
    ap.add_argument("--no-live", action="store_true", help="skip the live phases (parts 2 and 3)")
    args = ap.parse_args()
    print(f"{load_text()} at the start, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-dash-") as tmp:
        if not args.no_browser:
            if not (shutil.which("chromium") and shutil.which("chromedriver")):
                print("pages skipped: Debian's chromium and chromium-driver are not installed")
            else:
                with running(Path(tmp) / "pages", worker=False) as s:
                    pages = measure_pages(s, args)
                print_pages(pages, args.loads)
        if not args.no_live:
            with running(Path(tmp) / "live", worker=True) as s:
                phases = measure_live(s, args)
            print_live(phases, args)
    print(f"{load_text()} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
