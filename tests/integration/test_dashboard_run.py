"""The Run page and live pages as a user meets them: Debian's chromium, driven by Selenium,
against a real three-node cluster (TLS and ACL on) and one worker.

A run's page shows its log growing while the job prints (the API's log stream, relayed as
server-sent events), the attempt's worker and fencing token, and how it ended in words; the
cancel button ends a running run CANCELLED (as `schedctl run get` then says); the jobs page
shows a new run within 2 s of a trigger although it reloads by itself only every 30 s (the live
stream says when); and pages opened and left leave no stream open on the node (its /metrics).
Screenshots are kept in the test's tmp dir (screens/).
"""

from __future__ import annotations

import json
import re
import time
from urllib.parse import quote

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from schedd_client.errors import SchedError
from tests.integration.test_dashboard import browser, click, log_in, cluster, redrawn, shot  # noqa: F401  (cluster: a fixture)
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration
from selenium.webdriver.common.by import By  # noqa: E402

# A line every 0.3 s until the test has seen the log grow and creates STOP (at most a minute).
TALKER = 'i=0; while [ ! -e "$STOP" ] && [ $i -lt 200 ]; do i=$((i+1)); echo line $i; sleep 0.3; done; exit 3'
SLEEPER = "echo started; sleep 120"


@pytest.fixture
def live_cluster(cluster, tmp_path):
    """test_dashboard's cluster (its jobs wait for a pool no worker serves), with jobs that run
    on the worker w1; `cluster.stop_talking` ends the talker's loop."""
    cluster.stop_talking = tmp_path / "stop-talking"
    with cluster.client(timeout=30) as cl:
        for name, command in (("talker", TALKER), ("sleeper", SLEEPER), ("quick", "true")):
            cl.put_job(job_spec(name, team="a", command=command, env={"STOP": str(cluster.stop_talking)}))
    cluster.start_worker("w1", slots=2)
    return cluster


@redrawn
def text(driver, css: str) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found else ""


@redrawn
def attempt_cells(driver) -> list[str]:
    rows = driver.find_elements(By.CSS_SELECTOR, "#attempts tbody tr")
    return [td.text for td in rows[-1].find_elements(By.TAG_NAME, "td")] if rows else []


@redrawn
def field(driver, label: str) -> str:
    """The value of the run's field `label` (the page's definition list)."""
    labels = driver.find_elements(By.CSS_SELECTOR, "#fields dt")
    values = driver.find_elements(By.CSS_SELECTOR, "#fields dd")
    return next((v.text for k, v in zip(labels, values) if k.text == label), "")


def log_lines(driver) -> int:
    return len(re.findall(r"^line \d+$", text(driver, "#log"), re.M))


def metric(c, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", c.http_get("n1", "/metrics"), re.M)
    assert match, f"{name} not on n1's /metrics"
    return float(match.group(1))


def test_run_page_live_log_cancel_and_pages_live_without_polling(live_cluster, tmp_path):
    c, screens = live_cluster, tmp_path / "screens"
    driver = browser()
    try:
        log_in(driver, schedctl(c, "dashboard", "--no-open").stdout.strip(), what="logged in")

        # A run's log grows on its page while the job prints a line every 0.3 s (until told to stop).
        with c.client(timeout=30) as cl:
            run = cl.trigger_job("talker")
        driver.get(c.http_url("n1", "/runs/" + quote(run.id, safe="")))
        wait_until(lambda: log_lines(driver) >= 2, timeout=20, what="the first lines, live")
        first = log_lines(driver)
        assert field(driver, "State") == "RUNNING"
        wait_until(lambda: log_lines(driver) >= first + 3, timeout=10, what="more lines, while it runs")
        assert field(driver, "State") == "RUNNING", "the log grew while the run ran"
        cells = attempt_cells(driver)
        got = json.loads(schedctl(c, "run", "get", run.id, "-o", "json").stdout)
        attempt = got["attempts"][-1]
        assert cells[2] == "w1" == attempt["worker"] and cells[3] == str(attempt["fencing_token"])
        assert cells[7] == "running"
        shot(driver, screens, "run-live")

        # After it ends: the whole log, and how it ended in words.
        c.stop_talking.touch()
        wait_until(lambda: field(driver, "State") == "FAILED", timeout=30, what="the run to end FAILED")
        wait_until(lambda: attempt_cells(driver)[7] == "exit status 3", timeout=10, what="the exit in words")
        printed = schedctl(c, "run", "logs", run.id).stdout.splitlines()
        assert printed[-1] == f"line {len(printed)}" and len(printed) >= first + 3
        wait_until(lambda: log_lines(driver) == len(printed), timeout=10, what="the whole log")
        assert field(driver, "Job") == "talker"
        assert driver.find_element(By.CSS_SELECTOR, "#fields a").get_attribute("href").endswith("/jobs/talker")
        assert driver.find_element(By.ID, "retry").is_displayed()
        assert not driver.find_element(By.ID, "cancel").is_displayed()
        shot(driver, screens, "run-ended")

        # Cancel from the page ends a running run CANCELLED.
        with c.client(timeout=30) as cl:
            sleeper = cl.trigger_job("sleeper")
        driver.get(c.http_url("n1", "/runs/" + quote(sleeper.id, safe="")))
        wait_until(lambda: "started" in text(driver, "#log"), timeout=20, what="the sleeper running")
        click(driver, By.ID, "cancel")
        wait_until(lambda: field(driver, "State") == "CANCELLED", timeout=30, what="CANCELLED on the page")
        got = json.loads(schedctl(c, "run", "get", sleeper.id, "-o", "json").stdout)
        assert got["state"] == "CANCELLED"
        assert attempt_cells(driver)[7].startswith("killed by SIG"), attempt_cells(driver)
        assert text(driver, "#action-error") == ""
        shot(driver, screens, "run-cancelled")

        # The jobs page hears of a new run through its stream: no reload for a quiet while (it
        # would poll every 2 s), then the runs count within 2 s of a trigger.
        driver.get(c.http_url("n1", "/jobs"))
        runs = redrawn(lambda: next((r.find_elements(By.TAG_NAME, "td")[-1].text      # its Runs column
                                     for r in driver.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")
                                     if r.text.startswith("quick")), ""))
        wait_until(lambda: runs() == "0", timeout=30, what="quick's row, no run yet")
        loads = "return performance.getEntriesByType('resource').filter(e => e.name.includes('/api/jobs')).length"
        wait_until(lambda: driver.execute_script(loads) >= 2, timeout=10, what="the load on `ready`")
        quiet = driver.execute_script(loads)
        time.sleep(2.5)      # not a wait: a window in which a 2 s poll would have shown
        assert driver.execute_script(loads) == quiet, "the page reloaded with nothing changed"
        with c.client(timeout=30) as cl:
            cl.trigger_job("quick")
        triggered = time.monotonic()
        wait_until(lambda: runs() == "1", timeout=10, what="the new run on the jobs page")
        assert time.monotonic() - triggered < 2.0, "the page heard of the run late"
        links = redrawn(lambda: [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "#jobs tbody a")])()
        assert any(h.endswith("/runs/" + quote(sleeper.id, safe="")) for h in links), links
        size = driver.execute_script("return performance.getEntriesByType('resource')"
                                     ".filter(e => e.name.includes('/api/jobs')).pop().transferSize")
        print(f"one live update of the jobs page (3 jobs): a 24-byte event, then GET /api/jobs: {size} bytes")
        shot(driver, screens, "jobs-live")

        # Team a's token may retry (trigger) but not cancel: only Retry shows; a cancel forced
        # from the page gets the API's refusal, word for word as the SDK gets it.
        log_in(driver, schedctl(c, "dashboard", "--no-open", "--token", c.team_token).stdout.strip(), what="team a logged in")
        driver.get(c.http_url("n1", "/runs/" + quote(run.id, safe="")))
        wait_until(lambda: field(driver, "State") == "FAILED", timeout=30, what="the talker's run, as team a")
        assert driver.find_element(By.ID, "retry").is_displayed()
        assert not driver.find_element(By.ID, "cancel").is_displayed()
        driver.execute_script("document.getElementById('cancel').click()")
        wait_until(lambda: text(driver, "#action-error"), timeout=15, what="the API's refusal on the page")
        with c.client(timeout=30, security=c.security(token=c.team_token)) as cl:
            with pytest.raises(SchedError) as refusal:
                cl.cancel_execution(run.id)
        assert refusal.value.code.name == "PERMISSION_DENIED"
        assert text(driver, "#action-error") == refusal.value.message
        shot(driver, screens, "run-refused")

        # Pages opened and left (twenty: tests/unit/test_dashboard_live.py): the node's watches and
        # the dashboard's streams go back to 0.
        for path in ("/runs/" + quote(run.id, safe=""), "/cluster"):
            driver.get(c.http_url("n1", path))
        wait_until(lambda: metric(c, "schedd_watches") >= 1, timeout=15, what="the last page's watch")
        driver.get("about:blank")
        wait_until(lambda: metric(c, "schedd_watches") == 0 and metric(c, "schedd_dashboard_live_streams") == 0,
                   timeout=15, what="no stream left open on n1")
    finally:
        driver.quit()
