"""The DAG and cluster pages as a person meets them: Debian's chromium, driven by Selenium, against
a real three-node cluster (TLS and ACL on) with a worker.

A DAG's graph is drawn before its first run (every task "not run yet"), then with the states of
a run in which a middle task failed; the grid shows that run; clearing the failed task (and its
downstream) from the page, after the confirmation names the tasks, reruns them (seen through
`schedctl dag show`). The cluster page lists the worker, the run's SLA miss, each node's digests
and the leader, and the audit trail filtered by a principal shows that principal's calls only
(and the same from `schedctl` and the SDK). A read-only token sees the DAG without the clear
button. Screenshots are kept in the test's tmp dir (screens/).
"""

from __future__ import annotations

import json

import pytest
import yaml

from schedd.ports.fakes import wait_until
from tests.integration.test_dashboard import CHROMIUM, CHROMEDRIVER, browser, click, log_in, shot  # noqa: F401  (skips without them)
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration

from selenium.common.exceptions import NoAlertPresentException  # noqa: E402  (after test_dashboard's importorskip)
from selenium.webdriver.common.by import By  # noqa: E402

TASKS = ("extract", "transform", "check", "load", "report")


# Read in one script: the pages redraw as they follow the cluster, so elements found one call
# earlier may be gone (stale) by the next.
def node_states(driver) -> dict[str, str]:
    """What each task node of the graph says its state is (its words, not its colour)."""
    return dict(driver.execute_script("return Array.from(document.querySelectorAll('#graph g.node'))"
                                      ".map(function (g) { return [g.dataset.task, g.dataset.state]; })"))


def grid_states(driver) -> dict[str, str]:
    return dict(driver.execute_script("return Array.from(document.querySelectorAll('#grid td.cell'))"
                                      ".map(function (td) { return [td.dataset.task, td.dataset.state]; })"))


def alert_open(driver):
    try:
        return driver.switch_to.alert
    except NoAlertPresentException:
        return None


def table_rows(driver, table: str) -> list[list[str]]:
    """The rows of `table` (an id) as the texts of their cells."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#' + arguments[0] + ' tbody tr')).map(function (r) {"
        " return Array.from(r.cells).map(function (c) { return c.innerText; }); })", table)


@pytest.fixture
def cluster(cluster_factory, tmp_path):
    c = cluster_factory(size=3)
    c.start()
    c.bootstrap()
    c.wait_leader(timeout=60)
    c.start_worker("w1", slots=2)
    flag = tmp_path / "transform.ok"
    # The run misses its SLA whatever the machine's speed: extract alone outlasts it (a run whose
    # fail, clear and rerun all fit in the SLA would rightly miss nothing).
    doc = {"name": "etl", "team": "a", "sla": {"within": "1s"}, "tasks": [
        {"name": "extract", "command": "sleep 1.5"},
        {"name": "transform", "upstream": ["extract"], "command": f"test -f {flag}"},   # fails until the flag
        {"name": "check", "upstream": ["extract"], "command": "true"},
        {"name": "load", "upstream": ["transform", "check"], "command": "true"},
        {"name": "report", "upstream": ["load"], "command": "true"},
    ]}
    (tmp_path / "etl.yaml").write_text(yaml.safe_dump(doc))
    schedctl(c, "dag", "apply", "-f", str(tmp_path / "etl.yaml"))
    with c.client(timeout=30) as cl:
        cl.acl_put_policy("team-a-read", {"team:a": ["read"]})
        c.reader_token = cl.acl_create_token(policies=["team-a-read"], description="reads team a").secret
        wait_until(lambda: cl.list_workers().workers, timeout=30, what="the worker to connect")
    c.flag = flag
    return c


def test_dag_graph_grid_clear_and_cluster_workers_audit(cluster, tmp_path):
    c, screens = cluster, tmp_path / "screens"
    driver = browser()
    try:
        log_in(driver, schedctl(c, "dashboard", "--no-open").stdout.strip(), what="logged in")
        admin = driver.find_element(By.ID, "principal").text

        # The DAGs list, then the DAG's page: the graph before any run.
        click(driver, By.ID, "nav-dags")
        [row] = wait_until(lambda: table_rows(driver, "dags"), timeout=30, what="the DAG list")
        assert row[0] == "etl" and row[6] == "not run yet", row
        click(driver, By.CSS_SELECTOR, "#dags a.dag-name")
        wait_until(lambda: len(node_states(driver)) == 5, timeout=30, what="the graph")
        assert node_states(driver) == dict.fromkeys(TASKS, "not run yet")
        assert len(driver.find_elements(By.CSS_SELECTOR, "#graph path.edge")) == 5
        assert "not run yet" in driver.find_element(By.ID, "graph").text            # said in words
        assert driver.find_element(By.ID, "grid").text.startswith("No runs yet")
        shot(driver, screens, "dag-before")

        # A run: transform fails, what depends on it is upstream failed; the page follows it.
        run_id = json.loads(schedctl(c, "dag", "run", "etl", "-o", "json").stdout)["run_id"]
        after = {"extract": "succeeded", "transform": "failed", "check": "succeeded", "load": "upstream failed",
                 "report": "upstream failed"}
        wait_until(lambda: node_states(driver) == after, timeout=45, what="the run's states in the graph")
        wait_until(lambda: grid_states(driver) == after, timeout=30, what="the run in the grid")
        cell = driver.find_element(By.CSS_SELECTOR, '#grid td[data-task="transform"] a')
        assert cell.get_attribute("href").endswith("/runs/" + "etl%3Atransform%40" + run_id.split("@")[1].replace(":", "%3A"))
        assert run_id in driver.find_element(By.ID, "graph-run").text
        click(driver, By.CSS_SELECTOR, f'#grid a.run-pick[data-run="{run_id}"]')   # the run, picked
        wait_until(lambda: driver.current_url.endswith("?run=" + run_id.replace(":", "%3A").replace("@", "%40")),
                   timeout=30, what="the picked run in the address")
        shot(driver, screens, "dag-failed")

        # Clear transform and its downstream from the page: the confirmation names the tasks.
        c.flag.write_text("ok")
        assert driver.find_element(By.ID, "clear-task").get_attribute("value") == "transform"
        click(driver, By.ID, "clear-button")
        alert = wait_until(lambda: alert_open(driver), timeout=30, what="the confirmation")
        assert "transform, load, report" in alert.text and "extract" not in alert.text and "check" not in alert.text
        alert.accept()
        wait_until(lambda: "transform, load, report cleared by" in driver.find_element(By.ID, "clear-done").text,
                   timeout=30, what="the clear answered")

        def rerun():
            run = json.loads(schedctl(c, "dag", "show", "etl", "--run", run_id, "-o", "json").stdout)
            return run if run["state"] == "SUCCEEDED" else None
        run = wait_until(rerun, timeout=45, what="the cleared tasks to run again")
        assert {t["task"]: t["state"] for t in run["tasks"]} == dict.fromkeys(TASKS, "SUCCEEDED")
        wait_until(lambda: set(node_states(driver).values()) == {"succeeded"}, timeout=30, what="all succeeded")
        shot(driver, screens, "dag-cleared")

        # The API's refusal comes back as it says it (a task the run does not have, as a forged
        # request would send it).
        refused = driver.execute_script(
            "return window.schedd.post('/api/dags/etl/clear', {run_id: arguments[0], task: 'nope'})"
            ".then(function () { return 'ok'; }, function (e) { return e.message; })", run_id)
        assert "has no task 'nope'" in refused

        # The cluster page: the worker with its handlers, and the audit trail filtered by principal.
        click(driver, By.ID, "nav-cluster")
        [worker] = wait_until(lambda: [r for r in table_rows(driver, "workers") if r[0] == "w1"], timeout=30,
                              what="the worker")
        assert worker[0] == "w1" and "shell" in worker[3] and worker[4] == "2", worker
        [miss] = wait_until(lambda: [r for r in table_rows(driver, "sla") if r[1] == "etl (DAG)"], timeout=30,
                            what="the DAG run's SLA miss")
        assert miss[2] == run_id, miss
        click(driver, By.ID, "with-digest")          # each node's state and history digests
        digests = wait_until(lambda: [r[9:] for r in table_rows(driver, "nodes") if r[9] != "-"], timeout=30,
                             what="the digests")
        assert len(digests) == 3 and all(h.endswith("runs") for _, h in digests), digests
        [leader, *_] = wait_until(lambda: table_rows(driver, "leaders"), timeout=30, what="the leader changes")
        assert leader[3] == "leads now", leader
        wait_until(lambda: table_rows(driver, "audit"), timeout=30, what="audit rows")
        driver.find_element(By.ID, "a-principal").send_keys(admin)

        def audit_rows():
            rows = table_rows(driver, "audit")
            return rows if rows and all(r[2] == admin for r in rows) else None
        rows = wait_until(audit_rows, timeout=30, what="the admin's audit records only")
        assert any(r[4] == "Dags.ClearDagTask" and r[6] == "allowed" for r in rows), rows
        driver.find_element(By.ID, "a-principal").send_keys("-nobody")
        wait_until(lambda: not table_rows(driver, "audit"), timeout=30, what="no records of an unknown principal")
        driver.find_element(By.ID, "a-principal").clear()
        driver.find_element(By.ID, "a-principal").send_keys(admin)
        wait_until(audit_rows, timeout=30, what="the admin's records again")
        shot(driver, screens, "cluster")

        # What the page shows, from schedctl and the SDK: the leader changes, the worker's handlers,
        # the audit trail a page at a time, newest first.
        [led] = json.loads(schedctl(c, "cluster", "leaders", "-o", "json").stdout)
        assert led["until_ms"] == 0 and led["node"] == leader[1] and led["term"] == int(leader[0])
        assert "HANDLERS" in schedctl(c, "worker", "list").stdout
        newest = json.loads(schedctl(c, "audit", "list", "--principal", admin, "--newest", "--limit", "2",
                                     "-o", "json").stdout)
        seqs = [int(r["seq"]) for r in newest]
        assert len(seqs) == 2 and seqs[0] > seqs[1]
        with c.client(timeout=30) as cl:
            assert [(x.node, x.until_ms) for x in cl.leader_changes()] == [(led["node"], 0)]
            older = cl.audit_list(principal=admin, newest_first=True, limit=2, before_seq=seqs[1]).records
            assert older and all(r.seq < seqs[1] and r.principal == admin for r in older)

        # A read-only token: the DAG and its run, no clear, no cluster page.
        click(driver, By.ID, "logout")
        wait_until(lambda: "/login" in driver.current_url, timeout=30, what="logged out")
        driver.get(c.http_url("n1", "/dags/etl"))      # to /login?next=...: so the link loads a new page
        wait_until(lambda: "/login?next=" in driver.current_url, timeout=30, what="the login page")
        log_in(driver, schedctl(c, "dashboard", "--no-open", "--token", c.reader_token).stdout.strip(), what="the reader logged in")
        driver.get(c.http_url("n1", "/dags/etl"))
        wait_until(lambda: set(node_states(driver).values()) == {"succeeded"}, timeout=30, what="the reader's graph")
        assert not driver.find_element(By.ID, "clear-panel").is_displayed()
        assert not driver.find_elements(By.ID, "nav-cluster")
        shot(driver, screens, "dag-reader")
    finally:
        shot(driver, screens, "last")             # where the test ended, for a person to look at
        driver.quit()
