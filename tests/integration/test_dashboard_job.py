"""The Jobs list's new columns and the Job page as a user meets them: Debian's chromium, driven by
Selenium, against a real three-node cluster (TLS with client certificates and ACL on).

The list shows each job's schedule in words and its next run, filters by pool (as `schedctl job
list --pool` and the SDK do) and links each job to its page. A job whose runs miss their starting
deadline (no worker serves its pool) shows its skipped instants, with the reason, on the page's
timeline and ledger. A trigger with a parameter from the page is a run that `schedctl run list`
shows with that parameter; a backfill is counted (the API's dry run) before it is confirmed. A
token that may only read sees no action, and its forged POST (with a valid CSRF token) is refused
by the API with 403. Screenshots are kept in the test's tmp dir (screens/).
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import AsyncClient, job_spec
from tests.integration.test_dashboard import browser, click, job_names, shot
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration

By = pytest.importorskip("selenium.webdriver.common.by").By


@pytest.fixture
def job_cluster(cluster_factory):
    c = cluster_factory(size=3)
    c.start()
    c.bootstrap()
    c.wait_leader(timeout=60)
    c.wait_feature_level(timeout=60)        # run parameters need level 7
    with c.client(timeout=30) as cl:
        cl.acl_put_policy("team-a-read", {"team:a": ["read"]})
        c.reader_token = cl.acl_create_token(policies=["team-a-read"], description="reads team a").secret
        cl.put_job(job_spec("a-nightly", schedule="30 2 * * *", tz="Europe/Berlin", team="a", command="true",
                            pool="nowhere", params={"region": "eu"}))
        # no worker serves "nowhere": each run misses its 1 s starting deadline and is skipped
        cl.put_job(job_spec("a-fast", schedule="@every 2s", team="a", command="true", pool="nowhere",
                            starting_deadline=1))
        cl.put_job(job_spec("b-gpu", schedule="*/5 * * * *", team="b", command="true", pool="gpu"))
        # 02:30 on the last Sunday of March does not exist in Berlin: the fire is shifted, and says so
        cl.put_job(job_spec("b-spring", schedule="30 2 * 3 L0", tz="Europe/Berlin", team="b", command="true",
                            pool="gpu"))
    return c


def rows(driver, table: str) -> list[list[str]]:
    """The cells' text of a table's rows, read in one script (the page redraws them as it follows
    the cluster, so elements found one by one may go stale in between)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'))"
        ".map(tr => Array.from(tr.cells).map(td => td.innerText))", table)


def cells(driver, job: str) -> list[str]:
    return next((r for r in rows(driver, "#jobs") if r[0].split("\n")[0] == job), [])


def ledger(driver) -> list[list[str]]:
    return rows(driver, "#instants")


def test_job_list_columns_job_page_timeline_actions_and_a_read_only_token(job_cluster, tmp_path):
    c, screens = job_cluster, tmp_path / "screens"
    driver = browser()
    try:
        driver.get(schedctl(c, "dashboard", "--no-open").stdout.strip())
        wait_until(lambda: job_names(driver) == ["a-fast", "a-nightly", "b-gpu", "b-spring"], timeout=30,
                   what="the jobs")

        # The list: the schedule in words (above the expression), the next run and in how long.
        wait_until(lambda: "at 02:30 every day, Europe/Berlin" in "".join(cells(driver, "a-nightly")[2:3]), timeout=30,
                   what="the schedule in words")
        schedule, next_run = cells(driver, "a-nightly")[2:4]
        assert "30 2 * * *" in schedule and "in " in next_run and next_run.split("\n")[0].endswith("Z")
        assert cells(driver, "a-fast")[2].startswith("every 2 seconds")
        wait_until(lambda: "K" in cells(driver, "a-fast")[6], timeout=30, what="a skipped run in the strip")
        title = driver.execute_script("return document.querySelector('#jobs a.run-skipped').title")
        assert title.startswith("skipped, scheduled ")
        shot(driver, screens, "job-list")

        # The pool filter, server-side; the same from schedctl and the SDK.
        driver.find_element(By.ID, "f-pool").send_keys("gpu")
        wait_until(lambda: job_names(driver) == ["b-gpu", "b-spring"], timeout=30, what="the jobs of pool gpu")
        listed = json.loads(schedctl(c, "job", "list", "--pool", "gpu", "-o", "json").stdout)
        assert [j["spec"]["name"] for j in listed] == ["b-gpu", "b-spring"]
        with c.client(timeout=30) as cl:
            assert [j.spec.name for j in cl.list_jobs(pool="nowhere")] == ["a-fast", "a-nightly"]
            [fast] = [j for j in cl.list_jobs(pool="nowhere", recent=20) if j.spec.name == "a-fast"]
            assert fast.recent and fast.schedule_words == "every 2 seconds"
        assert "In words:" in schedctl(c, "job", "get", "a-nightly").stdout

        async def listed_async() -> list[str]:
            async with AsyncClient(c.cluster_arg, security=c.security(), timeout=30) as ac:
                return [j.spec.name async for j in ac.list_jobs(pool="gpu", recent=5)]
        assert asyncio.run(listed_async()) == ["b-gpu", "b-spring"]
        driver.find_element(By.ID, "f-pool").clear()
        wait_until(lambda: len(job_names(driver)) == 4, timeout=30, what="every job again")

        # The job page of a-fast: skipped instants on the timeline and in the ledger, with why.
        driver.execute_script("document.querySelector(\"#jobs a[href='/jobs/a-fast']\").click()")
        wait_until(lambda: driver.current_url.endswith("/jobs/a-fast"), timeout=30, what="the job's page")
        wait_until(lambda: any(r[3] == "skipped-deadline" for r in ledger(driver)), timeout=30,
                   what="a skipped instant in the ledger")
        skipped = next(r for r in ledger(driver) if r[3] == "skipped-deadline")
        assert skipped[0] == "K" and "starting deadline" in skipped[4]
        lanes = driver.execute_script("return Array.from(document.querySelectorAll('#timeline-svg .lane-label'))"
                                      ".map(e => e.textContent)")
        assert "K Skipped" in lanes
        assert "Skipped (" in driver.find_element(By.ID, "legend").text
        driver.execute_script("document.getElementById('instant-count').scrollIntoView()")
        shot(driver, screens, "job-timeline")

        # a-nightly: words, next fires in Berlin and UTC, the spec raw, a trigger with a parameter.
        driver.get(c.http_url("n1", "/jobs/a-nightly"))
        wait_until(lambda: driver.find_element(By.ID, "words").text == "at 02:30 every day, Europe/Berlin",
                   timeout=30, what="the job page")
        wait_until(lambda: len(rows(driver, "#fires")) == 10, timeout=30, what="the next ten fires")
        first = rows(driver, "#fires")[0]
        assert first[1].endswith(("02:30:00 CET", "02:30:00 CEST")) and first[2].endswith("Z")
        click(driver, By.ID, "yaml-toggle")
        assert "schedule: 30 2 * * *" in driver.find_element(By.ID, "raw").text
        click(driver, By.ID, "yaml-toggle")
        region = driver.find_element(By.CSS_SELECTOR, "input[data-param='region']")
        assert region.get_attribute("value") == "eu"
        region.clear()
        region.send_keys("us")
        click(driver, By.ID, "trigger")
        wait_until(lambda: driver.find_element(By.ID, "action-result").text.startswith("triggered: a-nightly@"),
                   timeout=30, what="the trigger's run")
        run_id = driver.find_element(By.CSS_SELECTOR, "#action-result a").text
        runs = json.loads(schedctl(c, "run", "list", "a-nightly", "-o", "json").stdout)
        assert [(r["id"], r["params"]) for r in runs] == [(run_id, {"region": "us"})]
        wait_until(lambda: any(r[0] == run_id and r[-1] == "region=us" for r in rows(driver, "#runs")),
                   timeout=30, what="the run in the runs table")

        # Pause and resume, each shown only while it applies.
        click(driver, By.ID, "pause")
        wait_until(lambda: driver.find_element(By.ID, "paused-tag").is_displayed()
                   and driver.find_element(By.ID, "resume").is_displayed(), timeout=30, what="paused")
        with c.client(timeout=30) as cl:
            assert cl.get_job("a-nightly").paused
        click(driver, By.ID, "resume")
        wait_until(lambda: driver.find_element(By.ID, "pause").is_displayed(), timeout=30, what="resumed")

        # Backfill: counted first (the API's dry run), then confirmed.
        day = (datetime.now(ZoneInfo("Europe/Berlin")) - timedelta(days=5)).strftime("%Y-%m-%d")
        driver.find_element(By.ID, "bf-from").send_keys(f"{day} 00:00")
        driver.find_element(By.ID, "bf-to").send_keys(f"{day} 23:59")
        click(driver, By.ID, "bf-count")
        wait_until(lambda: driver.find_element(By.ID, "bf-result").text.startswith("1 instant in the range"),
                   timeout=30, what="the dry run's count")
        shot(driver, screens, "job-page")
        click(driver, By.ID, "bf-confirm")
        wait_until(lambda: driver.find_element(By.ID, "bf-result").text.startswith("backfilled: 1 new run"),
                   timeout=30, what="the backfill")

        # A fire that spring's clock change shifts says so, in Berlin time and UTC.
        driver.get(c.http_url("n1", "/jobs/b-spring"))
        wait_until(lambda: rows(driver, "#fires")[:1] and rows(driver, "#fires")[0][4] != "", timeout=30,
                   what="the spring job's fires")
        spring = rows(driver, "#fires")[0]
        assert spring[1].endswith("03:00:00 CEST") and spring[2].endswith("01:00:00Z"), spring
        assert spring[4] == "shifted: 02:30 does not exist (clocks jump 02:00 -> 03:00)"
        assert driver.find_element(By.ID, "words").text == "at 02:30 on the last Sunday of March, Europe/Berlin"
        shot(driver, screens, "job-dst")

        # A token that may only read team a: no actions; a forged POST is the API's 403.
        click(driver, By.ID, "logout")
        wait_until(lambda: "/login" in driver.current_url, timeout=30, what="logged out")
        driver.get(c.http_url("n1", "/jobs"))          # off /login: the link differs from it by its fragment only
        wait_until(lambda: "/login?next=" in driver.current_url, timeout=30, what="no session")
        driver.get(schedctl(c, "dashboard", "--no-open", "--token", c.reader_token).stdout.strip())
        wait_until(lambda: len(job_names(driver)) == 2, timeout=30, what="team a's jobs")
        driver.get(c.http_url("n1", "/jobs/a-nightly"))
        wait_until(lambda: driver.find_element(By.ID, "words").text.startswith("at 02:30"), timeout=30,
                   what="the job page, read only")
        assert not driver.find_elements(By.ID, "trigger") and not driver.find_elements(By.ID, "pause")
        assert "may only read" in driver.find_element(By.ID, "no-actions").text
        forged = driver.execute_script(
            "return window.schedd.post('/api/jobs/a-nightly/trigger', {params: {region: 'x'}})"
            ".then(() => 'accepted', e => e.status + ' ' + e.message)")
        assert forged.startswith("403 ") and "trigger" in forged, forged
        shot(driver, screens, "job-read-only")
        assert len(json.loads(schedctl(c, "run", "list", "a-nightly", "-o", "json").stdout)) == 2   # trigger, backfill
    finally:
        driver.quit()
