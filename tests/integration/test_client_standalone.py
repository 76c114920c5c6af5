"""The client stands alone: schedd_client and schedctl work against a real 3-node
cluster in a process whose import system refuses the daemon and every daemon-only dependency,
and the worker package imports without the daemon. The distributions' declared dependencies
say the same (`pip install ./client` pulls nothing of the daemon)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DAEMON_ONLY = ("schedd", "pysyncobj", "croniter", "prometheus_client", "sortedcontainers")

# Installed first on sys.meta_path: importing any refused name (or a submodule) raises ImportError,
# whatever else could find it (the editable installs, the repository on sys.path).
_REFUSE = """
import sys

REFUSED = {refused!r}


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ImportError(f"{{name}} is refused in this process")
        return None


sys.meta_path.insert(0, Refuse())
"""


def _run_refusing(refused: tuple[str, ...], body: str, timeout: float = 120) -> dict:
    script = _REFUSE.format(refused=refused) + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, cwd=ROOT)       # the repository on sys.path too
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return json.loads(p.stdout.splitlines()[-1])


def test_the_refusing_finder_refuses() -> None:
    """The negative control: the same finder makes an import of the daemon fail."""
    out = _run_refusing(DAEMON_ONLY, """
        import json
        try:
            import schedd.core.schedule  # noqa: F401
            got = "imported"
        except ImportError as e:
            got = str(e)
        print(json.dumps({"got": got}))
    """)
    assert out["got"] == "schedd is refused in this process"


def test_schedctl_and_sdk_work_without_the_daemon(cluster_factory) -> None:
    c = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=60)
    out = _run_refusing(DAEMON_ONLY + ("schedd_worker",), """
        import contextlib, io, json, sys
        import schedd_client
        from schedd_client import Client, job_spec
        from schedd_client.schedctl import main

        def schedctl(*args):
            buf, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
                code = main(["--context", CONTEXT, *args])
            return {"code": code, "out": buf.getvalue(), "err": err.getvalue()}

        runs = {
            "create": schedctl("job", "create", "berlin", "--schedule", "30 2 * * *",
                               "--tz", "Europe/Berlin", "--command", "true"),
            "list": schedctl("job", "list", "-o", "json"),
            "get": schedctl("job", "get", "berlin", "--next", "2", "-o", "json"),
            "get_table": schedctl("job", "get", "berlin", "--next", "2"),
            "next": schedctl("job", "next", "berlin", "--count", "2", "-o", "json"),
            "status": schedctl("cluster", "status", "-o", "json"),
        }
        with Client.from_context(CONTEXT) as client:
            sdk = client.get_job("berlin", upcoming=1).spec.timezone
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in REFUSED)
        print(json.dumps({"runs": runs, "sdk": sdk, "loaded": loaded}))
    """.replace("CONTEXT", repr(str(c.write_context()))))
    runs = out["runs"]
    for name, r in runs.items():
        assert (r["code"], r["err"]) == (0, ""), (name, r)
    assert out["loaded"] == [] and out["sdk"] == "Europe/Berlin"
    assert [j["spec"]["name"] for j in json.loads(runs["list"]["out"])] == ["berlin"]
    job = json.loads(runs["get"]["out"])
    assert job["spec"]["schedule"] == "30 2 * * *" and len(job["upcoming_ms"]) == 2
    # what the server renders for the CLI: the fire in Berlin, its zone's abbreviation
    assert "T02:30:00+0" in runs["get_table"]["out"] and ("CET" in runs["get_table"]["out"]
                                                         or "CEST" in runs["get_table"]["out"])
    fires = json.loads(runs["next"]["out"])["fires"]
    assert len(fires) == 2 and all("T02:30:00+0" in f["local"] for f in fires)
    status = json.loads(runs["status"]["out"])
    assert status["leader_id"] and len(status["nodes"]) == 3


def test_the_worker_imports_without_the_daemon() -> None:
    out = _run_refusing(DAEMON_ONLY, """
        import json, sys
        import schedd_worker.cli, schedd_worker.executors, schedd_worker.runtime, schedd_worker.sdk
        from schedd_worker import Worker
        from schedd_worker.handlers import base, http, python, sensor, shell  # noqa: F401
        schedd_worker.cli.build_parser().parse_args(["--slots", "2"])
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in REFUSED)
        print(json.dumps({"loaded": loaded, "worker": Worker.__name__}))
    """)
    assert out == {"loaded": [], "worker": "Worker"}


def test_declared_dependencies_keep_the_client_and_worker_apart_from_the_daemon() -> None:
    def deps(path: str) -> set[str]:
        project = tomllib.loads((ROOT / path).read_text())["project"]
        return {d.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
                for d in project["dependencies"]}

    assert deps("client/pyproject.toml") <= {"grpcio", "protobuf", "pyyaml", "tabulate"}
    assert deps("worker/pyproject.toml") == {"schedd-client"}
    assert {"schedd-client", "pysyncobj", "croniter"} <= deps("pyproject.toml")
