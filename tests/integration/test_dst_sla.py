"""DST policies and SLAs on a real 3-node cluster: `schedctl job next` for a Berlin job across the
transitions (no waiting for real DST), and an SLA miss recorded once, shown by the SDK and
schedctl, counted in metrics and POSTed once to a webhook."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from schedd.core.schedule import parse_time
from schedd_client import job_spec
from schedd.ports.fakes import wait_until
from tests.support.cluster import metric_total, schedctl

pytestmark = pytest.mark.integration

# 02:30 on the last Sunday of March and of October: in Europe/Berlin always inside the
# spring-forward gap (02:00 -> 03:00) and the repeated fall-back hour, whatever year it is now.
BERLIN_DST_DAYS = "30 2 * 3,10 L0"


def test_job_next_shows_dst_effects_for_a_berlin_job(cluster_factory, tmp_path):
    c = cluster_factory(size=3)
    c.start()
    leader = c.wait_leader(timeout=60)
    follower = next(n.grpc for n in c.nodes.values() if n.id != leader)

    # defaults from a YAML file, the other policies from flags
    f = tmp_path / "jobs.yaml"
    f.write_text(yaml.safe_dump({"name": "berlin-default", "schedule": BERLIN_DST_DAYS,
                                 "timezone": "Europe/Berlin", "command": "true"}))
    schedctl(c, "job", "create", "-f", str(f), at=follower)
    schedctl(c, "job", "create", "berlin-skip-both", "--schedule", BERLIN_DST_DAYS,
             "--tz", "Europe/Berlin", "--dst-gap", "skip", "--dst-fold", "both", "--command", "true", at=follower)
    schedctl(c, "job", "create", "berlin-last", "--schedule", BERLIN_DST_DAYS,
             "--tz", "Europe/Berlin", "--dst-fold", "last", "--command", "true", at=follower)

    out = json.loads(schedctl(c, "job", "next", "berlin-default", "--count", "4", "-o", "json", at=follower).stdout)
    assert (out["timezone"], out["dst_gap"], out["dst_fold"]) == ("Europe/Berlin", "shift", "first")
    fires = out["fires"]
    assert len(fires) == 4
    for fire in fires:
        local, utc = fire["local"], fire["utc"]
        assert parse_time(local) == parse_time(utc) == fire["time_ms"]
        if local[5:7] == "03":        # March: 02:30 does not exist, shifted to 03:00 CEST
            assert local[11:] == "03:00:00+02:00" and utc[11:] == "01:00:00Z"
            assert fire["dst"].startswith("shifted: 02:30 does not exist")
        else:                         # October: the first 02:30 (CEST)
            assert local[5:7] == "10" and local[11:] == "02:30:00+02:00" and utc[11:] == "00:30:00Z"
            assert fire["dst"] == "repeated: 02:30 occurs twice, this is the 1st (CEST)"
    assert {f["local"][5:7] for f in fires} == {"03", "10"}

    out = json.loads(schedctl(c, "job", "next", "berlin-skip-both", "--count", "4", "-o", "json", at=follower).stdout)
    fires = out["fires"]
    # no March fire at all; each October day twice, an hour apart, 1st then 2nd occurrence
    assert [f["local"][5:7] for f in fires] == ["10"] * 4
    assert [f["local"][11:] for f in fires] == ["02:30:00+02:00", "02:30:00+01:00"] * 2
    assert [f["utc"][11:] for f in fires] == ["00:30:00Z", "01:30:00Z"] * 2
    assert fires[1]["time_ms"] - fires[0]["time_ms"] == 3_600_000
    assert [f["dst"].rpartition(", ")[2] for f in fires] == ["this is the 1st (CEST)",
                                                             "this is the 2nd (CET)"] * 2

    out = json.loads(schedctl(c, "job", "next", "berlin-last", "--count", "4", "-o", "json", at=follower).stdout)
    october = [f for f in out["fires"] if f["local"][5:7] == "10"]
    assert october and all(f["local"][11:] == "02:30:00+01:00" and "2nd (CET)" in f["dst"] for f in october)

    table = schedctl(c, "job", "next", "berlin-skip-both", "--count", "2", at=follower).stdout
    assert "LOCAL (Europe/Berlin)" in table and "UTC" in table
    assert "DST: gap skip, fold both (named on the job)" in table
    assert "02:30:00+02:00" in table and "repeated: 02:30 occurs twice" in table
    details = schedctl(c, "job", "get", "berlin-skip-both", at=follower).stdout
    assert "gap skip, fold both (named on the job)" in details

    # an hour field that repeats follows real time by default, and `job get` says so
    schedctl(c, "job", "create", "berlin-hourly", "--schedule", "@hourly", "--tz", "Europe/Berlin",
             "--command", "true", at=follower)
    details = schedctl(c, "job", "get", "berlin-hourly", at=follower).stdout
    assert "gap skip, fold both (default: the hour repeats, so it follows real time)" in details
    out = json.loads(schedctl(c, "job", "next", "berlin-hourly", "--count", "1", "-o", "json", at=follower).stdout)
    assert (out["dst_gap"], out["dst_fold"]) == ("skip", "both")

    bad = schedctl(c, "job", "create", "bad", "--schedule", "0 2 * * *", "--command", "x",
                   "--dst-fold", "second", check=False, at=follower)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    bad = schedctl(c, "job", "create", "bad", "--schedule", "0 2 * * *", "--command", "x",
                   "--sla-by", "25:00", check=False, at=follower)
    assert bad.returncode == 1 and "sla.by must be a wall time HH:MM" in bad.stderr
    assert schedctl(c, "job", "get", "bad", check=False, at=follower).returncode == 1


class _Receiver(BaseHTTPRequestHandler):
    posts: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).posts.append((self.path, json.loads(body)))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    _Receiver.posts = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/sla", _Receiver.posts
    server.shutdown()
    server.server_close()


def test_sla_miss_is_recorded_once_shown_counted_and_posted(cluster_factory, receiver):
    url, posts = receiver
    c = cluster_factory(size=3, scheduler={"lease_ms": 3000},
                        webhook_allow=("127.0.0.1",))        # the receiver is on loopback
    c.start()
    c.wait_leader(timeout=60)
    c.start_worker("w1", slots=2, drain_grace_s=5)
    client = c.client(timeout=30)
    wait_until(lambda: client.list_workers().workers, timeout=30, what="the worker to connect")
    client.put_job(job_spec("slow", command="sleep 4; echo done", sla={"within": "1s", "webhook": url}))
    client.put_job(job_spec("quick", command="true", sla={"within": "60s", "webhook": url}))
    slow = client.trigger_job("slow").id
    quick = client.trigger_job("quick").id

    ex = wait_until(lambda: (e := client.get_execution(slow)).events and e, timeout=60,
                    what="the SLA miss to be recorded")
    [ev] = ex.events
    assert ev.kind == "sla_missed" and "within 1s" in ev.message
    # detected at the deadline while it runs (or, on a loaded machine, before it even started;
    # or, on a badly stalled leader, when it ends late)
    assert any(f in ev.message for f in ("still RUNNING at the deadline", "still SCHEDULED at the deadline",
                                         "after the deadline")), ev.message
    ex = wait_until(lambda: (e := client.get_execution(slow)).state == "SUCCEEDED" and e, timeout=60,
                    what="slow to finish")
    assert [e.kind for e in ex.events] == ["sla_missed"]       # finishing late adds nothing
    q = wait_until(lambda: (e := client.get_execution(quick)).state == "SUCCEEDED" and e, timeout=60,
                   what="quick to finish")
    assert not q.events

    wait_until(lambda: posts, timeout=30, what="the webhook POST")
    [(path, body)] = posts
    assert path == "/sla"
    assert body["job"] == "slow" and body["execution_id"] == slow and body["message"] == ev.message
    assert body["scheduled_time"].endswith("Z") and body["deadline"].endswith("Z")
    assert parse_time(body["deadline"]) - parse_time(body["scheduled_time"]) == 1000
    assert wait_until(lambda: metric_total(c, "schedd_sla_missed_total", 'job_name="slow"') == 1, timeout=30,
                      what="the miss to be counted")
    assert metric_total(c, "schedd_sla_missed_total", 'job_name="quick"') == 0

    listing = schedctl(c, "run", "list").stdout
    [slow_row] = [line for line in listing.splitlines() if line.startswith(slow)]
    [quick_row] = [line for line in listing.splitlines() if line.startswith(quick)]
    assert "SLA" in listing.splitlines()[0] and "! missed" in slow_row and "! missed" not in quick_row
    details = schedctl(c, "run", "get", slow).stdout
    assert "Events:" in details and "sla_missed" in details and "within 1s" in details
    got = json.loads(schedctl(c, "run", "get", slow, "-o", "json").stdout)
    assert got["events"][0]["kind"] == "sla_missed" and got["events"][0]["time"]
    job = schedctl(c, "job", "get", "slow").stdout
    assert "within 1s" in job and url in job

    # still exactly one POST and one event after another run went through the leader's loop
    again = client.trigger_job("quick").id
    wait_until(lambda: client.get_execution(again).state == "SUCCEEDED", timeout=60, what="quick again")
    assert len(posts) == 1 and len(client.get_execution(slow).events) == 1
    client.close()
