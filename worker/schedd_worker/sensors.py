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
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping

from schedd_worker import executors as X

NOT_READY = "NOT_READY"


async def check(a: X.Assignment, spec: Mapping, cancel: asyncio.Event | None, grace: float,
                http: X.HttpOptions = X.HttpOptions()) -> X._Result:
    if not isinstance(spec, Mapping):
        return X._Result(X.FAILED, error="sensor must be an object")
    loop = asyncio.get_running_loop()
    timeout = float(a.timeout_s or 0)
    deadline = loop.time() + timeout if timeout > 0 else None
    if spec.get("file"):
        path = str(spec["file"])
        if os.path.exists(path):
            return X._Result(X.SUCCEEDED, output_tail=f"{path} exists")
        return X._Result(NOT_READY, error=f"{path} does not exist")
    if spec.get("http_url"):
        r = await X._run_http(a, {"url": spec["http_url"], "method": "GET"}, cancel, deadline, http)
        if r.state == X.CANCELLED:
            return r
        if r.state == X.SUCCEEDED and r.http_status == 200:
            return X._Result(X.SUCCEEDED, http_status=200, output_tail=r.output_tail[-512:])
        why = r.error or f"HTTP {r.http_status}, not 200"
        return X._Result(NOT_READY, http_status=r.http_status or 0, error=why)
    if spec.get("command"):
        r = await X._run_shell(a, {"command": spec["command"]}, cancel, deadline, grace)
        if r.state in (X.SUCCEEDED, X.CANCELLED):
            return r
        return X._Result(NOT_READY, exit_code=r.exit_code, error=r.error or "command failed",
                         output_tail=r.output_tail[-512:])
    return X._Result(X.FAILED, error="a sensor needs one of file, http_url, command")
