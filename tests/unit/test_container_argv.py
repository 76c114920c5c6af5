"""The container handler's pure parts (schedd_worker.handlers.container): the engine command
line of an attempt, the env file, and what the worker's config refuses."""

from __future__ import annotations

import pytest

from schedd.core.model import validate_spec
from schedd_worker.config import ConfigError, parse_config
from schedd_worker.handlers.base import Assignment
from schedd_worker.handlers.container import (ContainerConfig, MountRule, cluster_key, env_file, refusal, run_argv)

IMAGE = "localhost/schedd-test-busybox:latest"


def spec(**kw) -> dict:
    return validate_spec({"name": "c1", "handler": {"container": {"image": IMAGE, **kw}}}).to_dict()["handler"]["container"]


def attempt(**kw) -> Assignment:
    return Assignment("c1@2027-01-15T08:00:00Z", "c1", 1_800_000_000_000, 2, 77, {}, **kw)


CFG = ContainerConfig(worker="w1", cluster="c0ffee", networks=("host",), mounts=(MountRule("/srv/in"), MountRule("/srv/out", rw=True)))


def test_the_argv_of_a_full_spec() -> None:
    s = spec(command="echo hi", memory="1Gi", cpu=0.5, pids=10, user="1000", workdir="/w",
             mounts=[{"source": "/srv/in/a", "target": "/in"}, {"source": "/srv/out", "target": "/out", "read_only": False}])
    argv = run_argv(attempt(), s, CFG, "schedd-77-abc", 9, "/schedd-attempt-77")
    assert argv[:4] == ["podman", "run", "--name", "schedd-77-abc"]
    text = " ".join(argv)
    for part in ("--env-file /dev/fd/9", "--label schedd.execution=c1@2027-01-15T08:00:00Z",
                 "--label schedd.fencing=77", "--label schedd.worker=w1", "--label schedd.cluster=c0ffee", "--network none", "--pull never",
                 "--cgroup-parent /schedd-attempt-77", "--ulimit nofile=1024:1024", "--ulimit nproc=1024:1024",
                 "--read-only", "--memory 1024m --memory-swap 1024m", "--cpus 0.5", "--pids-limit 10",
                 "--user 1000", "--workdir /w",
                 "--mount type=bind,source=/srv/in/a,target=/in,readonly=true",
                 "--mount type=bind,source=/srv/out,target=/out,readonly=false"):
        assert part in text, part
    assert argv[-5:] == ["--entrypoint", "/bin/sh", IMAGE, "-c", "echo hi"]


def test_the_cluster_label_tells_same_named_workers_of_two_clusters_apart() -> None:
    """A restarted worker sweeps containers by name and cluster: the key follows the CA (not the
    members, which change), or the addresses in any order when there is no TLS."""
    ca1, ca2 = b"-----BEGIN CERTIFICATE-----\nAAAA\n", b"-----BEGIN CERTIFICATE-----\nBBBB\n"
    assert cluster_key(["a:1"], ca1) == cluster_key(["b:1", "c:1"], ca1) != cluster_key(["a:1"], ca2)
    assert cluster_key(["a:1", "b:1"], None) == cluster_key(["b:1", "a:1"], None) != cluster_key(["a:1"], None)


def test_args_run_without_a_shell_and_defaults_are_minimal() -> None:
    argv = run_argv(attempt(), spec(args=["echo", "a b"], read_only=False), ContainerConfig(engine="docker"), "n", 5)
    assert argv[0] == "docker" and argv[-3:] == [IMAGE, "echo", "a b"]
    assert "--read-only" not in argv and "--memory" not in argv and "--cgroup-parent" not in argv
    assert run_argv(attempt(), spec(), ContainerConfig(runtime="runc"), "n", 5)[:3] == ["podman", "--runtime", "runc"]


def test_no_env_value_is_on_the_command_line_they_go_in_the_env_file() -> None:
    a = attempt(secret_env={"TOKEN": "hunter2"})
    s = spec(env={"STAGE": "prod"})
    assert not any("hunter2" in x or "prod" in x for x in run_argv(a, s, CFG, "n", 5))
    text = env_file(a, s)
    assert isinstance(text, bytes)
    lines = text.decode().splitlines()
    assert "TOKEN=hunter2" in lines and "STAGE=prod" in lines and "SCHEDD_FENCING_TOKEN=77" in lines
    assert "SCHEDD_EXECUTION_ID=c1@2027-01-15T08:00:00Z" in lines and "SCHEDD_ATTEMPT=2" in lines
    assert "line break" in str(env_file(attempt(secret_env={"K": "a\nb"}), s))


@pytest.mark.parametrize(("given", "why"), [
    ({}, ""),
    ({"network": "host"}, ""),
    ({"network": "backend"}, "network 'backend' is not allowed on this worker (allowed: none, host)"),
    ({"pull": "if-missing"}, "pull 'if-missing' is not allowed"),
    ({"mounts": [{"source": "/srv/in/x", "target": "/in"}]}, ""),
    ({"mounts": [{"source": "/srv/inside", "target": "/in"}]}, "not under a path this worker allows"),
    ({"mounts": [{"source": "/etc", "target": "/in"}]}, "not under a path this worker allows"),
    ({"mounts": [{"source": "/srv/in", "target": "/in", "read_only": False}]}, "read-only only"),
    ({"mounts": [{"source": "/srv/out/x", "target": "/o", "read_only": False}]}, ""),
])
def test_the_workers_config_decides_networks_mounts_and_pulls(given: dict, why: str) -> None:
    got = refusal(spec(**given), CFG)
    assert (why in got and bool(got)) if why else got == ""


def test_the_container_section_of_the_worker_config() -> None:
    cfg = parse_config('[container]\nengine = "docker"\nruntime = "off"\nnetworks = ["host"]\n'
                       'mounts = [{ path = "/srv/in" }, { path = "/srv/out", rw = true }]\npull = "if-missing"\n')
    assert cfg.container_runtime == "off" and cfg.container.engine == "docker" and cfg.container.pull == "if-missing"
    assert cfg.container.mounts == (MountRule("/srv/in"), MountRule("/srv/out", True))
    for bad, msg in (('engine = "lxc"', "podman or docker"), ('pull = "always"', "never or if-missing"),
                     ('mounts = [{ path = "rel" }]', "absolute path"), ('nets = []', "unknown key")):
        with pytest.raises(ConfigError, match=msg):
            parse_config(f"[container]\n{bad}\n")


OWN = (1234, 1235)          # the team's uid:gid on a worker that separates teams


def test_a_separated_teams_container_runs_as_its_uid_with_no_capability() -> None:
    argv = " ".join(run_argv(attempt(team="payments"), spec(command="id -u"), CFG, "n", 5, own=OWN))
    assert "--user 1234:1235" in argv
    assert "--security-opt no-new-privileges --cap-drop ALL" in argv
    # the spec may repeat it (refusal() allows nothing else)
    assert "--user 1234 " in " ".join(run_argv(attempt(team="payments"), spec(user="1234"), CFG, "n", 5, own=OWN))
    # a worker that does not separate teams: the image's user, still no capability
    plain = " ".join(run_argv(attempt(team="ops"), spec(), CFG, "n", 5))
    assert "--user" not in plain and "--cap-drop ALL" in plain


@pytest.mark.parametrize(("user", "own", "cfg", "why"), [
    ("1234", OWN, CFG, ""),
    ("1234:1235", OWN, CFG, ""),
    ("1000", OWN, CFG, "as its own uid:gid 1234:1235, and no other"),
    ("1234:1000", OWN, CFG, "as its own uid:gid 1234:1235, and no other"),
    ("0", OWN, CFG, "never run as uid or gid 0"),
    ("0:0", OWN, CFG, "never run as uid or gid 0"),
    ("1234:0", OWN, CFG, "never run as uid or gid 0"),
    ("root", OWN, CFG, "names that number"),
    ("app:app", OWN, CFG, "names that number"),
    ("root", None, CFG, ""),                               # no separation: the image decides
    ("0", (0, 0), ContainerConfig(allow_root_jobs=True), ""),
], ids=["uid", "uid-gid", "other-uid", "other-gid", "root-uid", "root-both", "root-gid", "root-name",
        "a-name", "unseparated", "allowed"])
def test_a_team_with_its_own_uid_names_no_other_user_for_its_container(user: str, own, cfg: ContainerConfig,
                                                                       why: str) -> None:
    got = refusal(spec(user=user), cfg, own)
    assert (why in got and bool(got)) if why else got == ""


def test_a_root_worker_that_separates_teams_runs_its_containers_in_a_broker(monkeypatch) -> None:
    """It drops root's capabilities, which a rootful engine needs: its containers go to a broker
    process started before (auto or a named runtime alike); a worker that keeps its capabilities
    (not root, or root without separation) runs them itself."""
    import argparse
    import logging

    from schedd_worker import cli
    from schedd_worker.handlers import container, container_broker
    monkeypatch.setattr(container, "probe", lambda cfg: container.Probe(cfg))
    monkeypatch.setattr(container, "sweep", lambda cfg: [])
    started: list[ContainerConfig] = []
    monkeypatch.setattr(container_broker.ContainerBroker, "start", classmethod(lambda cls, cfg: started.append(cfg) or "broker"))
    args = argparse.Namespace(container_runtime=None, container_engine=None)
    log = logging.getLogger("test")
    teams = '[isolation.teams.payments]\nuser = "nobody"\n'
    assert cli._containers(args, parse_config(teams), "w1", log, root=True) == "broker"
    assert cli._containers(args, parse_config(teams + '[container]\nruntime = "runc"\n'), "w1", log, root=True) == "broker"
    assert [c.runtime for c in started] == ["", "runc"]
    assert isinstance(cli._containers(args, parse_config(teams), "w1", log, root=False), ContainerConfig)
    assert isinstance(cli._containers(args, parse_config(""), "w1", log, root=True), ContainerConfig)
