"""What a newcomer meets first, as a user runs it: `schedctl completion bash|zsh|fish` completes
groups, commands, options and their choices; tables are coloured on a terminal and never in a
pipe or with NO_COLOR; `schedd` alone prints its help; `schedd-worker --version` answers; and
`quota list` shows the quotas that exist, no row for a team that only runs attempts."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys

import pytest

from schedd.ports.fakes import wait_until
from schedd_client import job_spec
from tests.support.cluster import schedctl
from tests.support.fake_api import NOW_MS, FakeCluster, add_execution

pytestmark = pytest.mark.integration

SCHEDCTL = [sys.executable, "-m", "schedd_client.schedctl"]


def completions(script: str, line: str) -> list[str]:
    """What bash offers for `line` (ending in a space: a new word) with `script` loaded."""
    probe = (f"{script}\nread -ra COMP_WORDS <<< {line!r}\n"
             + ("COMP_WORDS+=('')\n" if line.endswith(" ") else "")
             + "COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _schedctl_complete; printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30, check=True).stdout
    return out.split()


def test_completion_scripts():
    bash = subprocess.run([*SCHEDCTL, "completion", "bash"], capture_output=True, text=True, timeout=30, check=True,
                          env={**os.environ, "SCHEDD_CONTEXT": "/nonexistent"}).stdout   # needs no cluster
    assert completions(bash, "schedctl jo") == ["job"]
    assert {"create", "apply", "diff", "delete", "get"} <= set(completions(bash, "schedctl job "))
    assert completions(bash, "schedctl job create --sche") == ["--schedule"]
    assert completions(bash, "schedctl -o ") == ["table", "wide", "json", "yaml"]
    assert completions(bash, "schedctl -o yaml job di") == ["diff"]          # an option's value is skipped
    assert completions(bash, "schedctl completion ") == ["bash", "zsh", "fish"]
    zsh = subprocess.run([*SCHEDCTL, "completion", "zsh"], capture_output=True, text=True, timeout=30, check=True).stdout
    assert "bashcompinit" in zsh and "complete -o default -F _schedctl_complete schedctl" in zsh
    fish = subprocess.run([*SCHEDCTL, "completion", "fish"], capture_output=True, text=True, timeout=30, check=True).stdout
    assert "__fish_seen_subcommand_from job; and __fish_seen_subcommand_from create' -l schedule" in fish
    for shell, text in (("zsh", zsh), ("fish", fish)):
        if shutil.which(shell):                  # where the shell is installed, it parses the script
            subprocess.run([shell, "-n"], input=text, text=True, check=True, timeout=30)
    bad = subprocess.run([*SCHEDCTL, "completion", "tcsh"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2


def run_on_a_terminal(argv: list[str], env: dict[str, str]) -> str:
    """stdout of `argv` when stdout is a terminal (a pseudo-terminal), as a person sees it."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdout=follower, stderr=subprocess.PIPE, env=env)
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:                       # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=60)
        return b"".join(chunks).decode()
    finally:
        os.close(leader)


def test_colour_on_a_terminal_never_in_a_pipe():
    fake = FakeCluster(1)
    try:
        fake.add_job("a")
        add_execution(fake.state, "a", NOW_MS - 60_000, "FAILED")
        add_execution(fake.state, "a", NOW_MS - 120_000, "SUCCEEDED")
        argv = [*SCHEDCTL, "--cluster", fake.cluster, "run", "list", "a"]
        env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM") and not k.startswith("SCHEDD_")}
        shown = run_on_a_terminal(argv, {**env, "TERM": "xterm"})
        assert "\x1b[31mFAILED\x1b[0m" in shown and "\x1b[32mSUCCEEDED\x1b[0m" in shown
        piped = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert piped.returncode == 0 and "FAILED" in piped.stdout and "\x1b" not in piped.stdout
        plain = run_on_a_terminal(argv, {**env, "TERM": "xterm", "NO_COLOR": "1"})
        assert "FAILED" in plain and "\x1b[" not in plain
    finally:
        fake.stop()


def test_schedd_alone_prints_help_and_the_worker_says_its_version():
    alone = subprocess.run([sys.executable, "-m", "schedd"], capture_output=True, text=True, timeout=60)
    assert alone.returncode == 0 and alone.stdout.startswith("usage: schedd") and "local" in alone.stdout
    version = subprocess.run([sys.executable, "-m", "schedd_worker", "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("schedd-worker ") and "protocol" in version.stdout


def test_quota_list_has_no_row_for_a_team_without_a_quota(cluster_factory):
    c = cluster_factory(size=1)
    c.start()
    c.wait_leader(timeout=60)
    c.start_worker("w1", slots=2)
    client = c.client(timeout=30)
    wait_until(lambda: client.list_workers().workers, timeout=30, what="the worker to connect")
    schedctl(c, "quota", "set", "team:capped", "3")
    client.put_job(job_spec("busy", command="sleep 30", team="free"))
    run = client.trigger_job("busy")
    wait_until(lambda: client.get_execution(run.id).state == "RUNNING", timeout=30, what="busy to run")
    keys = [line.split()[0] for line in schedctl(c, "quota", "list").stdout.splitlines()[1:]]
    assert keys == ["lane:backfill", "team:capped"]          # no "team:free": it has no quota
    client.cancel_execution(run.id)
    client.close()
