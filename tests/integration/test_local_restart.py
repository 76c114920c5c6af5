"""`schedd local` stopped and started again at once comes back on the ports it was given:
the ports its nodes just closed are in TIME_WAIT, which the nodes' servers bind through
(SO_REUSEADDR). Before, the free-port check bound without it, found them taken and moved the
cluster to other ports for about a minute. Its banner also tells the second terminal to
activate the virtualenv schedctl is installed in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schedd.runtime.cluster import restartable_ports

pytestmark = pytest.mark.integration

UP = "Ctrl-C stops everything"


def _up(tmp: Path, base: int) -> str:
    """Run `schedd local --base-port base` until its banner is out, Ctrl-C it; its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_") or k == "SCHEDD_PORT_BAND"}
    env["TMPDIR"] = str(tmp)
    proc = subprocess.Popen([sys.executable, "-m", "schedd", "local", "--base-port", str(base), "--no-demo"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                            text=True)
    out: list[str] = []
    deadline = time.monotonic() + 120
    try:
        for line in proc.stdout:
            out.append(line)
            if UP in line or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        out.append(proc.stdout.read())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    text = "".join(out)
    assert UP in text, text
    return text


def test_a_quick_restart_keeps_its_ports_and_the_banner_says_to_activate(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    base = restartable_ports(9)
    first = _up(tmp_path, base)
    assert f"gRPC 127.0.0.1:{base}" in first, first
    assert "/bin/activate" in first and "schedctl is installed in this virtualenv" in first
    second = _up(tmp_path, base)                  # at once: the ports the first closed are in TIME_WAIT
    assert "not all free" not in second, second
    assert f"gRPC 127.0.0.1:{base}" in second, second
