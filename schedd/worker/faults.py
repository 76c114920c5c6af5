"""The worker's fault hooks: where a test process records what the worker did, stops it dead
(a failpoint) or dials the cluster through a proxy. `WorkerRuntime` is given one; the default,
`NO_WORKER_FAULTS`, does nothing. The test-mode implementation is built by the `schedd worker`
command from the environment (schedd.testing.hooks.configure_worker)."""

from __future__ import annotations

from typing import Any


class WorkerFaults:
    """Every hook, doing nothing."""

    __slots__ = ()

    def dial(self, addr: str) -> str:
        """The address to dial for the node at `addr`."""
        return addr

    def record(self, type_: str, **fields: Any) -> None:
        """One event of the worker's test-mode history."""

    def effect_done(self, token: int, job: str, scheduled_ms: int) -> None:
        """The handler of attempt `token` returned (its effect is made); not yet reported."""


NO_WORKER_FAULTS = WorkerFaults()
