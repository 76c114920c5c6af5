"""The container broker's checks (schedd_worker.handlers.container_broker): it takes the
worker's word for nothing that reaches the engine's command line or decides who a container
runs as, and its config survives the trip to it unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedd.core.model import validate_spec
from schedd_worker.handlers.base import Assignment
from schedd_worker.handlers.container import ContainerConfig, MountRule
from schedd_worker.handlers.container_broker import _request, config_from_json, config_to_json, shape_refusal

CFG = ContainerConfig(worker="w1", runtime="runc", networks=("host",), mounts=(MountRule("/srv/in"),),
                      cgroup_root=Path("/sys/fs/cgroup"))


def spec(**kw) -> dict:
    return validate_spec({"name": "c1", "handler": {"container": {"image": "localhost/b:1", **kw}}}).to_dict()["handler"]["container"]


def request(spec_: dict, own=(62001, 62001), **kw) -> bytes:
    a = Assignment("c1@2027-01-15T08:00:00Z", "c1", 1_800_000_000_000, 1, 9, {}, team="payments")
    import dataclasses
    body = {"assignment": dataclasses.asdict(a), "spec": spec_, "own": list(own) if own else None,
            "timeout_s": 5.0, "grace": 2.0, **kw}
    return json.dumps(body).encode()


def test_the_config_survives_the_trip_to_the_broker() -> None:
    assert config_from_json(config_to_json(CFG)) == CFG
    plain = ContainerConfig()
    assert config_from_json(config_to_json(plain)) == plain


def test_a_good_request_is_taken_apart() -> None:
    got = _request(request(spec(command="echo hi", memory="64Mi")), CFG)
    assert not isinstance(got, str)
    a, s, own, left, grace = got
    assert a.fencing_token == 9 and a.team == "payments" and s["command"] == "echo hi"
    assert own == (62001, 62001) and left == 5.0 and grace == 2.0


@pytest.mark.parametrize(("change", "why"), [
    ({"image": "--privileged"}, "image '--privileged' is not a valid value"),
    ({"image": "a b"}, "is not a valid value"),
    ({"user": "-u0"}, "user '-u0'"),
    ({"network": "--net=host"}, "network"),
    ({"workdir": "relative"}, "workdir"),
    ({"memory": "1g --privileged"}, "memory"),
    ({"pids": "5 --privileged"}, "pids"),
    ({"mounts": [{"source": "/srv/in/a,readonly=false", "target": "/in"}]}, "mount"),
    ({"mounts": [{"source": "/srv/in/a", "target": "-v"}]}, "mount"),
    ({"args": "rm -rf /"}, "args a list"),
])
def test_nothing_that_could_be_read_as_an_option_reaches_the_engine(change: dict, why: str) -> None:
    s = spec(command="true") | change
    assert why in shape_refusal(s)
    got = _request(request(s), CFG)
    assert isinstance(got, str) and why in got


@pytest.mark.parametrize(("own", "cfg", "why"), [
    (None, CFG, "no team uid given"),
    ((0, 0), CFG, "never runs as uid or gid 0"),
    ((62001, 0), CFG, "never runs as uid or gid 0"),
    ((0, 0), ContainerConfig(allow_root_jobs=True), ""),
    (None, ContainerConfig(allow_root_jobs=True), ""),
])
def test_a_container_never_runs_as_root_or_without_a_team_uid(own, cfg: ContainerConfig, why: str) -> None:
    got = _request(request(spec(command="id"), own=own), cfg)
    assert (isinstance(got, str) and why in got) if why else not isinstance(got, str)


def test_a_malformed_request_is_refused_not_raised() -> None:
    for raw in (b"not json", b"{}", json.dumps({"assignment": {"nope": 1}, "spec": {}, "grace": 1}).encode()):
        got = _request(raw, CFG)
        assert isinstance(got, str) and got.startswith("bad request")
