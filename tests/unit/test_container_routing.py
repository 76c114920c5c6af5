"""Routing by handler kind (schedd.leader.assignment): a container job goes only to a worker
that advertises "container" (WorkerHello.handlers); a worker that sends no list is an older
one, assumed to run shell, http and python (and sensors) only; the waiting reason says why."""

from __future__ import annotations

from schedd.core import commands as C
from schedd.core.model import validate_spec
from schedd.core.view import StateView
from schedd.leader.assignment import OLD_WORKER_KINDS, Capacity, InFlight, Pace, decide, worker_kinds
from tests.support.state import Harness

WITH_CONTAINERS = frozenset({"shell", "http", "python", "sensor", "container"})


def _jobs(h: Harness) -> None:
    """A container job and a shell job, both due now (a cluster at level 6)."""
    box = validate_spec({"name": "box", "schedule": "@every 60s",
                         "handler": {"container": {"image": "localhost/x", "command": "true"}}})
    assert h.apply(C.PUT, rid="c/box", spec=box.text(), name="box", fl=6).ok
    h.put(name="sh", schedule="@every 60s")
    h.plan_and_fire()


def _decide(workers: list[Capacity]) -> tuple[list[tuple[str, str]], dict[str, str]]:
    h = Harness(level=6)
    _jobs(h)
    kinds = frozenset().union(*(w.kinds for w in workers))
    d = decide(StateView(h.state), h.now, workers, InFlight(), Pace(1_500, kinds=kinds))
    return [(c.job, c.worker) for c in d.claims], {name: why for (name, _), why in d.waiting.items()}


def test_an_older_worker_is_assumed_to_run_shell_http_python_only() -> None:
    assert worker_kinds([]) == OLD_WORKER_KINDS and "container" not in OLD_WORKER_KINDS
    assert worker_kinds(["shell", "container"]) == {"shell", "container"}


def test_a_container_job_never_goes_to_a_worker_without_a_runtime() -> None:
    claims, waiting = _decide([Capacity("plain", 4)])            # an older worker: no list
    assert claims == [("sh", "plain")]
    assert waiting == {"box": "waiting: no worker can run container jobs"}
    claims, waiting = _decide([Capacity("plain", 4, kinds=frozenset({"shell", "http", "python", "sensor"}))])
    assert claims == [("sh", "plain")] and waiting["box"] == "waiting: no worker can run container jobs"


def test_a_container_job_goes_to_the_worker_that_advertises_it() -> None:
    claims, waiting = _decide([Capacity("plain", 4), Capacity("boxes", 4, kinds=WITH_CONTAINERS)])
    assert ("box", "boxes") in claims and not waiting
    # the one container worker is full: the reason is the slot, not the kind
    claims, waiting = _decide([Capacity("plain", 4), Capacity("boxes", 0, kinds=WITH_CONTAINERS, ahead=0)])
    assert claims == [("sh", "plain")] and waiting["box"].startswith("waiting for a free worker slot")
