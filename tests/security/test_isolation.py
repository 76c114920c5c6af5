"""Least-privilege execution on a worker (schedd_worker.isolation, .config, .caps, .cgroups):
a team's shell jobs run as the Unix user its mapping names, an unmapped team and root are
refused, rlimits apply inside the job, secret env reaches the handler, and a root worker keeps
only CAP_SETUID, CAP_SETGID and CAP_KILL.

The user tests need root (to create a user and switch to it); they create a throw-away user with
useradd and delete it afterwards, also when the test fails.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.users import reachable_scratch, system_user
from schedd_worker import cli
from schedd_worker.cgroups import Cgroups, CgroupError
from schedd_worker.config import ConfigError, parse_config
from schedd_worker.executors import FAILED, SUCCEEDED, Assignment, Isolation, PythonHandlers, execute

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd")


@pytest.fixture
def job_user():
    with system_user("sdt") as user:
        yield user


@pytest.fixture
def scratch():
    with reachable_scratch("schedd-iso-") as d:
        yield d


def config_for(user: str, **team) -> str:
    extra = "".join(f'{k} = {v!r}\n'.replace("'", '"') if isinstance(v, str) else
                    f"{k} = {str(v).lower()}\n" for k, v in team.items())
    return f'[isolation]\n\n[isolation.teams.payments]\nuser = "{user}"\n{extra}'


def run(command: str, *, isolation: Isolation, team: str = "payments", limits=None,
        secret_env=None, kind: str = "shell") -> object:
    handler = {"shell": {"command": command}} if kind == "shell" else {"python": {"name": "fn"}}
    a = Assignment(execution_id="j@2026-11-29T02:00:00Z", job="j", scheduled_ms=1795917600000,
                   attempt=1, fencing_token=7, handler=handler, timeout_s=60, team=team,
                   limits=limits or {}, secret_env=secret_env or {})
    py = PythonHandlers()
    py.register("fn", lambda ctx: "ran in-process")
    return asyncio.run(execute(a, isolation=isolation, python_handlers=py))


def policy(text: str) -> Isolation:
    return Isolation(policy=parse_config(text).isolation)


@needs_root
def test_shell_job_runs_as_the_mapped_user_with_umask_home_and_secret(job_user):
    iso = policy(config_for(job_user.pw_name))
    out = run('echo "uid=$(id -u) gid=$(id -g) umask=$(umask) user=$USER pwd=$(pwd)"; '
              'test "$DB_PASSWORD" = hunter2 && echo secret-ok',
              isolation=iso, secret_env={"DB_PASSWORD": "hunter2"})
    assert out.state == SUCCEEDED, out
    assert f"uid={job_user.pw_uid} gid={job_user.pw_gid}" in out.output_tail
    assert "umask=0077" in out.output_tail and f"user={job_user.pw_name}" in out.output_tail
    assert "pwd=/\n" in out.output_tail                # its home does not exist: the root dir
    assert "secret-ok" in out.output_tail and "hunter2" not in out.output_tail


@needs_root
def test_workdir_root_is_entered_as_the_user_and_cannot_be_left(job_user, scratch):
    root = scratch / "payments"
    (root / "reports").mkdir(parents=True)
    os.chown(root, job_user.pw_uid, job_user.pw_gid)
    os.chown(root / "reports", job_user.pw_uid, job_user.pw_gid)
    root.chmod(0o700)                                  # only the team's user may enter it
    iso = policy(config_for(job_user.pw_name, workdir_root=str(root)))
    a = Assignment(execution_id="j@2026-11-29T02:00:00Z", job="j", scheduled_ms=1795917600000,
                   attempt=1, fencing_token=7, team="payments",
                   handler={"shell": {"command": "pwd; touch made", "workdir": "reports"}})
    out = asyncio.run(execute(a, isolation=iso))
    assert out.state == SUCCEEDED, out
    assert out.output_tail.strip() == str(root / "reports")
    assert (root / "reports" / "made").stat().st_uid == job_user.pw_uid
    a2 = Assignment(execution_id="j@2026-11-29T02:00:00Z", job="j", scheduled_ms=1795917600000,
                    attempt=1, fencing_token=8, team="payments",
                    handler={"shell": {"command": "pwd", "workdir": "../../etc"}})
    out = asyncio.run(execute(a2, isolation=iso))
    assert out.state == FAILED and "outside the team's workdir_root" in out.error


@needs_root
def test_unmapped_team_and_python_handlers_of_mapped_teams_are_refused(job_user):
    iso = policy(config_for(job_user.pw_name))
    out = run("echo should-not-run", isolation=iso, team="analytics")
    assert out.state == FAILED and "team 'analytics' has no user mapping" in out.error
    assert "should-not-run" not in out.output_tail
    out = run("", isolation=iso, kind="python")
    assert out.state == FAILED and "Python handlers run inside the worker" in out.error
    allowed = policy(config_for(job_user.pw_name, allow_python=True))
    out = run("", isolation=allowed, kind="python")
    assert out.state == SUCCEEDED and "ran in-process" in out.output_tail


def test_root_is_never_a_job_user_unless_explicitly_allowed():
    with pytest.raises(ConfigError, match="jobs never run as root"):
        parse_config(config_for("root"))
    with pytest.raises(ConfigError, match="jobs never run as root"):
        parse_config(config_for("0"))
    with pytest.raises(ConfigError, match="jobs never run as root"):
        parse_config(config_for("nobody", group="0"))
    cfg = parse_config("[isolation]\nallow_root_jobs = true\n[isolation.teams.ops]\nuser = \"root\"\n")
    assert cfg.isolation.teams["ops"].uid == 0


def test_config_is_strict():
    for text, why in (('slotz = 3', "unknown key 'slotz'"),
                      ('slots = "3"', "slots: expected int"),
                      ('[isolation]\ncgroups = "off"', "unknown key 'cgroups'"),
                      ('[isolation.teams.a]\ngroup = "x"', "missing user"),
                      ('[isolation.teams.a]\nuser = "no-such-user-here"', "no such user"),
                      ('[isolation.teams.a]\nuser = "nobody"\nworkdir_root = "rel"', "absolute"),
                      ('[isolation]\numask = "99"', "octal umask"),
                      ('[http]\nallow = [1]', "list of strings"),
                      ('slots = [', "not valid TOML")):
        with pytest.raises(ConfigError, match=why):
            parse_config(text)
    cfg = parse_config('cluster = ["127.0.0.1:1", "127.0.0.1:2"]\nslots = 3\nlabels = {zone = "a"}\n'
                       '[http]\ndeny = ["*"]\n')
    assert cfg.values == {"cluster": "127.0.0.1:1,127.0.0.1:2", "slots": 3, "labels": {"zone": "a"},
                          "http_deny": ["*"]}
    assert not cfg.isolation.mapped


def test_flags_win_over_the_file_and_the_file_over_the_defaults(tmp_path):
    path = tmp_path / "w.toml"
    path.write_text('slots = 3\npool = "db"\ncluster = "127.0.0.1:9"\n')
    args = cli._settings(cli.build_parser().parse_args(["--slots", "5", "--config", str(path)]),
                         parse_config(path.read_text()))
    assert (args.slots, args.pool, args.cluster, args.drain_grace) == (5, "db", ["127.0.0.1:9"], 30.0)
    args = cli._settings(cli.build_parser().parse_args([]), None)
    assert (args.slots, args.pool, args.labels, args.http_allow, args.allow_root) == (4, "", {}, [], False)


def test_a_root_worker_is_allowed_only_with_mappings_or_allow_root(tmp_path, monkeypatch, capsys):
    assert cli.root_refusal(0, False, mapped=True) == ""
    assert "refusing to run as root" in cli.root_refusal(0, False, mapped=False)
    bad = tmp_path / "bad.toml"
    bad.write_text("[isolation.teams.ops]\nuser = \"root\"\n")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert cli.main(["--config", str(bad), "--cluster", "127.0.0.1:1"]) == 2
    assert "jobs never run as root" in capsys.readouterr().err


def test_rlimits_apply_inside_the_job():
    iso = Isolation()                                  # no mapping: the worker's user, limited
    out = run('echo "nofile=$(ulimit -n) as=$(ulimit -v) cpu=$(ulimit -t)"', isolation=iso,
              team="any", limits={"open_files": 64, "memory_mb": 512, "cpu_seconds": 30})
    assert out.state == SUCCEEDED, out
    assert f"nofile=64 as={512 * 1024} cpu=30" in out.output_tail
    out = run("exec 3>/dev/null 4>/dev/null; echo fine", isolation=iso, team="any",
              limits={"open_files": 16})
    assert out.state == SUCCEEDED and "fine" in out.output_tail


def test_limits_without_prlimit_fail_clearly_and_a_bare_plan_needs_no_launcher():
    from schedd_worker.isolation import HostTools, IsolationError, LaunchPlan, launch
    none = HostTools()
    with pytest.raises(IsolationError, match="prlimit"):
        launch(LaunchPlan(rlimits={"RLIMIT_NOFILE": 64}), ["true"], wait=False, tools=none)
    bare = launch(LaunchPlan(umask=0o027), ["true"], wait=False, tools=none)
    assert bare.argv == ["true"] and bare.popen == {"umask": 0o027} and not bare.waits
    waiting = launch(LaunchPlan(), ["true"], wait=True, tools=none)
    assert waiting.argv[:2] == ["/bin/sh", "-c"] and waiting.argv[-1] == "true" and waiting.waits
    # switching users: through setpriv where there is one, else by the subprocess call itself
    team = LaunchPlan(uid=61000, gid=61000, cwd="/srv/t")
    via = launch(team, ["true"], wait=False, tools=HostTools(setpriv="/usr/bin/setpriv"))
    assert via.argv[:5] == ["/usr/bin/setpriv", "--reuid=61000", "--regid=61000", "--clear-groups", "--"]
    assert "user" not in via.popen
    bare_host = launch(team, ["true"], wait=False, tools=none)
    assert bare_host.popen == {"user": 61000, "group": 61000, "extra_groups": []}


@needs_root
@pytest.mark.parametrize("tools", ["found", "none"])
def test_both_ways_of_switching_users_give_the_same_identity(job_user, tools, monkeypatch):
    from schedd_worker.isolation import HostTools
    if tools == "none":
        monkeypatch.setattr(HostTools, "found", classmethod(lambda cls: cls(prlimit=None)))
    iso = policy(config_for(job_user.pw_name))
    out = run("id -u; id -g; id -G; grep -E '^(CapEff|CapPrm)' /proc/self/status; pwd", isolation=iso)
    assert out.state == SUCCEEDED, out
    lines = out.output_tail.split()
    assert lines[0] == str(job_user.pw_uid) and lines[1] == str(job_user.pw_gid), out.output_tail
    assert "0000000000000000" in out.output_tail and "CapEff:\t0000000000000000" in out.output_tail


def test_an_unmapped_workers_umask_applies_to_every_shell_job():
    iso = policy("[isolation]\numask = \"0027\"\n")
    out = run("umask", isolation=iso, team="any")
    assert out.state == SUCCEEDED and "0027" in out.output_tail, out


@needs_root
def test_processes_limit_counts_the_users_processes(job_user):
    iso = policy(config_for(job_user.pw_name))
    out = run("for i in 1 2 3 4 5 6; do sleep 1 & done; wait; echo done", isolation=iso,
              limits={"processes": 3})
    assert "fork" in out.output_tail.lower(), out       # the 3rd process of the user is refused
    out = run("for i in 1 2 3 4 5 6; do sleep 1 & done; wait; echo done", isolation=iso)
    assert out.state == SUCCEEDED and "fork" not in out.output_tail.lower(), out


@needs_root
def test_a_root_worker_keeps_only_setuid_setgid_kill_and_still_switches_users(job_user):
    """In a child process (dropping capabilities cannot be undone)."""
    code = (
        "import asyncio, sys\n"
        "from schedd_worker import caps\n"
        "from schedd_worker.config import parse_config\n"
        "from schedd_worker.executors import Assignment, Isolation, execute\n"
        "caps.drop_capabilities()\n"
        "status = open('/proc/self/status').read()\n"
        "print([l for l in status.splitlines() if l.startswith(('CapEff', 'CapBnd', 'CapPrm', 'NoNewPrivs'))])\n"
        "iso = Isolation(policy=parse_config(sys.argv[1]).isolation)\n"
        "a = Assignment(execution_id='j@2026-11-29T02:00:00Z', job='j', scheduled_ms=1795917600000,"
        " attempt=1, fencing_token=1, team='payments',"
        " handler={'shell': {'command': 'id -u; grep CapEff /proc/self/status'}})\n"
        "out = asyncio.run(execute(a, isolation=iso))\n"
        "print(out.state, out.output_tail)\n")
    r = subprocess.run([sys.executable, "-c", code, config_for(job_user.pw_name)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "'CapEff:\\t00000000000000e0'" in r.stdout and "'CapBnd:\\t00000000000000e0'" in r.stdout
    assert "'NoNewPrivs:\\t1'" in r.stdout
    assert f"SUCCEEDED {job_user.pw_uid}\nCapEff:\t0000000000000000" in r.stdout, r.stdout


def test_attempt_cgroup_gets_its_limits_and_the_job_is_moved_in_before_exec(tmp_path):
    """On a fake delegated cgroup v2 tree (the test machine may have no writable cgroup v2):
    the worker's own pid goes to worker/, memory.max and pids.max of attempt-<token> are written,
    and the launcher's pid is in its cgroup.procs before the job runs."""
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    own = Path("/proc/self/cgroup").read_text()
    cg = Cgroups.prepared(root)
    assert (root / "worker" / "cgroup.procs").read_text().strip() == str(os.getpid())
    assert (root / "cgroup.subtree_control").read_text().split() == ["+memory", "+pids"]
    assert Path("/proc/self/cgroup").read_text() == own     # a fake tree moves nothing really
    path = cg.create(9, {"memory_mb": 64, "processes": 10, "open_files": 32})
    assert (path / "memory.max").read_text().strip() == str(64 << 20)
    assert (path / "pids.max").read_text().strip() == "10"
    assert cg.create(10, {"open_files": 32}) is None       # neither limit: no cgroup
    seen = tmp_path / "seen"
    a = Assignment(execution_id="j@2026-11-29T02:00:00Z", job="j", scheduled_ms=1795917600000,
                   attempt=1, fencing_token=11, team="any", limits={"memory_mb": 64},
                   handler={"shell": {"command": f'cat "{root}/attempt-11/cgroup.procs" > "{seen}"; '
                                                 'echo $$ >> ' + str(seen)}})
    out = asyncio.run(execute(a, isolation=Isolation(cgroups=cg)))
    assert out.state == SUCCEEDED, out
    procs, shell_pid = seen.read_text().split()
    assert procs == shell_pid                               # moved in, then exec'd in place
    with pytest.raises(CgroupError, match="lacks the pids"):
        (tmp_path / "cg2").mkdir()
        (tmp_path / "cg2" / "cgroup.controllers").write_text("memory\n")
        Cgroups.prepared(tmp_path / "cg2")


def test_python_handlers_get_the_secret_env_in_their_context():
    py = PythonHandlers()
    py.register("fn", lambda ctx: "ok" if ctx.secret_env == {"TOKEN": "t0k"} else "missing")
    a = Assignment(execution_id="j@2026-11-29T02:00:00Z", job="j", scheduled_ms=1795917600000,
                   attempt=1, fencing_token=7, handler={"python": {"name": "fn"}},
                   secret_env={"TOKEN": "t0k"})
    out = asyncio.run(execute(a, python_handlers=py))
    assert out.state == SUCCEEDED and out.output_tail == "ok", out
    assert "t0k" not in repr(a)                         # an Assignment never prints its secrets


def test_auto_uses_only_a_delegated_cgroup(tmp_path, monkeypatch):
    """"auto" leaves a cgroup the worker can merely write alone (root can write any: its manager
    owns it); an explicit path is prepared, or refused with why."""
    from schedd_worker import cgroups
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(cgroups, "own_cgroup_dir", lambda: root)
    assert not cgroups.delegated(root)
    assert Cgroups.from_setting("auto") is None and not (root / "worker").exists()
    assert Cgroups.from_setting("off") is None
    assert Cgroups.from_setting(str(root)).root == root
    with pytest.raises(CgroupError, match="not a cgroup v2 directory"):
        Cgroups.from_setting(str(tmp_path / "missing"))


def test_the_sample_worker_config_in_deploy_is_valid(monkeypatch):
    """deploy/worker.toml uses only known keys and types (its users need not exist here)."""
    from schedd_worker import config as config_mod
    from schedd_worker.isolation import TeamUser
    monkeypatch.setattr(config_mod, "resolve_user", lambda team, d, allow_root_jobs: TeamUser(
        team=team, user=str(d["user"]), uid=1000, gid=1000, groups=(), home="/",
        workdir_root=str(d.get("workdir_root", "")), allow_python=bool(d.get("allow_python"))))
    sample = Path(__file__).resolve().parents[2] / "deploy" / "worker.toml"
    cfg = parse_config(sample.read_text(), str(sample))
    assert sorted(cfg.isolation.teams) == ["analytics", "payments"]
    assert cfg.values["slots"] == 8 and cfg.cgroup == "auto" and cfg.isolation.umask == 0o077

