"""Helpers for the schedctl security tests: run schedctl in-process or as a user would (a fresh
process) against the fake cluster of tests/support/fake_api.py, and check that an error is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

import pytest

from schedd_client.schedctl import main
from tests.support.fake_api import NOW_MS
from tests.support.schedctl import fake  # noqa: F401 - the fake-cluster fixture, re-exported

SCHEDCTL = [sys.executable, "-c", "import sys; from schedd_client.schedctl import main; sys.exit(main())"]


def run_in_process(capsys: pytest.CaptureFixture[str], cluster: str, *argv: str) -> tuple[int, str, str]:
    """``schedctl --cluster CLUSTER ARGV...`` through ``main``: (exit status, stdout, stderr)."""
    capsys.readouterr()
    code = main(["--cluster", cluster, "--timeout", "5", *argv], now=lambda: NOW_MS / 1000)
    out, err = capsys.readouterr()
    return code, out, err


def run_process(cluster: str, *argv: str, env: Mapping[str, str] | None = None, stdout=subprocess.PIPE,
                limit_memory: int | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """schedctl in a fresh process (bytes out); ``limit_memory`` caps its address space in bytes.
    The child sets the cap itself: a ``preexec_fn`` is unsafe in a parent with threads (gRPC's)."""
    prelude = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit_memory}, {limit_memory})); " \
        if limit_memory else ""
    command = [sys.executable, "-c", prelude + SCHEDCTL[2]]
    return subprocess.run(
        [*command, "--cluster", cluster, "--timeout", "10", *argv], stdout=stdout, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, timeout=timeout, env={**os.environ, **(env or {})})


def assert_one_line_error(err: str, *, contains: str = "") -> None:
    """The error is a single short ``schedctl...error: ...`` line: no traceback, no huge value."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    message = lines[-1] if lines else ""
    # argparse puts its (wrapped) usage above the error line; anything else is one line
    usage = lines[:-1]
    assert not usage or (usage[0].startswith("usage:") and all(u.startswith(" ") for u in usage[1:])), err
    assert message.startswith("schedctl") and "error: " in message, err
    assert len(message) < 500, f"{len(message)} characters: {message[:300]}..."
    assert contains in message, err
