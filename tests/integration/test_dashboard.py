"""The web dashboard as a user meets it: Debian's chromium, driven by Selenium, against a real
three-node cluster (TLS with client certificates and ACL on, as deployed).

The browser logs in through the one-time link `schedctl dashboard` prints (once: the same link
again shows why it is refused, an expired one too, and a code is good only on the node that
minted it), sees the jobs the test created
and one added while it watches (no reload), a row patched in place as its job runs (the page
does not load its list again), the cluster page's three nodes; it is sent to the
login page without a session, a POST without the CSRF token is refused, a team's token sees only
its team's jobs (a call the API refuses it is audited with the dashboard as its source), and
deleting that token ends its session. Screenshots are kept in the test's
tmp dir (screens/) for a person to look at.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

import pytest

from schedd.ports.fakes import WaitTimeout, wait_until
from schedd_client import AsyncClient, job_spec
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("DASHBOARD BROWSER TESTS SKIPPED: Debian's chromium and chromium-driver are not installed "
                "(.ci/run installs them as root: apt-get install chromium chromium-driver)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extras")
from selenium.common.exceptions import (ElementClickInterceptedException, ElementNotInteractableException,  # noqa: E402
                                        NoSuchElementException, StaleElementReferenceException,
                                        WebDriverException)
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


def redrawn(read):
    """`read` of the page, again if the page redrew what it was reading (a live page redraws
    as it follows the cluster, so an element found one call earlier may be gone by the next)."""
    def again(*args):
        for _ in range(5):
            try:
                return read(*args)
            except StaleElementReferenceException:
                continue
        return read(*args)
    return again


def click(driver, by: str, value: str, timeout: float = 30) -> None:
    """Find the element and click it as a user would: once it is shown and clickable (a page
    still drawing, or a busy machine's browser, shows a button a moment after it exists: a
    click then fails "element not interactable"), finding it again if the page redrew it
    between the two. Fails after `timeout` s saying why the last try failed."""
    def clicked() -> bool:
        try:
            element = driver.find_element(by, value)
            if not (element.is_displayed() and element.is_enabled()):
                return False
            element.click()
            return True
        except (StaleElementReferenceException, ElementNotInteractableException,
                ElementClickInterceptedException, NoSuchElementException):
            return False
    wait_until(clicked, timeout=timeout, interval=0.1, what=f"{value} shown and clicked", errors=False)


def error_text(driver) -> str:
    found = driver.find_elements(By.ID, "error")
    return found[0].text if found else ""


def session_cookies(driver) -> list[dict]:
    return [k for k in driver.get_cookies() if k["name"].startswith("schedd_session_")]


@redrawn
def job_names(driver) -> list[str]:
    return [e.text.split("\n")[0] for e in driver.find_elements(By.CSS_SELECTOR, "#jobs tbody .job-name")]


def strip_marks(driver, job: str) -> list[list[str]] | None:
    """The job's row's strip of last runs as [run id, letter] (None: no such row)."""
    return driver.execute_script("""
      var rows = document.querySelectorAll('#jobs tbody tr');
      for (var i = 0; i < rows.length; i++) {
        if (rows[i].querySelector('.job-name a').textContent !== arguments[0]) { continue; }
        return Array.from(rows[i].querySelectorAll('.strip a')).map(function (a) {
          return [decodeURIComponent(a.getAttribute('href').slice('/runs/'.length)), a.textContent];
        });
      }
      return null;""", job)


def page_stats(driver) -> dict:
    """What common.js's `follow` counted on this page: its loads and the changes it patched in."""
    return driver.execute_script("return {loads: window.schedd.stats.loads, patches: window.schedd.stats.patches};")


def patched_live(c, driver, job: str) -> None:
    """A run of `job` (triggered, then cancelled: it waits in a pool no worker serves) shows in
    the job's row, its mark appended to the strip and then its new state, while the page loads
    nothing: the row is patched from the stream. The page also loads every 30 s whatever the
    stream says; an attempt that such a load fell into is tried again."""
    for _ in range(3):
        before = page_stats(driver)
        with c.client(timeout=30) as cl:
            run = cl.trigger_job(job)
        wait_until(lambda: [run.id, "R"] in (strip_marks(driver, job) or []), timeout=30,
                   what="the triggered run's mark in the row's strip")
        with c.client(timeout=30) as cl:
            cl.cancel_execution(run.id)
        wait_until(lambda: [run.id, "C"] in (strip_marks(driver, job) or []), timeout=30,
                   what="the cancelled run's mark in the row's strip")
        after = page_stats(driver)
        if after["loads"] == before["loads"]:
            assert after["patches"] >= before["patches"] + 2
            return
    raise AssertionError(f"the page loaded its list again each time a row changed: {before} -> {after}")


def shot(driver, screens: Path, name: str) -> Path:
    screens.mkdir(exist_ok=True)
    path = screens / f"dashboard-{name}.png"
    driver.save_screenshot(str(path))
    return path


def log_in(driver, link: str, *, what: str = "logged in", timeout: float = 30) -> None:
    """Open a `schedctl dashboard` link and wait for the jobs page it lands on. If it does not,
    the failure says where the browser stayed and what the page said (a refused or expired code
    shows its error there), not only that time ran out."""
    driver.get(link)
    try:
        wait_until(lambda: driver.current_url.endswith("/jobs"), timeout=timeout, what=what)
    except WaitTimeout as e:
        try:
            seen = f"at {driver.current_url}: error {error_text(driver)!r}; page: " \
                   f"{driver.find_element(By.TAG_NAME, 'body').text[:500]!r}"
        except WebDriverException as read_error:        # the browser itself is what failed
            seen = f"the page could not be read: {read_error!r}"
        raise AssertionError(f"{e}; the browser stayed {seen}") from e


LINK_SECONDS = 20          # the nodes' [acl] login_link_seconds: ample to open a link on a loaded machine, short to expire one
REFUSED = "this login link was already used or has expired: run schedctl dashboard again"


@pytest.fixture
def cluster(cluster_factory):
    c = cluster_factory(size=3, acl_settings={"login_link_seconds": LINK_SECONDS})
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

        # A link left unused: opened once its lifetime has passed (below), it is refused. Minted
        # now, so the steps between spend the lifetime instead of a wait.
        minted = time.monotonic()
        expired = schedctl(c, "dashboard", "--no-open", at=c.nodes["n1"].grpc).stdout.strip()

        # The one-time link `schedctl dashboard` prints for the admin's context logs in, on the
        # dashboard of the node that minted it (the token itself is in no URL).
        link = schedctl(c, "dashboard", "--no-open", at=c.nodes["n1"].grpc).stdout.strip()
        assert link.startswith(c.http_url("n1", "/login#code=")) and c.admin_token not in link
        log_in(driver, link, what="the jobs page")
        assert "#code" not in driver.current_url
        wait_until(lambda: job_names(driver) == ["a-cleanup", "a-report", "b-backup"], timeout=30,
                   what="the three jobs")
        cookie = next(k for k in driver.get_cookies() if k["name"].startswith("schedd_session_"))
        assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"

        # A job added meanwhile appears without a reload.
        with c.client(timeout=30) as cl:
            cl.put_job(job_spec("a-added", schedule="@every 1h", team="a", command="true", pool="nowhere"))
        wait_until(lambda: "a-added" in job_names(driver), timeout=30, what="the new job, live")
        assert driver.find_element(By.ID, "total").text == "(4)"

        # A run of a job it shows changes the job's row in place, without a reload of the list.
        patched_live(c, driver, "a-report")
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
        click(driver, By.ID, "nav-cluster")
        rows = lambda: driver.find_elements(By.CSS_SELECTOR, "#nodes tbody tr")  # noqa: E731
        wait_until(lambda: len(rows()) == 3, timeout=30, what="three nodes")
        roles = redrawn(lambda: [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows()])()   # it polls
        assert sorted(roles) == ["follower", "follower", "leader"]
        shot(driver, screens, "cluster")

        # Log out (the form carries the CSRF token): back to the login page.
        click(driver, By.ID, "logout")
        wait_until(lambda: "/login" in driver.current_url, timeout=30, what="logged out")
        driver.get(c.http_url("n1", "/jobs"))
        wait_until(lambda: "/login" in driver.current_url, timeout=30, what="no session after logout")

        # The same link again: refused, saying why, and no session.
        driver.get(link)
        wait_until(lambda: error_text(driver) == REFUSED, timeout=30, what="the used link refused")
        assert not session_cookies(driver)
        shot(driver, screens, "link-used")
        driver.get(c.http_url("n1", "/jobs"))
        wait_until(lambda: "/login" in driver.current_url, timeout=30, what="still no session")

        # A code is good only on the node that minted it: n2's code on n1's dashboard is refused.
        other = schedctl(c, "dashboard", "--no-open", at=c.nodes["n2"].grpc).stdout.strip()
        assert other.startswith(c.http_url("n2", "/login#code="))
        driver.get(c.http_url("n1", "/login#code=") + other.partition("#code=")[2])
        wait_until(lambda: error_text(driver) == REFUSED, timeout=30, what="another node's code refused")
        assert schedctl(c, "dashboard", "--url", at=c.nodes["n2"].grpc).stdout.strip() == c.http_url("n2")

        # The expired link (minted at the start): refused the same way.
        wait_until(lambda: time.monotonic() > minted + LINK_SECONDS + 1, timeout=LINK_SECONDS + 30,
                   what="the link's lifetime to pass")
        driver.get(expired)
        wait_until(lambda: error_text(driver) == REFUSED, timeout=30, what="the expired link refused")
        assert not session_cookies(driver)
        shot(driver, screens, "link-expired")

        # A link that carried the token itself (the old form) logs nobody in, and leaves the address bar.
        driver.get(c.http_url("n1", "/login#token=") + c.admin_token)
        wait_until(lambda: "no longer accepted" in error_text(driver), timeout=30, what="the old link refused")
        assert "#" not in driver.current_url and not session_cookies(driver)

        # A worker token gets no link, and is told why; every link minted is in the audit trail.
        refused = schedctl(c, "dashboard", "--no-open", "--token", c.worker_token(), check=False)
        assert refused.returncode != 0 and "worker token cannot log in" in refused.stderr, refused
        with c.client(timeout=30) as cl:
            admin = cl.acl_whoami().principal

            def links_minted():        # the admin's three so far: on n1, on n2, and the expired one
                rows = [r for r in cl.audit_list(action="Acl.LoginLink").records
                        if r.principal == admin and r.outcome == "allowed"]
                return rows if len(rows) >= 3 else None
            records = wait_until(links_minted, timeout=30, what="the minted links in the audit trail")
        assert {r.target for r in records} >= {"dashboard:n1", "dashboard:n2"}

        # The SDK's login_link (blocking and awaited) makes the same links.
        with c.client(timeout=30) as cl:
            sdk_link = cl.login_link()

        async def awaited() -> tuple[str, str]:
            async with AsyncClient(c.nodes["n3"].grpc, timeout=30, security=c.security()) as acl:
                return await acl.login_link(), await acl.login_link(url_only=True)
        async_link, async_url = asyncio.run(awaited())
        assert async_url == c.http_url("n3") and async_link.startswith(c.http_url("n3", "/login#code="))
        assert any(sdk_link.startswith(c.http_url(n, "/login#code=")) for n in c.nodes)
        log_in(driver, async_link, what="n3's jobs page, by the SDK's link")
        driver.get(c.http_url("n1", "/jobs"))
        wait_until(lambda: "/login" in driver.current_url, timeout=30, what="no session on n1")

        # Team a's token sees team a's jobs only, and no cluster page.
        link = schedctl(c, "dashboard", "--no-open", "--token", c.team_token, at=c.nodes["n1"].grpc).stdout.strip()
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

        # Deleting the token ends the session at the page's next request (a change of a job it
        # follows, here; or the stream's own check every 15 s): back to the login page.
        with c.client(timeout=30) as cl:
            cl.acl_delete_token(c.team_token.partition(".")[0])
            cl.put_job(job_spec("a-after", schedule="@every 1h", team="a", command="true", pool="nowhere"))
        wait_until(lambda: "/login" in driver.current_url, timeout=60, what="the session to end with its token")
    finally:
        driver.quit()

