"""The dashboard's live streams (server-sent events) against an in-process server and a fake API
whose watches and log streams the test feeds: what the browser receives (the changed rows,
coalesced), one upstream watch per token shared by its pages, the upstream call closed when the
last browser goes, a slow page told to reload without holding up the others, the bounds, and a
session that ends mid-stream; and the Run page's buttons and actions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from schedd.dashboard import app as dashboard
from schedd.dashboard import live
from schedd.dashboard.backend import Api, ApiError, Unauthenticated, _rows, attempt_row, outcome_text
from schedd.dashboard.live import HUB, STREAMS
from schedd_proto import scheduler_pb2 as pb
from tests.unit.test_dashboard_app import FakeApi, login, session_csrf

PORT = 9102


class Upstream:
    """One stream the fake API opened: the test puts items (or an ApiError) in `feed`."""

    def __init__(self, token: str, what: str) -> None:
        self.token, self.what = token, what
        self.feed: asyncio.Queue[Any] = asyncio.Queue()
        self.started = self.closed = False

    async def items(self) -> AsyncIterator[Any]:
        self.started = True
        try:
            while True:
                item = await self.feed.get()
                if isinstance(item, ApiError):
                    raise item
                if item is None:
                    return
                yield item
        finally:
            self.closed = True


class LiveApi(FakeApi):
    def __init__(self) -> None:
        super().__init__()
        self.upstreams: list[Upstream] = []
        self.actions: list[tuple[str, str]] = []
        self.granted: list[dict] = []            # grants given to good.token since
        self.listings: list[dict] = []           # what each watch was opened to follow

    async def whoami(self, token: str) -> dict:
        who = await super().whoami(token)
        if token == "good.token":
            who["grants"] = [{"pattern": "team:a", "capabilities": ["read", "cancel", "trigger"]}, *self.granted]
        return who

    def _open(self, token: str, what: str, first: list[Any]) -> AsyncIterator[Any]:
        up = Upstream(token, what)
        self.upstreams.append(up)
        if token not in self.valid:
            up.feed.put_nowait(Unauthenticated("UNAUTHENTICATED", "token expired"))
        for item in first:
            up.feed.put_nowait(item)
        return up.items()

    def watch(self, token: str, what: str, *, job: str = "", size: int = 100, **listing: str) -> AsyncIterator[Any]:
        self.listings.append({**listing, "size": str(size)})
        return self._open(token, what, [("added", "j0", row("j0")), ("synced", "", None)])

    def logs(self, token: str, run_id: str, attempt: int = 0) -> AsyncIterator[dict]:
        if run_id == "missing@x":
            return self._open(token, "log", [ApiError("NOT_FOUND", f"execution {run_id!r} not found")])
        return self._open(token, "log", [])

    async def run(self, token: str, run_id: str) -> dict:
        if token not in self.valid:
            raise Unauthenticated("UNAUTHENTICATED", "token expired")
        return {"id": run_id, "job": "j1", "team": "a", "state": "RUNNING", "attempts": []}

    async def cancel(self, token: str, run_id: str) -> dict:
        self.actions.append(("cancel", run_id))
        raise ApiError("FAILED_PRECONDITION", f"run {run_id} is SUCCEEDED: it has ended")

    async def retry(self, token: str, run_id: str) -> dict:
        self.actions.append(("retry", run_id))
        return {"id": run_id, "state": "SCHEDULED"}


def row(name: str, n: int = 0) -> dict:
    return {"name": name, "team": "a", "executions_total": n}


@pytest.fixture
async def client():
    api = LiveApi()
    app = dashboard.build(api, secure=False, port=PORT)  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as c:
        c.api = api
        yield c


async def event(response, timeout: float = 5.0) -> tuple[str, str]:
    """The next server-sent event's (type, data); comments and `retry:` lines skipped."""
    kind, data = "", ""
    while True:
        line = (await asyncio.wait_for(response.content.readline(), timeout)).decode().rstrip("\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and kind:
            return kind, data


async def until(predicate, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_changed_rows_arrive_in_one_coalesced_event_after_ready(client):
    await login(client)
    r = await client.get("/api/events?watch=jobs")
    assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
    assert "script-src 'self'" in r.headers["Content-Security-Policy"]
    assert await event(r) == ("ready", "1")              # the first listing's rows are not changes
    [up] = client.api.upstreams
    assert up.token == "good.token" and up.what == "jobs"
    up.feed.put_nowait(("changed", "j1", row("j1", 1)))
    kind, data = await event(r)
    assert kind == "changed" and json.loads(data) == {"rows": [row("j1", 1)], "added": [], "removed": []}
    started = asyncio.get_running_loop().time()
    for n in range(50):                                   # a burst: one event for it, not fifty
        up.feed.put_nowait(("changed", "j1", row("j1", n)))
    up.feed.put_nowait(("added", "j2", row("j2")))
    up.feed.put_nowait(("changed", "j2", row("j2", 5)))    # added, then changed: added as it is now
    up.feed.put_nowait(("added", "j3", row("j3")))
    up.feed.put_nowait(("removed", "j3", None))           # added, then removed: nothing
    up.feed.put_nowait(("removed", "j0", None))
    kind, data = await event(r)
    assert kind == "changed" and json.loads(data) == {"rows": [row("j1", 49)], "added": [row("j2", 5)],
                                                      "removed": ["j0"]}
    assert asyncio.get_running_loop().time() - started >= live.COALESCE_S * 0.9
    with pytest.raises(asyncio.TimeoutError):
        await event(r, timeout=live.COALESCE_S * 2)      # the burst's rest folded into that one
    r.close()


async def test_pages_of_one_token_share_one_upstream_and_the_last_to_go_closes_it(client):
    await login(client)
    first = await client.get("/api/events?watch=jobs")
    assert await event(first) == ("ready", "1")
    second = await client.get("/api/events?watch=jobs")
    assert await event(second) == ("ready", "1")         # at once: the watch has its listing
    runs = await client.get("/api/events?watch=runs&job=j1")
    assert await event(runs) == ("ready", "1")
    assert [(u.token, u.what) for u in client.api.upstreams] == [("good.token", "jobs"), ("good.token", "runs")]
    jobs_up = client.api.upstreams[0]
    jobs_up.feed.put_nowait(("changed", "j1", row("j1", 7)))
    for r in (first, second):                             # fanned out: the same frame to both
        kind, data = await event(r)
        assert kind == "changed" and json.loads(data)["rows"] == [row("j1", 7)]
    with pytest.raises(asyncio.TimeoutError):
        await event(runs, timeout=live.COALESCE_S * 2)   # another watch: nothing
    narrowed = await client.get("/api/events?watch=jobs&team=a&text=rep&after=a-0&size=25")   # another listing
    assert await event(narrowed) == ("ready", "1")
    assert client.api.listings[-1] == {"team": "a", "state": "", "text": "rep", "pool": "", "after": "a-0", "size": "25"}
    assert len(client.api.upstreams) == 3
    narrowed.close()
    assert (await client.get("/api/events?watch=jobs&size=7")).status == 400
    assert (await client.get("/api/events?watch=jobs&state=gone")).status == 400
    first.close()
    await until(lambda: client.app[STREAMS].count() == 2)
    assert not jobs_up.closed                             # one page still follows it
    jobs_up.feed.put_nowait(("changed", "j1", row("j1", 8)))
    kind, data = await event(second)
    assert json.loads(data)["rows"] == [row("j1", 8)]
    second.close()
    await until(lambda: jobs_up.closed)                  # the last page went: the call is cancelled
    client.api.granted.append({"pattern": "team:b", "capabilities": ["read"]})
    regranted = await client.get("/api/events?watch=runs&job=j1")   # grants changed: a watch of its own,
    assert await event(regranted) == ("ready", "1")                  # filtered by the new ones
    assert [u.what for u in client.api.upstreams] == ["jobs", "runs", "jobs", "runs"]
    regranted.close()
    await until(lambda: client.api.upstreams[3].closed)
    assert not client.api.upstreams[1].closed                         # the first runs page still follows its own
    await login(client, token="team.token")               # another token: a watch of its own
    other = await client.get("/api/events?watch=runs&job=j1")
    assert await event(other) == ("ready", "1")
    assert [u.token for u in client.api.upstreams] == ["good.token"] * 4 + ["team.token"]
    runs.close()
    other.close()
    await until(lambda: all(u.closed for u in client.api.upstreams) and not client.app[HUB].upstreams())


async def test_a_browser_going_away_closes_the_upstream_stream(client):
    await login(client)
    for _ in range(20):                                   # open and close twenty pages
        r = await client.get("/api/events?watch=runs&job=j1")
        assert await event(r) == ("ready", "1")
        r.close()
    await until(lambda: all(up.closed for up in client.api.upstreams))
    await until(lambda: client.app[STREAMS].count() == 0)
    assert 1 <= len(client.api.upstreams) <= 20 and not client.app[HUB].upstreams()


async def test_no_session_or_a_dead_token_is_401_and_nothing_stays_open(client):
    r = await client.get("/api/events")
    assert r.status == 401 and (await r.json())["login"] == "/login"
    await login(client, token="team.token")
    del client.api.valid["team.token"]
    r = await client.get("/api/events")
    assert r.status == 401 and (await r.json())["login"] == "/login"
    assert client.api.upstreams == []                     # the token was checked first: no watch opened
    assert client.app[STREAMS].count() == 0
    assert (await client.get("/api/jobs")).status == 401          # the session ended with it


async def test_a_token_deleted_mid_stream_ends_it_with_login(client, monkeypatch):
    monkeypatch.setattr(live, "HEARTBEAT_S", 0.2)
    await login(client, token="team.token")
    r = await client.get("/api/events")
    assert await event(r) == ("ready", "1")
    del client.api.valid["team.token"]
    kind, data = await event(r)
    assert kind == "end" and '"login":"/login"' in data
    await until(lambda: client.api.upstreams[0].closed)


async def test_streams_are_bounded_per_session(client):
    await login(client)
    open_ = [await client.get("/api/events") for _ in range(live.PER_SESSION)]
    for r in open_:
        assert await event(r) == ("ready", "1")
    refused = await client.get("/api/events")
    assert refused.status == 429 and "live streams" in (await refused.json())["error"]
    open_[0].close()
    await until(lambda: client.app[STREAMS].count() == live.PER_SESSION - 1)
    again = await client.get("/api/events")
    assert await event(again) == ("ready", "1")


async def test_the_api_refusing_the_watch_is_its_status_and_an_ended_watch_says_so(client):
    await login(client)
    assert (await client.get("/api/events?watch=nodes")).status == 400
    r = await client.get("/api/events")
    assert await event(r) == ("ready", "1")
    client.api.upstreams[0].feed.put_nowait(ApiError("UNAVAILABLE", "the node is shutting down"))
    assert await event(r) == ("end", '{"error":"the node is shutting down"}')


async def test_shutting_down_ends_open_streams_at_once():
    api = LiveApi()
    app = dashboard.build(api, secure=False, port=PORT)  # type: ignore[arg-type]
    c = TestClient(TestServer(app))
    await c.start_server()
    await login(c)
    r = await c.get("/api/events")
    assert await event(r) == ("ready", "1")
    started = asyncio.get_running_loop().time()
    await c.server.close()           # the browser still connected: aiohttp would wait 60 s for the handler
    assert asyncio.get_running_loop().time() - started < 5
    assert api.upstreams[0].closed
    await c.close()


async def test_the_log_stream_relays_chunks_until_the_attempt_ends(client):
    await login(client)
    opening = asyncio.ensure_future(client.get("/api/run/log?id=j1%402026-01-01T00%3A00%3A00Z&attempt=0"))
    await until(lambda: client.api.upstreams)
    [up] = client.api.upstreams
    up.feed.put_nowait({"kind": "output", "stream": "stdout", "text": "line 1\n"})
    r = await opening
    assert r.status == 200
    assert await event(r) == ("log", '{"kind":"output","stream":"stdout","text":"line 1\\n"}')
    up.feed.put_nowait({"kind": "end", "state": "SUCCEEDED", "exit_code": 0})
    kind, data = await event(r)
    assert kind == "log" and '"end"' in data
    assert await r.content.read() == b""                  # the stream is complete
    await until(lambda: up.closed and client.app[STREAMS].count() == 0)
    missing = await client.get("/api/run/log?id=missing@x")
    assert missing.status == 404 and "not found" in (await missing.json())["error"]


async def test_a_quiet_log_stream_starts_and_a_late_refusal_arrives_as_end(client, monkeypatch):
    monkeypatch.setattr(live, "FIRST_S", 0.2)
    await login(client)
    r = await client.get("/api/run/log?id=j1@x")              # nothing printed yet: the stream starts
    assert r.status == 200
    client.api.upstreams[0].feed.put_nowait(ApiError("UNAVAILABLE", "no leader"))
    assert await event(r) == ("end", '{"error":"no leader"}')


async def test_the_run_page_buttons_follow_the_grants_and_actions_show_the_api_refusal(client):
    await login(client, token="team.token")                # no grants: no buttons
    page = await (await client.get("/runs/j1%402026-01-01T00%3A00%3A00Z")).text()
    assert '<meta name="may-cancel" content="">' in page and '<meta name="run" content="j1@2026-01-01T00:00:00Z">' in page
    csrf = session_csrf(page)
    r = await client.post("/api/run/cancel", json={"id": "j1@x"})
    assert r.status == 403                                 # no CSRF token
    r = await client.post("/api/run/cancel", json={"id": "j1@x"}, headers={"X-CSRF-Token": csrf})
    assert r.status == 409 and (await r.json())["error"] == "run j1@x is SUCCEEDED: it has ended"
    r = await client.post("/api/run/retry", json={"id": "j1@x"}, headers={"X-CSRF-Token": csrf})
    assert r.status == 200 and client.api.actions == [("cancel", "j1@x"), ("retry", "j1@x")]
    await login(client, token="good.token")                # cancel and trigger on team a: both buttons
    page = await (await client.get("/runs/j1@x")).text()
    assert '<meta name="may-cancel" content="1">' in page and '<meta name="may-retry" content="1">' in page


@pytest.mark.parametrize(("attempt", "words"), [
    (pb.Attempt(state="FAILED", ended_ms=2, exit_code=3), "exit status 3"),
    (pb.Attempt(state="CANCELLED", ended_ms=2, exit_code=-9), "killed by SIGKILL"),
    (pb.Attempt(state="FAILED", ended_ms=2, exit_code=-200), "killed by signal 200"),
    (pb.Attempt(state="TIMED_OUT", ended_ms=2, exit_code=-15), "timed out after 30 s"),
    (pb.Attempt(state="LOST", worker="w1", error="worker w1 lost: no news for 30s"),
     "lost: worker w1 gone (no news for 30s)"),
    (pb.Attempt(state="SUCCEEDED", ended_ms=2, http_status=204), "HTTP 204"),
    (pb.Attempt(state="RUNNING", started_ms=1), ""),
])
def test_an_attempt_outcome_reads_in_words(attempt, words):
    assert outcome_text(attempt, 30.0) == words
    assert attempt_row(attempt, 30.0)["outcome"] == words


class FakeCall:
    """A gRPC server-stream call: one event, then nothing until cancelled."""

    def __init__(self) -> None:
        self.cancelled = False
        self.metadata: object = None

    def __aiter__(self) -> AsyncIterator[pb.WatchEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[pb.WatchEvent]:
        yield pb.WatchEvent(type="synced")
        await asyncio.Event().wait()

    def cancel(self) -> None:
        self.cancelled = True


async def test_closing_a_stream_or_cancelling_its_reader_cancels_the_grpc_call():
    api = Api("unix:/nowhere", lambda address: None)  # type: ignore[arg-type,return-value]
    calls: list[FakeCall] = []

    def method(request, metadata):
        calls.append(FakeCall())
        calls[-1].metadata = metadata
        return calls[-1]

    closed = _rows(api._stream(method, pb.ListJobsRequest(), "tok"))
    assert await closed.__anext__() == ("synced", "", None)
    await closed.aclose()                                  # the browser went: the relay closes it
    read = _rows(api._stream(method, pb.ListJobsRequest(), "tok"))
    assert await read.__anext__() == ("synced", "", None)
    reader = asyncio.ensure_future(read.__anext__())
    await asyncio.sleep(0)
    reader.cancel()                                        # the relay cancels its pump
    await asyncio.gather(reader, return_exceptions=True)
    assert [c.cancelled for c in calls] == [True, True]
    assert calls[0].metadata == (("authorization", "Bearer tok"),)
