"""The web dashboard as a user meets it: Debian's chromium, driven by Selenium, against a real
three-node cluster (TLS with client certificates and ACL on, as deployed).

The browser logs in through the link `schedctl dashboard` prints, sees the jobs the test created
and one added while it watches (no reload), the cluster page's three nodes; it is sent to the
login page without a session, a POST without the CSRF token is refused, a team's token sees only
its team's jobs (a call the API refuses it is audited with the dashboard as its source), and
deleting that token ends its session. Screenshots are kept in the test's
tmp dir (screens/) for a person to look at.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("DASHBOARD BROWSER TESTS SKIPPED: Debian's chromium and chromium-driver are not installed "
                "(.ci/run installs them as root: apt-get install chromium chromium-driver)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extras")
from selenium.webdriver.common.by import By  # noqa: E402


def browser():
    """Headless chromium; the cluster's CA is not in its store, so its certificate is accepted
    as a user who trusts the link would."""
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900",
                "--disable-gpu"):
        opts.add_argument(arg)
    opts.accept_insecure_certs = True
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)


def job_names(driver) -> list[str]:
    return [e.text.split("\n")[0] for e in driver.find_elements(By.CSS_SELECTOR, "#jobs tbody .job-name")]


def shot(driver, screens: Path, name: str) -> Path:
    screens.mkdir(exist_ok=True)
    path = screens / f"dashboard-{name}.png"
    driver.save_screenshot(str(path))
    return path


@pytest.fixture
def cluster(cluster_factory):
    c = cluster_factory(size=3)
    c.start()
    c.bootstrap()
    c.wait_leader(timeout=60)
    with c.client(timeout=30) as cl:
        cl.acl_put_policy("team-a", {"team:a": ["read", "write", "trigger"]})
        c.team_token = cl.acl_create_token(policies=["team-a"], description="team a").secret
        for name, team in (("a-report", "a"), ("a-cleanup", "a"), ("b-backup", "b")):
            cl.put_job(job_spec(name, schedule="*/5 * * * *", team=team, command="true", pool="nowhere"))
    return c


def test_dashboard_login_jobs_cluster_csrf_and_teams(cluster, tmp_path):
    c, screens = cluster, tmp_path / "screens"
    driver = browser()
    try:
        # No session: every page sends the browser to the login page.
        driver.get(c.http_url("n1", "/jobs"))
        wait_until(lambda: "/login" in driver.current_url, timeout=30, what="the login page")
        assert driver.find_element(By.ID, "token").get_attribute("type") == "password"
        shot(driver, screens, "login")

        # The link `schedctl dashboard` prints for the admin's context logs in (token in the fragment).
        link = schedctl(c, "dashboard", "--no-open").stdout.strip()
        assert link.startswith(c.http_url("n1", "/login#token="))
        driver.get(link)
        wait_until(lambda: driver.current_url.endswith("/jobs"), timeout=30, what="the jobs page")
        assert "#token" not in driver.current_url
        wait_until(lambda: job_names(driver) == ["a-cleanup", "a-report", "b-backup"], timeout=30,
                   what="the three jobs")
        cookie = next(k for k in driver.get_cookies() if k["name"].startswith("schedd_session_"))
        assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"

        # A job added meanwhile appears without a reload.
        with c.client(timeout=30) as cl:
            cl.put_job(job_spec("a-added", schedule="@every 1h", team="a", command="true", pool="nowhere"))
        wait_until(lambda: "a-added" in job_names(driver), timeout=30, what="the new job, live")
        assert driver.find_element(By.ID, "total").text == "(4)"
        shot(driver, screens, "jobs")

        # The team filter narrows the list (server-side).
        team = driver.find_element(By.ID, "f-team")
        team.send_keys("b")
        wait_until(lambda: job_names(driver) == ["b-backup"], timeout=30, what="team b's jobs")
        team.clear()
        driver.find_element(By.ID, "f-text").send_keys("REPORT")      # any case, server-side
        wait_until(lambda: job_names(driver) == ["a-report"], timeout=30, what="the jobs named *report*")
        driver.find_element(By.ID, "f-text").clear()
        wait_until(lambda: len(job_names(driver)) == 4, timeout=30, what="every job again")

        # The same filter from schedctl and the SDK.
        listed = json.loads(schedctl(c, "job", "list", "--name-contains", "a-", "-o", "json").stdout)
        assert [j["spec"]["name"] for j in listed] == ["a-added", "a-cleanup", "a-report"]
        with c.client(timeout=30) as cl:
            assert [j.spec.name for j in cl.list_jobs(name_contains="CLEAN", team="a")] == ["a-cleanup"]

        # A POST without the CSRF token is refused, and the session lives on.
        status = driver.execute_script("return fetch('/logout', {method: 'POST'}).then(r => r.status)")
        assert status == 403

        # The cluster page: three nodes, one leader.
        driver.find_element(By.ID, "nav-cluster").click()
        rows = lambda: driver.find_elements(By.CSS_SELECTOR, "#nodes tbody tr")  # noqa: E731
        wait_until(lambda: len(rows()) == 3, timeout=30, what="three nodes")
        roles = [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows()]
        assert sorted(roles) == ["follower", "follower", "leader"]
        shot(driver, screens, "cluster")

        # Log out (the form carries the CSRF token): back to the login page.
        driver.find_element(By.ID, "logout").click()
        wait_until(lambda: "/login" in driver.current_url, timeout=30, what="logged out")
        driver.get(c.http_url("n1", "/jobs"))
        wait_until(lambda: "/login" in driver.current_url, timeout=30, what="no session after logout")

        # Team a's token sees team a's jobs only, and no cluster page.
        link = schedctl(c, "dashboard", "--no-open", "--token", c.team_token).stdout.strip()
        driver.get(link)
        wait_until(lambda: job_names(driver) == ["a-added", "a-cleanup", "a-report"], timeout=30,
                   what="team a's jobs only")
        assert not driver.find_elements(By.ID, "nav-cluster")
        assert driver.find_element(By.ID, "principal").text == "token:" + c.team_token.partition(".")[0]
        shot(driver, screens, "team")

        # What the API refuses the dashboard is refused, and audited with the dashboard as the channel.
        driver.get(c.http_url("n1", "/api/cluster"))
        assert "operator" in driver.find_element(By.TAG_NAME, "body").text
        principal = "token:" + c.team_token.partition(".")[0]
        with c.client(timeout=30) as cl:
            def denied():
                rows = cl.audit_list(principal=principal, action="Cluster.Status", outcome="denied").records
                return rows or None
            [record, *_] = wait_until(denied, timeout=30, what="the denied call in the audit trail")
        assert record.source == "dashboard"
        driver.get(c.http_url("n1", "/jobs"))
        wait_until(lambda: len(job_names(driver)) == 3, timeout=30, what="the jobs page again")

        # Deleting the token ends the session: the live page goes back to the login page.
        with c.client(timeout=30) as cl:
            cl.acl_delete_token(c.team_token.partition(".")[0])
        wait_until(lambda: "/login" in driver.current_url, timeout=60, what="the session to end with its token")
    finally:
        driver.quit()

