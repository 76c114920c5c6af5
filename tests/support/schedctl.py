"""schedctl in-process against the fake API (tests/support/fake_api.py): the `fake` and `run`
fixtures (import them into the test module that uses them) and a job's stored spec."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from schedd_proto import scheduler_pb2 as pb
from schedd_client.schedctl import main
from tests.support.fake_api import NOW_MS, FakeCluster

NOW_S = NOW_MS / 1000


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    monkeypatch.delenv("SCHEDD_CLUSTER", raising=False)
    cluster = FakeCluster(1)
    yield cluster
    cluster.stop()


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> Run:
    """``run(*argv)`` -> (exit status, stdout, stderr), against the fake cluster."""

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--cluster", fake.cluster, *argv], now=lambda: NOW_S)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def spec(fake: FakeCluster, name: str) -> pb.JobSpec:
    return fake.state.jobs[name].spec
