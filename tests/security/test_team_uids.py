"""A uid per team from a range (schedd_worker.uids), the worker's choices around it
(schedd_worker.cli: --uid-range, --isolation require, the non-root warning) and where Python
handlers may run. The end-to-end check under `schedd local` is
tests/integration/test_local_isolation.py."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest

from schedd_worker import cli
from schedd_worker.config import ConfigError, parse_config
from schedd_worker.executors import FAILED, SUCCEEDED, Assignment, Isolation, execute
from schedd_worker.handlers.shell import job_environment
from schedd_worker.isolation import IsolationPolicy, TeamUser
from schedd_worker.uids import STATE_FILE, TeamUids, UidError, parse_range
from tests.support.users import reachable_scratch

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown, setuid)")


@pytest.fixture
def traversable():
    with reachable_scratch("schedd-uids-") as d:
        yield d


def no_accounts(uid: int) -> bool:
    return False


def table(base: Path, first: int = 61000, last: int = 61009, **kw) -> TeamUids:
    u = TeamUids(first, last, base / "state", exists=kw.pop("exists", no_accounts), **kw)
    u.prepare()
    return u


def test_a_state_dir_the_teams_cannot_reach_stops_the_worker(traversable):
    """A job's uid traverses every folder above its own: a 0700 one (pytest's tmp tree, /root)
    would fail every job of every team with exit 126, so the worker refuses it at start."""
    hidden = traversable / "hidden"
    hidden.mkdir(0o700)
    u = TeamUids(61000, 61009, hidden / "state", exists=no_accounts)
    with pytest.raises(UidError, match=r"hidden is mode 0700.*chmod o\+x"):
        u.prepare()
    hidden.chmod(0o711)
    table(hidden)


def test_a_team_keeps_its_uid_and_two_teams_never_share_one(traversable):
    u = table(traversable)
    uids = {team: u.uid_of(team) for team in ("a", "b", "c", "payments", "x.y-z_1")}
    assert len(set(uids.values())) == len(uids)                       # distinct
    assert all(61000 <= uid <= 61009 for uid in uids.values())        # bounded
    assert {t: u.uid_of(t) for t in uids} == uids                     # stable in this process
    again = table(traversable)                                           # a restarted worker
    assert {t: again.uid_of(t) for t in reversed(list(uids))} == uids   # persisted, whatever order
    doc = json.loads((traversable / "state" / STATE_FILE).read_text())
    assert doc["teams"] == uids
    for name in (STATE_FILE, "team-uids.lock"):        # the worker's own files: its alone
        st = (traversable / "state" / name).stat()
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid(), name
    assert sorted(p.name for p in (traversable / "state").iterdir()) == [STATE_FILE, "team-uids.lock", "work"]
    assert stat.S_IMODE((traversable / "state").stat().st_mode) == 0o711
    assert stat.S_IMODE((traversable / "state" / "work").stat().st_mode) == 0o711


def test_two_workers_sharing_a_state_dir_agree(traversable):
    one, two = table(traversable), table(traversable)
    a, b = one.uid_of("a"), two.uid_of("b")
    assert a != b and two.uid_of("a") == a and one.uid_of("b") == b


def test_the_range_is_bounded_and_accounts_and_mapped_uids_are_skipped(traversable):
    u = table(traversable, 61000, 61003, taken=frozenset({61001}), exists=lambda uid: uid == 61002)
    got = {u.uid_of("a"), u.uid_of("b")}
    assert got == {61000, 61003}
    with pytest.raises(UidError, match="no free uid left in 61000-61003"):
        u.uid_of("c")
    with pytest.raises(UidError, match="not a team name"):
        u.uid_of("../etc")
    with pytest.raises(UidError, match="not a team name"):
        u.uid_of("")


def test_a_narrowed_range_drops_entries_outside_it(traversable):
    wide = table(traversable, 61000, 61999)
    uid = wide.uid_of("a")
    narrow = table(traversable, uid + 1, uid + 3)
    assert uid + 1 <= narrow.uid_of("a") <= uid + 3


def test_ranges_and_the_config_are_checked():
    assert parse_range("61000-61999") == (61000, 61999)
    for bad, why in (("0-10", "below 1000"), ("500-2000", "below 1000"), ("62000-61000", "FIRST <= LAST"),
                     ("61000", "FIRST-LAST"), ("a-b", "FIRST-LAST")):
        with pytest.raises(UidError, match=why):
            parse_range(bad)
    cfg = parse_config('[isolation]\nuid_range = "61000-61999"\nstate_dir = "/srv/w"\nrequire = true\n')
    assert (cfg.uid_range, cfg.state_dir, cfg.require) == ((61000, 61999), "/srv/w", True)
    for text, why in (('[isolation]\nuid_range = "0-99"', "uid_range: uid range"),
                      ('[isolation]\nuid_range = 61000', "uid_range: expected str"),
                      ('[isolation]\nstate_dir = "rel"', "state_dir: an absolute path"),
                      ('[isolation]\nrequire = "yes"', "require: expected bool")):
        with pytest.raises(ConfigError, match=why):
            parse_config(text)
    assert parse_config("").uid_range is None


def test_a_non_root_worker_warns_and_refuses_when_isolation_is_required(tmp_path, capsys):
    """euid injected: the suite runs as root, the worker plays a laptop user."""
    assert cli.main(["--cluster", "127.0.0.1:1", "--isolation", "require"], euid=1000) == 2
    err = capsys.readouterr().err
    assert "isolation is required" in err and "uid 1000" in err and "container" in err
    config = tmp_path / "w.toml"
    config.write_text("[isolation]\nrequire = true\n")
    assert cli.main(["--cluster", "127.0.0.1:1", "--config", str(config)], euid=1000) == 2
    assert "isolation is required" in capsys.readouterr().err
    # root with --allow-root runs every job as root: not isolation either
    assert cli.main(["--cluster", "127.0.0.1:1", "--allow-root", "--isolation", "require"], euid=0) == 2
    assert "every job runs as root" in capsys.readouterr().err
    # what separates, and what does not
    ranged = IsolationPolicy(uids=TeamUids(61000, 61999, tmp_path))
    own = IsolationPolicy(teams={"a": TeamUser("a", "me", 1000, 1000, (), "/")})
    assert cli.separation(0, ranged, can_switch=True) == ""
    assert cli.separation(1000, ranged, can_switch=False) != ""
    assert "uid 1000" in cli.separation(1000, own, can_switch=True)
    assert "uid 1000" in cli.separation(1000, IsolationPolicy(), can_switch=False)


def test_a_non_root_worker_says_once_that_jobs_share_its_uid(tmp_path, caplog):
    """It starts (and here stops at its missing CA file, before connecting) after one WARNING."""
    missing = str(tmp_path / "missing-ca.pem")
    with caplog.at_level("WARNING", logger="schedd.worker"):
        assert cli.main(["--cluster", "127.0.0.1:1", "--ca", missing], euid=1000) == 2
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "uid 1000" in warned[0] and "container jobs" in warned[0], warned


def test_a_root_worker_without_range_or_mapping_still_refuses(capsys):
    assert cli.main(["--cluster", "127.0.0.1:1"], euid=0) == 2
    assert "--uid-range" in capsys.readouterr().err


def test_python_runs_in_the_worker_so_a_root_worker_refuses_it(tmp_path):
    """Python handlers run inside the worker process: as root there, whatever the team's uid."""
    ranged = IsolationPolicy(uids=TeamUids(61000, 61999, tmp_path), worker_uid=0)
    assert "runs as root here" in ranged.refusal("a", "python")
    assert ranged.refusal("a", "shell") == ""
    allowed = TeamUser("a", "jobs", 1234, 1234, (), "/", allow_python=True)
    assert "runs as root here" in IsolationPolicy(teams={"a": allowed}, worker_uid=0).refusal("a", "python")
    assert IsolationPolicy(teams={"a": allowed}, worker_uid=1000).refusal("a", "python") == ""
    own = TeamUser("a", "me", 1000, 1000, (), "/")
    assert IsolationPolicy(teams={"a": own}, worker_uid=1000).refusal("a", "python") == ""


def test_a_worker_advertises_python_only_where_some_team_could_run_it(tmp_path):
    """The leader routes by the kinds a worker advertises: a root worker that separates teams
    (where Python is refused for all) and a worker without a registry leave Python jobs to SDK
    workers that can run them, instead of failing them."""
    from schedd_worker.executors import HttpOptions, Isolation, PythonHandlers, handlers_for
    registry, http = PythonHandlers(), HttpOptions()
    ranged = IsolationPolicy(uids=TeamUids(61000, 61999, tmp_path), worker_uid=0)
    assert "python" not in handlers_for(registry, http, Isolation(ranged))
    assert "python" not in handlers_for(None, http)
    assert "python" in handlers_for(registry, http)
    rooted = TeamUser("ops", "root", 0, 0, (), "/")
    assert "python" in handlers_for(registry, http, Isolation(IsolationPolicy(teams={"ops": rooted}, worker_uid=0)))
    assert "python" in handlers_for(registry, http, Isolation(IsolationPolicy(teams={"a": rooted}, worker_uid=1000)))


def test_the_worker_secrets_never_reach_a_job_environment():
    a = Assignment(execution_id="j@2026-11-29T02:00:00Z", job="j", scheduled_ms=1795917600000,
                   attempt=1, fencing_token=7, handler={})
    worker_env = {"PATH": "/bin", "SCHEDD_TOKEN": "w.secret", "SCHEDD_CONTEXT": "/etc/ctx",
                  "SCHEDD_KEY": "/k.pem", "AWS_REGION": "eu"}
    env = job_environment(a, {"inherit_env": ["SCHEDD_TOKEN", "SCHEDD_CONTEXT", "SCHEDD_KEY",
                                              "AWS_REGION"]}, worker_env)
    assert env["AWS_REGION"] == "eu"
    assert not {"SCHEDD_TOKEN", "SCHEDD_CONTEXT", "SCHEDD_KEY"} & set(env)


@needs_root
def test_a_team_runs_as_its_uid_in_its_own_private_folder(traversable):
    uids = TeamUids(61000, 61999, traversable / "state")
    uids.prepare()
    iso = Isolation(policy=IsolationPolicy(uids=uids, worker_uid=0))

    def run(team: str, command: str, workdir: str = ""):
        a = Assignment(execution_id="j@2026-11-29T02:00:00Z", job="j", scheduled_ms=1795917600000,
                       attempt=1, fencing_token=7, team=team, timeout_s=60,
                       handler={"shell": {"command": command, "workdir": workdir}})
        return asyncio.run(execute(a, isolation=iso))

    out = run("a", 'echo "uid=$(id -u) gid=$(id -g) groups=$(id -G) home=$HOME pwd=$(pwd)"; '
                   'echo mine > file')
    assert out.state == SUCCEEDED, out
    uid_a = uids.uid_of("a")
    folder = traversable / "state" / "work" / "a"
    assert f"uid={uid_a} gid={uid_a} groups={uid_a} home={folder} pwd={folder}" in out.output_tail
    st = folder.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (uid_a, uid_a, 0o700)
    assert (folder / "file").stat().st_uid == uid_a
    out = run("b", f'cat {folder}/file || echo refused; ls {traversable / "state" / "work"} || echo no-list')
    assert out.state == SUCCEEDED and "mine" not in out.output_tail, out
    assert "refused" in out.output_tail and "no-list" in out.output_tail
    out = run("a", "pwd", workdir="../b")
    assert out.state == FAILED and "outside the team's workdir_root" in out.error


@needs_root
@pytest.mark.parametrize("undumpable", [False, True])
def test_a_non_dumpable_worker_hides_its_environment_from_its_own_uid(undumpable):
    """The laptop case: a job runs as the worker's own uid. Non-dumpable, the worker's
    /proc/<pid>/environ (its token) is root's; the control (dumpable) shows the job could read it."""
    import subprocess
    import sys
    uid = 61998
    # Started as root (the interpreter lives under /root), then the worker's uid; a uid change
    # clears the dumpable flag, so the control sets it back first.
    code = ("import ctypes, os, time\n"
            "from schedd_worker import caps\n"
            f"os.setgroups([]); os.setgid({uid}); os.setuid({uid})\n"
            "ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)\n"
            f"{'caps.make_undumpable()' if undumpable else ''}\n"
            "print('ready', flush=True); time.sleep(60)\n")
    worker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "SCHEDD_TOKEN": "w.hidden"})
    try:
        assert worker.stdout.readline().strip() == "ready"
        job = subprocess.run(["cat", f"/proc/{worker.pid}/environ"], user=uid, group=uid,
                             extra_groups=[], capture_output=True, timeout=30)
        assert (b"SCHEDD_TOKEN=w.hidden" in job.stdout) is (not undumpable), job
    finally:
        worker.kill()
        worker.wait(timeout=30)
