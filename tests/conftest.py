"""Shared test helpers: condition waits (never fixed sleeps) and cluster fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("SCHEDD_TEST_MODE", "1")


def wait_until(predicate, *, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll `predicate` until it returns a truthy value; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - keep polling through transient errors
            last_exc = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}"
                         + (f" (last error: {last_exc!r})" if last_exc else ""))


@pytest.fixture(autouse=True)
def _pysyncobj_globals_restored():
    """A node built in-process patches pysyncobj process-wide (the durable journal factory, the
    snapshot gzip level and rename: schedd.replication.journal, one SyncObj per process by
    design). Each test gets pysyncobj as the previous test found it, so a test that builds plain
    SyncObjs (the in-memory network) never inherits another's durable journal."""
    import pysyncobj.serializer
    import pysyncobj.syncobj
    saved = (pysyncobj.syncobj.createJournal, pysyncobj.serializer.gzip,
             pysyncobj.serializer.atomicReplace)
    yield
    (pysyncobj.syncobj.createJournal, pysyncobj.serializer.gzip,
     pysyncobj.serializer.atomicReplace) = saved


def pytest_addoption(parser):
    parser.addoption("--soak", action="store_true", help="run long soak tests")
    parser.addoption("--jepsen-full", action="store_true",
                     help="run the full fault-injection profile of tests/jepsen_like")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--jepsen-full"):
        full = pytest.mark.skip(reason="full fault-injection profile: run with --jepsen-full")
        for item in items:
            if "jepsen_full" in item.keywords:
                item.add_marker(full)
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cluster_factory(tmp_path: Path):
    """Builds LocalClusters under tmp_path and stops every process at teardown (by pid).
    On failure the node logs are printed, so a CI failure shows what the nodes saw."""
    from schedd.runtime.cluster import LocalCluster

    made: list[LocalCluster] = []

    def make(**kw) -> LocalCluster:
        c = LocalCluster(tmp_path / f"cluster{len(made)}", **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop(timeout=10)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed and "cluster_factory" in item.fixturenames:
        tmp = item.funcargs.get("tmp_path")
        if tmp is not None:
            for log in sorted(Path(tmp).glob("cluster*/logs/*.log")):
                tail = log.read_text(errors="replace").splitlines()[-60:]
                rep.sections.append((f"node log {log.parent.parent.name}/{log.name}", "\n".join(tail)))


def schedctl(cluster: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run schedctl as a user would (a fresh process), against `cluster`."""
    cmd = [sys.executable, "-c", "import sys; from schedd_client.schedctl import main; sys.exit(main())",
           "--cluster", cluster, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise AssertionError(f"schedctl {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def metric_total(cluster, name: str, label: str = "") -> float:
    """The sum over every node of a Prometheus sample `name{...}` whose labels contain `label`."""
    import urllib.request
    total = 0.0
    for node in cluster.nodes.values():
        try:
            text = urllib.request.urlopen(f"http://{node.metrics}/metrics", timeout=5).read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith(name + "{") and label in line:
                total += float(line.rsplit(" ", 1)[1])
    return total
