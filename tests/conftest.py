"""Fixtures shared by every test tier (helpers to import live in tests/support and schedd.ports.fakes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("SCHEDD_TEST_MODE", "1")


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


def pytest_configure(config):
    """Under pytest-xdist (the suite runs `-n 3`, pyproject.toml), each worker picks cluster
    ports from its own share of the band, and so do the `schedd` processes its tests start
    (they inherit the variable): two workers never race for the same free ports."""
    from schedd.runtime.cluster import PORT_BAND_ENV, port_band

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")          # gw0, gw1, ...
    if worker.startswith("gw") and PORT_BAND_ENV not in os.environ:
        count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
        lo, hi = port_band(0)
        width = (hi - lo) // count
        i = int(worker[2:]) % count
        os.environ[PORT_BAND_ENV] = f"{lo + i * width}-{lo + (i + 1) * width - 1}"


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


@pytest.fixture(scope="module")
def module_cluster_factory(tmp_path_factory):
    """cluster_factory for a module's tests that share one cluster (starting a 3-node cluster
    costs seconds a test): built once under a folder of its own, stopped after the module's last
    test. Only for tests that need no fresh cluster (they name their jobs apart, kill nothing)."""
    from schedd.runtime.cluster import LocalCluster

    root = tmp_path_factory.mktemp("module-clusters")
    made: list[LocalCluster] = []

    def make(**kw) -> LocalCluster:
        c = LocalCluster(root / f"cluster{len(made)}", **kw)
        made.append(c)
        return c

    make.root = root                     # type: ignore[attr-defined]  # where the failure report finds the logs
    yield make
    for c in made:
        c.stop(timeout=10)


def _cluster_folder(item) -> Path | None:
    if "module_cluster_factory" in item.fixturenames:
        factory = item.funcargs.get("module_cluster_factory")
        return getattr(factory, "root", None)
    if "cluster_factory" in item.fixturenames:
        return item.funcargs.get("tmp_path")
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed:
        tmp = _cluster_folder(item)
        if tmp is not None:
            for log in sorted(Path(tmp).glob("cluster*/logs/*.log")):
                tail = log.read_text(errors="replace").splitlines()[-60:]
                rep.sections.append((f"node log {log.parent.parent.name}/{log.name}", "\n".join(tail)))


@pytest.fixture(scope="session")
def container_image():
    """The busybox image of the container tests (tests/support/containers.py), built offline once
    per session and removed at its end. Skipped, saying why, where podman cannot run here."""
    from tests.support.containers import built_image, why_not

    why = why_not()
    if why:
        pytest.skip(f"CONTAINER TESTS SKIPPED: {why}")
    with built_image() as name:
        yield name
