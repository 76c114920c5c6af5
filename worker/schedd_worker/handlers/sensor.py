"""The sensor handler kind: check a condition once per attempt (schedd.core.dags).

A sensor attempt reports SUCCEEDED when the condition holds and NOT_READY when it does not yet;
the leader then puts the execution back to wait for the poll interval (no worker slot is held
between polls) and ends it TIMED_OUT after the sensor's timeout. Conditions:

- ``file``: the path exists on the worker;
- ``http_url``: a GET answers 200 (any other status, or no answer, is "not ready"); the target
  must pass the worker's outbound network policy like an HTTP job's (a refused one is "not
  ready", with the reason), and no redirect is followed;
- ``command``: ``/bin/sh -c COMMAND`` exits 0 (with the job contract's environment).

One check is bounded by the attempt's timeout (a timed-out check is "not ready" too). A
cancelled check reports CANCELLED; only a broken sensor spec FAILS (and is retried per policy).
The http and command checks run through the HTTP and shell handlers (the `Handler` interface).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .base import CANCELLED, FAILED, SUCCEEDED, Assignment, Handler, Result, Stop

__all__ = ["SensorHandler", "NOT_READY"]

NOT_READY = "NOT_READY"


class SensorHandler:
    """``{"file": ...}``, ``{"http_url": ...}`` or ``{"command": ...}``, checked once."""

    def __init__(self, shell: Handler, http: Handler) -> None:
        self.shell, self.http = shell, http

    async def run(self, a: Assignment, spec: Mapping[str, Any], stop: Stop) -> Result:
        if not isinstance(spec, Mapping):
            return Result(FAILED, error="sensor must be an object")
        if spec.get("file"):
            path = str(spec["file"])
            if os.path.exists(path):
                return Result(SUCCEEDED, output_tail=f"{path} exists")
            return Result(NOT_READY, error=f"{path} does not exist")
        if spec.get("http_url"):
            r = await self.http.run(a, {"url": spec["http_url"], "method": "GET"}, stop)
            if r.state == CANCELLED:
                return r
            if r.state == SUCCEEDED and r.http_status == 200:
                return Result(SUCCEEDED, http_status=200, output_tail=r.output_tail[-512:])
            why = r.error or f"HTTP {r.http_status}, not 200"
            return Result(NOT_READY, http_status=r.http_status or 0, error=why)
        if spec.get("command"):
            r = await self.shell.run(a, {"command": spec["command"]}, stop)
            if r.state in (SUCCEEDED, CANCELLED):
                return r
            return Result(NOT_READY, exit_code=r.exit_code, error=r.error or "command failed",
                          output_tail=r.output_tail[-512:])
        return Result(FAILED, error="a sensor needs one of file, http_url, command")
