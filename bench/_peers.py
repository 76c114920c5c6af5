"""The peers' venv and how the bench runs a peer: APScheduler is never a dependency of schedd;
the bench installs it on first use into bench/.peers-venv (``python -m venv`` + pip, through the
ordinary index) and runs bench/_peer_aps.py there as a subprocess. If it cannot be installed the
peer columns say "unavailable" and everything else still runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = Path(os.environ.get("SCHEDD_BENCH_PEERS_VENV", HERE / ".peers-venv"))
REQUIREMENTS = ["apscheduler==3.11.*", "sqlalchemy>=2.0"]
PEERS = ("aps-memory", "aps-sqlite")


def python() -> Path:
    return VENV / "bin" / "python"


def _works() -> bool:
    if not python().exists():
        return False
    r = subprocess.run([str(python()), "-c", "import apscheduler, sqlalchemy; print(apscheduler.__version__)"],
                       capture_output=True, text=True, timeout=60)
    return r.returncode == 0 and r.stdout.startswith("3.11")


def ensure(log=print) -> str | None:
    """None when the peers' venv works (created now if missing), else why not (one line)."""
    try:
        if _works():
            return None
        log(f"  installing the peers (APScheduler 3.11, SQLAlchemy) into {VENV} ...")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True, timeout=300)
        r = subprocess.run([str(python()), "-m", "pip", "install", "-q", *REQUIREMENTS],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            return "pip install failed: " + (r.stderr.strip().splitlines() or ["?"])[-1]
        return None if _works() else "apscheduler does not import in the peers' venv"
    except (OSError, subprocess.SubprocessError) as e:
        return f"{type(e).__name__}: {e}"


def version() -> str:
    r = subprocess.run([str(python()), "-c", "import apscheduler, sqlalchemy; "
                        "print(apscheduler.__version__, sqlalchemy.__version__)"],
                       capture_output=True, text=True, timeout=60)
    return "APScheduler {} (SQLAlchemy {})".format(*r.stdout.split()) if r.returncode == 0 else "?"


def run(spec: dict, timeout: float) -> dict:
    """Run one peer workload (bench/_peer_aps.py) and return its JSON answer."""
    r = subprocess.run([str(python()), str(HERE / "_peer_aps.py"), json.dumps(spec)],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"peer {spec.get('store')} {spec.get('kind')} failed: "
                           + (r.stderr.strip().splitlines() or ["?"])[-1])
    return json.loads(r.stdout.strip().splitlines()[-1])
