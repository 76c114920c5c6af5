"""The README's Python examples run as written against `schedd local`: the code blocks are taken
from README.md itself, so an example that drifts from the SDK fails here. The SDK example uses
`Client()` with no arguments (the printed SCHEDD_CONTEXT), the worker example
`Worker.from_context()` (the printed SCHEDD_WORKER_CONTEXT) and a Python handler that a job runs
(as root with `allow_root=True`, as the README tells a root user)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import Client, RunState
from tests.support.cluster import stop_local

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_sdk_and_worker_examples_run_against_schedd_local(tmp_path: Path) -> None:
    sdk, worker = python_blocks(README.read_text())[:2]
    assert "Client()" in sdk and "Worker.from_context(" in worker
    data, log = tmp_path / "local", tmp_path / "local.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}
    with open(log, "w") as out:
        local = subprocess.Popen([sys.executable, "-m", "schedd", "local", "--data-dir", str(data),
                                  "--base-port", "0"], stdout=out, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
    runner = None
    try:
        wait_until(lambda: "export SCHEDD_WORKER_CONTEXT=" in log.read_text(), timeout=120,
                   what="schedd local up")
        text = log.read_text()
        [context] = re.findall(r"export SCHEDD_CONTEXT=(\S+)", text)
        [worker_context] = re.findall(r"export SCHEDD_WORKER_CONTEXT=(\S+)", text)
        env["SCHEDD_CONTEXT"] = context

        ran = subprocess.run([sys.executable, "-c", sdk], env=env, capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, ran.stderr
        first, second = ran.stdout.splitlines()
        assert first == "nightly version 1"
        assert second.startswith("nightly@") and second.endswith(" SCHEDULED")

        if os.geteuid() == 0:          # what the README tells a root user to add
            worker = worker.replace('Worker.from_context(pool="mine")',
                                    'Worker.from_context(pool="mine", allow_root=True)')
            assert "allow_root=True" in worker
        output = tmp_path / "worker-example.log"      # a file, not a pipe nobody reads while it runs
        with open(output, "w") as out:
            runner = subprocess.Popen([sys.executable, "-c", worker], stdout=out, stderr=subprocess.STDOUT,
                                      env={**env, "SCHEDD_WORKER_CONTEXT": worker_context})
        with Client.from_context(context) as client:
            def greeted():
                if runner.poll() is not None:              # the example ended: say why at once
                    raise AssertionError(f"the worker example exited {runner.returncode}: {output.read_text()}")
                if "greet" not in {j.spec.name for j in client.list_jobs()}:
                    return None
                runs = list(client.list_executions("greet", limit=1))
                return runs and RunState(runs[0].state).finished and runs[0]
            run = wait_until(greeted, timeout=90, what="the README's worker to run greet")
            assert run.state == RunState.SUCCEEDED, run
            assert "hello world" in client.get_execution(run.id).attempts[-1].output_tail
        runner.send_signal(signal.SIGINT)                  # Ctrl-C: drains and returns
        assert runner.wait(timeout=60) == 0, output.read_text()
    finally:
        if runner is not None and runner.poll() is None:
            runner.kill()
            runner.wait(timeout=10)
        stop_local(local, timeout=60)
