"""Isolation with nothing configured: `schedd local` started as root runs each team's
jobs as a uid of the team's own, never root. Two teams' long-running jobs (each holding a secret
env value in its environment and a file in its working folder) and a probe job of the first
team: the probe is not root, cannot read the other team's /proc/<pid>/environ or files, cannot
kill its process, and cannot read the worker's /proc/<pid>/environ (its token), while it can
read its own team's job's environment (the control: the probe's method works). A container job
of the first team runs, with nothing configured, as that team's uid with no capability (the
worker's broker runs it: schedd_worker.handlers.container_broker)."""

from __future__ import annotations

import os
import re
import secrets
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import Client, job_spec
from tests.support.cluster import finished, stop_local

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="schedd local isolates jobs only as root")]


def pids_with(marker: str) -> list[int]:
    """The processes whose command line holds `marker` (as root: every process is visible)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    out.append(int(entry))
            except OSError:
                pass
    return out


def uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))


def holder(team: str, secret: str, marker: str):
    """A job that keeps `secret` in its environment and a file in its folder, running long."""
    return job_spec(f"hold-{team}", schedule="", team=team, env_secret={"SECRET": secret},
                    timeout=300,
                    command=f': {marker}; echo "$SECRET" > held; sleep 300 & wait')


def probe(pid_own: int, pid_other: int, folder_other: str, pid_worker: int) -> str:
    return "; ".join([
        'echo "uid=$(id -u)"',
        f"tr '\\0' '\\n' < /proc/{pid_own}/environ | grep -q '^SECRET=' && echo own-env-ok",
        f"cat /proc/{pid_other}/environ > /dev/null 2>&1 && echo LEAK-ENV-OTHER",
        f"cat {folder_other}/held > /dev/null 2>&1 && echo LEAK-FILE-OTHER",
        f"ls {folder_other} > /dev/null 2>&1 && echo LEAK-LIST-OTHER",
        f"cat /proc/{pid_worker}/environ > /dev/null 2>&1 && echo LEAK-ENV-WORKER",
        f"head -c1 /proc/{pid_worker}/mem > /dev/null 2>&1 && echo LEAK-MEM-WORKER",
        f"kill -KILL {pid_other} 2> /dev/null && echo LEAK-KILL-OTHER",
        "echo probe-done"])


def test_schedd_local_as_root_runs_each_team_as_its_own_uid(tmp_path: Path, request) -> None:
    from tests.support.containers import why_not
    image = request.getfixturevalue("container_image") if not why_not() else None
    data, log = tmp_path / "local", tmp_path / "local.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "schedd", "local", "--data-dir", str(data),
                                 "--base-port", "0", "--no-demo"], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    tag = secrets.token_hex(4)
    marks = {team: f"marker-{team}-{tag}" for team in ("alpha", "beta")}
    client = None
    try:
        wait_until(lambda: "Jobs run as uids" in log.read_text(), timeout=120,
                   what="schedd local up")
        text = log.read_text()
        [context] = re.findall(r"export SCHEDD_CONTEXT=(\S+)", text)
        [work] = re.findall(r"each team's working folder is in (\S+?)\.\n", text)
        [worker_pid] = [int(p) for p in re.findall(r"worker local-worker, \d+ slots, pid (\d+)", text)]
        assert "--allow-root" not in Path(f"/proc/{worker_pid}/cmdline").read_text()
        assert b"SCHEDD_TOKEN=" in Path(f"/proc/{worker_pid}/environ").read_bytes()   # what is kept
        client = Client.from_context(context, timeout=30)

        values = {team: f"pw-{team}-{secrets.token_hex(8)}" for team in marks}
        for team in marks:
            client.put_job(holder(team, values[team], marks[team]))
            client.trigger_job(f"hold-{team}")
        folders = {team: Path(work) / team for team in marks}
        wait_until(lambda: all(pids_with(m) for m in marks.values())
                   and all((folders[t] / "held").exists() for t in marks), timeout=90,
                   what="both teams' jobs running")
        pids = {team: min(pids_with(m)) for team, m in marks.items()}
        uids = {team: uid_of(pid) for team, pid in pids.items()}
        assert 0 not in uids.values() and uids["alpha"] != uids["beta"], uids
        for team, folder in folders.items():
            st = folder.stat()
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uids[team], 0o700), (team, st)
            assert (folder / "held").read_text().strip() == values[team]
        state = Path(work).parent / "team-uids.json"
        assert stat.S_IMODE(state.stat().st_mode) == 0o600 and state.stat().st_uid == 0

        client.put_job(job_spec("probe", schedule="", team="alpha", timeout=60,
                                command=probe(pids["alpha"], pids["beta"], str(folders["beta"]),
                                              worker_pid)))
        eid = client.trigger_job("probe").id
        ex = wait_until(lambda: finished(client, eid), timeout=90, what="the probe to finish")
        output = ex.attempts[-1].output_tail
        assert ex.state == "SUCCEEDED" and "probe-done" in output, ex
        assert f"uid={uids['alpha']}\n" in output
        assert "own-env-ok" in output, output                 # the control: the method works
        assert "LEAK" not in output, output
        assert pids_with(marks["beta"]) and uid_of(pids["beta"]) == uids["beta"]   # still alive

        # container jobs, with nothing configured either: run by the worker's broker, as the team's uid
        if image is not None:
            client.put_job(job_spec("boxed", schedule="", team="alpha", timeout=60, container={
                "image": image, "command": "echo uid=$(id -u); grep CapEff /proc/self/status"}))
            eid = client.trigger_job("boxed").id
            ex = wait_until(lambda: finished(client, eid), timeout=90, what="the container job to finish")
            assert ex.state == "SUCCEEDED", ex
            assert f"uid={uids['alpha']}\n" in ex.attempts[-1].output_tail
            assert "CapEff:\t0000000000000000" in ex.attempts[-1].output_tail
    finally:
        if client is not None:
            client.close()
        stop_local(proc, timeout=90)
        left = [p for m in marks.values() for p in pids_with(m)]   # the worker drains: none
        for pid in left:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    text = log.read_text()
    assert "schedd local: stopped" in text
    assert not left, "schedd local left its jobs running"
    assert not Path(work).parent.exists()                   # the jobs' folder went with it
