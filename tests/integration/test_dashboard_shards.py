"""The dashboard of a sharded cluster, in Debian's chromium (Selenium): the Cluster page shows every
shard with its leader, replicas and jobs, and the Jobs page lists the jobs of every shard."""

from __future__ import annotations

import pytest

from schedd.core.shards import shard_of
from schedd.ports.fakes import WaitTimeout, wait_until
from schedd_client import job_spec
from tests.integration.test_dashboard import browser, redrawn, shot
from tests.support.cluster import schedctl

pytestmark = pytest.mark.integration
By = pytest.importorskip("selenium.webdriver.common.by").By

SHARDS = 4


@redrawn
def rows(driver, table: str) -> list[list[str]]:
    return [[td.get_attribute("textContent").strip() for td in tr.find_elements(By.CSS_SELECTOR, "td")]
            for tr in driver.find_elements(By.CSS_SELECTOR, f"{table} tbody tr")]


def test_the_cluster_page_shows_every_shard_and_the_jobs_page_every_shards_jobs(cluster_factory, tmp_path):
    c = cluster_factory(size=3, shards=SHARDS)
    c.start()
    c.wait_leader(timeout=60)
    c.wait_shards(timeout=60)
    names = [f"dash{i}" for i in range(16)]
    assert len({shard_of(n, SHARDS) for n in names}) == SHARDS          # the jobs cover every shard
    with c.client(timeout=30) as client:
        client.put_jobs([job_spec(n, schedule="0 3 * * *", command="true") for n in names])
    driver = browser()
    try:
        driver.get(schedctl(c, "dashboard", "--no-open").stdout.strip())
        base = driver.current_url.split("/jobs")[0].rstrip("/")
        wait_until(lambda: sorted(r[0] for r in rows(driver, "#jobs") if r) == sorted(names), timeout=60,
                   what="the Jobs page listing the jobs of every shard")
        driver.get(base + "/cluster")
        try:
            wait_until(lambda: len([r for r in rows(driver, "#shards") if r and r[1] and r[1] != "no leader"])
                       == SHARDS, timeout=90, what="every shard with its leader on the Cluster page")
        except WaitTimeout:
            shot(driver, tmp_path / "screens", "cluster-shards-timeout")
            status = driver.find_elements(By.ID, "status")
            raise AssertionError(f"the Cluster page's shards: {rows(driver, '#shards')}; hidden: "
                                 f"{driver.find_element(By.ID, 'shards-section').get_attribute('hidden')}; status: "
                                 f"{status[0].text if status else '?'}; error: "
                                 f"{[e.text for e in driver.find_elements(By.ID, 'error')]}") from None
        shown = rows(driver, "#shards")
        assert [r[0] for r in shown] == [str(k) for k in range(SHARDS)]
        assert all(r[2] == "n1, n2, n3" for r in shown)
        wait_until(lambda: sum(int(r[4]) for r in rows(driver, "#shards")) == len(names), timeout=30,
                   what="the shards' job counts adding up")
        assert driver.find_element(By.ID, "shards-section").is_displayed()
        shot(driver, tmp_path / "screens", "cluster-shards")
    finally:
        driver.quit()
