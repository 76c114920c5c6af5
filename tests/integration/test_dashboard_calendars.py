"""Calendars, explain and the forecast in the dashboard as a user meets them: Debian's chromium,
driven by Selenium, against a real three-node cluster (TLS, ACL on) with a worker.

A calendar holds today and tomorrow (UTC); a job that skips it has its instants skipped on the
page's ledger with the calendar's name and entry, and its next fires marked the same way (what
`schedctl job get --next` shows); a timeline mark, activated with the keyboard, explains the
instant (the API's Explain). A job that runs has, in the explain panel of a ran instant, its
attempt's fencing token. The Calendars page lists the calendar with its next dates and the
blackout; the Forecast page shows a peak of the worker's pool against its slots and how many
instants the calendar leaves out, as `schedctl forecast` says. Screenshots: the test's tmp dir.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, UTC

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from schedd_client.calendars import calendar_spec
from schedd.core.schedule import format_ms
from tests.integration.test_dashboard import browser, click, redrawn, shot
from tests.integration.test_dashboard_job import job_cluster  # noqa: F401  (the fixture)
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration

By = pytest.importorskip("selenium.webdriver.common.by").By
Keys = pytest.importorskip("selenium.webdriver.common.keys").Keys
HOUR = 3_600_000


@pytest.fixture
def cal_cluster(job_cluster):
    """The Job page test's cluster (TLS, ACL, at the feature level calendars need), with a worker
    for pool p, a calendar holding today and tomorrow, three jobs of team a and a coming blackout."""
    c = job_cluster
    c.start_worker("w1", slots=2, pool="p")
    today = datetime.now(UTC).date()
    c.days = (today.isoformat(), (today + timedelta(days=1)).isoformat())
    with c.client(timeout=30) as cl:
        wait_until(lambda: len(cl.list_workers().workers) == 1, timeout=30, what="the worker")
        cl.put_calendar(calendar_spec("test-holidays", team="a", description="two days off",
                                      dates=[f"{c.days[0]}=Test Day", f"{c.days[1]}=Day After"]))
        for name, schedule, skips in (("a-held", "@every 2s", True), ("a-daily", "0 9 * * *", True),
                                      ("a-tick", "@every 2s", False)):
            spec = job_spec(name, schedule=schedule, team="a", command="true", pool="p")
            if skips:
                spec.calendar.skip.append("test-holidays")
            cl.put_job(spec)
        cl.put_job(job_spec("a-window", window="01:00-05:00", team="a", command="true", pool="p"))
        now = int(datetime.now(UTC).timestamp() * 1000)
        cl.put_blackout("freeze", start_ms=now + HOUR, end_ms=now + 2 * HOUR, team="a", reason="release")
    return c


def rows(driver, table: str) -> list[list[str]]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'))"
        ".map(tr => Array.from(tr.cells).map(td => td.innerText))", table)


@redrawn
def keyboard_explain(driver) -> int:
    """Focus the timeline's tab stop, press the left arrow and Enter, as a keyboard user would;
    the instant (ms) of the mark explained."""
    assert driver.execute_script(                 # one read: the page may redraw between two
        "var m = document.querySelectorAll('#timeline .mark');"
        "return m.length > 1 && m[m.length - 1].getAttribute('tabindex') === '0' &&"
        " document.querySelectorAll('#timeline .mark[tabindex=\"0\"]').length === 1")
    stop = driver.find_element(By.CSS_SELECTOR, '#timeline .mark[tabindex="0"]')
    driver.execute_script("arguments[0].focus()", stop)
    stop.send_keys(Keys.ARROW_LEFT)
    focused = driver.switch_to.active_element
    chosen = int(focused.get_attribute("data-t"))
    focused.send_keys(Keys.ENTER)
    return chosen


def panel(driver) -> str:
    return driver.execute_script("var p = document.getElementById('explain'); return p.hidden ? '' : p.innerText")


def test_job_page_calendars_explain_the_calendars_and_forecast_pages(cal_cluster, tmp_path):
    c, screens = cal_cluster, tmp_path / "screens"
    today, tomorrow = c.days
    driver = browser()
    try:
        driver.get(schedctl(c, "dashboard", "--no-open").stdout.strip())
        wait_until(lambda: driver.find_elements(By.ID, "nav-calendars") and driver.find_elements(By.ID, "nav-forecast"),
                   timeout=30, what="the Calendars and Forecast navigation")

        # The job that skips the calendar: its instants are skipped naming the calendar and entry.
        driver.get(driver.current_url.split("/jobs")[0] + "/jobs/a-held")
        wait_until(lambda: any(f"calendar test-holidays: {today} Test Day" in r[4] for r in rows(driver, "#instants")),
                   timeout=60, what="a skipped instant naming the calendar")
        spec = driver.find_element(By.ID, "spec").text
        assert "skip test-holidays" in spec and "skipped (on_blackout: skip)" in spec
        assert "test-holidays (skip)" in driver.find_element(By.ID, "job-calendars").text
        fires = rows(driver, "#fires")
        assert fires and all("skipped: calendar test-holidays: " in r[5] for r in fires), fires
        # the timeline is one tab stop (its newest mark); the left arrow moves to the one before,
        # and Enter explains it
        wait_until(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#timeline .lane-skipped .mark")) >= 2,
                   timeout=30, what="two skipped marks")
        chosen = keyboard_explain(driver)
        wait_until(lambda: format_ms(chosen).replace("T", " ") in panel(driver), timeout=30, what="the explain panel")
        assert "calendar test-holidays" in panel(driver) and "skipped" in panel(driver)
        shot(driver, screens, "job-calendar-skipped")

        # The daily job: its next fires say which are skipped, with the entry of each date.
        driver.get(driver.current_url.split("/jobs")[0] + "/jobs/a-daily")
        wait_until(lambda: any(f"calendar test-holidays: {tomorrow} Day After" in r[5] for r in rows(driver, "#fires")),
                   timeout=30, what="tomorrow's fire marked skipped")
        fires = rows(driver, "#fires")
        assert any(r[5] == "runs" for r in fires)               # the days after are not in the calendar
        shot(driver, screens, "job-next-fires")

        # A window job: its window in the spec, and each next fire's window with its placed second.
        driver.get(driver.current_url.split("/jobs")[0] + "/jobs/a-window")
        wait_until(lambda: ", placed " in (rows(driver, "#fires") or [[""] * 6])[0][5], timeout=60,
                   what="the next fire's placed second")
        assert "01:00–05:00 UTC" in driver.find_element(By.ID, "spec").text
        assert rows(driver, "#fires")[0][5].startswith("window ")

        # The job that runs: the explain panel of a ran instant names its attempt's fencing token.
        with c.client(timeout=30) as cl:
            ran = wait_until(lambda: next((e for e in cl.list_executions("a-tick") if e.state == "SUCCEEDED"), None),
                             timeout=60, what="a run of a-tick")
        token = str(ran.attempts[0].fencing_token)
        driver.get(driver.current_url.split("/jobs")[0] + "/jobs/a-tick")
        button = f'#instants button[data-t="{ran.scheduled_ms}"]'
        wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, button), timeout=60, what="the ran instant's row")
        click(driver, By.CSS_SELECTOR, button)
        wait_until(lambda: f"fencing token: {token}" in panel(driver), timeout=30, what="the fencing token")
        text = panel(driver)
        assert "ran" in text and "log index" in text and "term" in text and "sla" in text
        shot(driver, screens, "job-explain-ran")
        driver.set_window_size(420, 900)                 # a phone: the panel reads, its table scrolls
        driver.execute_script("document.getElementById('explain').scrollIntoView()")
        shot(driver, screens, "job-explain-phone")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 420   # no sideways scroll
        driver.set_window_size(1400, 900)
        click(driver, By.ID, "explain-close")
        assert panel(driver) == ""

        # The Calendars page: the calendar, its next dates and its user; the blackout.
        click(driver, By.ID, "nav-calendars")
        wait_until(lambda: any(r[0].startswith("test-holidays") for r in rows(driver, "#calendars")), timeout=30,
                   what="the calendar listed")
        (cal,) = [r for r in rows(driver, "#calendars") if r[0].startswith("test-holidays")]
        assert cal[1] == "a" and "2 dates" in cal[2] and f"{today} Test Day" in cal[3] and "a-held" in cal[4]
        (freeze,) = [r for r in rows(driver, "#blackouts") if r[0] == "freeze"]
        assert freeze[3] == "coming" and "team a" in freeze[4] and freeze[5] == "release"
        shot(driver, screens, "calendars")

        # The Forecast page: by pool, the worker's pool has a peak against its 2 slots, and the
        # instants the calendar leaves out are counted (a-held's: one every 2 s of the day).
        click(driver, By.ID, "nav-forecast")
        driver.find_element(By.ID, "fc-by").send_keys("pool")
        click(driver, By.ID, "fc-go")
        wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, "#group-p .peak-seconds tbody tr td:nth-child(3)"),
                   timeout=60, what="the pool's peaks")
        group = driver.find_element(By.ID, "group-p").text
        assert "Pool p" in group and "2 worker slots" in group
        peaks = rows(driver, "#group-p .peak-seconds")
        assert peaks and peaks[0][1] and ("slots" in peaks[0][2]) and "a-tick" in peaks[0][3], peaks
        assert "Calendars and blackouts:" in group and "skipped" in group
        shot(driver, screens, "forecast")
        driver.set_window_size(420, 900)                 # a phone: the page still reads
        shot(driver, screens, "forecast-phone")
    finally:
        driver.quit()

    # `schedctl forecast` says the same: how many instants calendars and blackouts leave out.
    out = schedctl(c, "forecast", "--by", "pool")
    assert "calendars and blackouts: " in out.stdout and " skipped" in out.stdout, out.stdout
    fc = json.loads(schedctl(c, "forecast", "-o", "json").stdout)
    assert int(fc["skipped"]) > 0
