"""The container handler's spec (schedd.core.model.container_spec) and its feature level: a spec
with a `container:` handler is valid only in an entry stamped fl=6 (schedd.core.features Level 6),
refused alike by old and new replicas while the cluster is below it, alone or inside a group."""

from __future__ import annotations

import json

import pytest

from schedd.api.service import spec_levels
from schedd.core import commands as C
from schedd.core.model import ValidationError, validate_spec
from schedd.core.specs import JobSpec
from schedd.core.results import Code
from schedd.core.state import SchedulerState
from tests.support.state import T0, Harness, text

IMAGE = "localhost/schedd-test-busybox:latest"


def container(**kw) -> dict:
    return {"name": "c1", "handler": {"container": {"image": IMAGE, **kw}}}


def canonical(**kw) -> dict:
    return validate_spec(container(**kw)).to_dict()["handler"]["container"]


# ------------------------------------------------------------------ validation, table-driven

VALID = [
    ({}, {"image": IMAGE, "network": "none", "read_only": True, "pull": "never"}),
    ({"command": "echo hi"}, {"command": "echo hi"}),
    ({"args": ["echo", "hi"]}, {"args": ["echo", "hi"]}),
    ({"memory": 64}, {"memory": "64Mi"}),
    ({"memory": "64"}, {"memory": "64Mi"}),
    ({"memory": "64Mi"}, {"memory": "64Mi"}),
    ({"memory": "64M"}, {"memory": "64Mi"}),
    ({"memory": "1Gi"}, {"memory": "1024Mi"}),
    ({"memory": "0.5Gi"}, {"memory": "512Mi"}),
    ({"cpu": 0.5, "pids": 10}, {"cpu": 0.5, "pids": 10}),
    ({"network": "host"}, {"network": "host"}),
    ({"network": "backend-net"}, {"network": "backend-net"}),
    ({"read_only": False}, {"read_only": False}),
    ({"pull": "if-missing"}, {"pull": "if-missing"}),
    ({"user": "1000:1000", "workdir": "/work"}, {"user": "1000:1000", "workdir": "/work"}),
    ({"env": {"A": "1"}}, {"env": {"A": "1"}}),
    ({"mounts": [{"source": "/data", "target": "/in"}]},
     {"mounts": [{"source": "/data", "target": "/in", "read_only": True}]}),
    ({"mounts": [{"source": "/data", "target": "/out", "read_only": False}]},
     {"mounts": [{"source": "/data", "target": "/out", "read_only": False}]}),
]


@pytest.mark.parametrize(("given", "expected"), VALID)
def test_valid_container_specs_are_canonical(given: dict, expected: dict) -> None:
    got = canonical(**given)
    assert {k: got[k] for k in expected} == expected
    assert validate_spec({"name": "c1", "handler": {"container": got}}).to_dict()["handler"]["container"] == got


INVALID = [
    ({"image": ""}, "needs an image"),
    ({"image": "-v /:/host"}, "bad container image"),
    ({"image": "busybox latest"}, "bad container image"),
    ({"command": "x", "args": ["y"]}, "not both"),
    ({"args": "echo"}, "list of strings"),
    ({"memory": "5Mi"}, "between 6Mi"),
    ({"memory": "64Ki"}, "whole number of MiB"),
    ({"memory": "lots"}, "use MiB"),
    ({"memory": True}, "container memory"),
    ({"cpu": -1}, "cpu must be between"),
    ({"pids": 1.5}, "whole number"),
    ({"network": "container:other"}, "bad container network"),
    ({"network": "ns:/proc/1/ns/net"}, "bad container network"),
    ({"user": "root; rm"}, "bad container user"),
    ({"workdir": "relative"}, "absolute path"),
    ({"read_only": "yes"}, "true or false"),
    ({"pull": "always"}, "pull must be one of"),
    ({"mounts": [{"source": "data", "target": "/in"}]}, "absolute path"),
    ({"mounts": [{"source": "/a,b", "target": "/in"}]}, "absolute path"),
    ({"mounts": [{"source": "/a:/etc", "target": "/in"}]}, "absolute path"),
    ({"mounts": [{"source": "/data/../etc", "target": "/in"}]}, "'..'"),
    ({"mounts": [{"source": "/data", "target": "/"}]}, "cannot be /"),
    ({"mounts": [{"source": "/data", "target": "/in", "mode": "rw"}]}, "unknown container mount field"),
    ({"mounts": [{"source": "/d", "target": f"/t{i}"} for i in range(17)]}, "at most 16"),
    ({"env": {"1BAD": "x"}}, "bad env key"),
]


@pytest.mark.parametrize(("given", "message"), INVALID)
def test_invalid_container_specs_are_refused_with_a_reason(given: dict, message: str) -> None:
    body = {"image": IMAGE, **given}
    with pytest.raises(ValidationError, match=message.replace("(", r"\(")):
        validate_spec({"name": "c1", "handler": {"container": body}})


def test_exactly_one_handler_kind() -> None:
    with pytest.raises(ValidationError, match="exactly one handler"):
        validate_spec({"name": "c1", "handler": {"container": {"image": IMAGE}, "shell": {"command": "x"}}})


def test_env_secret_is_allowed_for_a_container() -> None:
    sealed = {"TOKEN": {"v": 1, "ct": "abc"}}
    assert validate_spec({**container(), "env_secret": sealed}).to_dict()["env_secret"] == sealed


def test_spec_level() -> None:
    assert validate_spec(container()).level == 6
    assert JobSpec.from_text(text()).level == 1
    assert spec_levels([JobSpec.from_text(text())]) == {}
    assert spec_levels([JobSpec.from_text(text()), validate_spec(container())]) == {"fl": 6}


# ------------------------------------------------------------------ the feature gate

def container_put(rid: str = "c/put", now: int = T0) -> str:
    return C.encode(C.PUT, rid=rid, now=now, term=1, by="test", spec=validate_spec(container()).text(),
                    name="c1", fl=6)


def test_encode_keeps_a_higher_fl_and_decode_pops_it() -> None:
    entry = container_put()
    assert json.loads(entry)["fl"] == 6
    cmd = C.decode(entry)
    assert cmd.level == 6 and "fl" not in cmd.args
    # Never below the kind's own level.
    assert json.loads(C.encode(C.GROUP, rid="", now=0, term=1, entries=["x"], fl=2))["fl"] == 3


def _at(level: int, table: C.FeatureTable = C.FEATURES) -> SchedulerState:
    s = SchedulerState(table)
    assert s.apply(C.encode(C.EPOCH, rid="e", now=T0, term=1, by="t"), 1).ok
    if level > 1:
        assert s.apply(C.encode(C.FEATURE_LEVEL, rid="f", now=T0, term=1, level=level), 2).ok
    return s


def test_a_container_put_below_level_6_is_refused_alike_by_old_and_new_replicas() -> None:
    old, new = _at(5, C.table_upto(5)), _at(5)
    r_old, r_new = old.apply(container_put(), 3), new.apply(container_put(), 3)
    assert r_old.as_dict() == r_new.as_dict()
    assert r_new.code is Code.FEATURE_LEVEL and "needs feature level 6, cluster is at 5" in r_new.msg
    assert old.state_digest() == new.state_digest() and "c1" not in new.jobs


def test_a_container_put_applies_at_level_6() -> None:
    s = _at(6)
    assert s.apply(container_put(), 3).ok and "c1" in s.jobs


def test_a_grouped_container_put_is_gated_on_its_own() -> None:
    """The group entry says fl=3; the container put inside it says fl=6: at level 5 the group's
    shell put applies and the container put is refused, on old and new replicas alike."""
    shell = C.encode(C.PUT, rid="c/shell", now=T0, term=1, by="t", spec=text(name="s1"), name="s1")
    group = C.encode(C.GROUP, rid="", now=T0, term=1, entries=[shell, container_put()])
    old, new = _at(5, C.table_upto(5)), _at(5)
    results = [s.apply(group, 3) for s in (old, new)]
    parts = [r.payload.parts for r in results]
    assert parts[0][0].ok and parts[0][1].code is Code.FEATURE_LEVEL
    assert [p.as_dict() for p in parts[0]] == [p.as_dict() for p in parts[1]]
    assert old.state_digest() == new.state_digest()
    assert "s1" in new.jobs and "c1" not in new.jobs
    at6 = _at(6)
    assert all(p.ok for p in at6.apply(group, 3).payload.parts) and "c1" in at6.jobs


def test_the_harness_level_5_refuses_and_level_6_accepts() -> None:
    for level, ok in ((5, False), (6, True)):
        h = Harness(level=level)
        r = h.apply(C.PUT, rid="c/x", spec=validate_spec(container()).text(), name="c1", fl=6)
        assert r.ok is ok, (level, r)


def test_the_api_refuses_a_container_spec_below_level_6_before_proposing() -> None:
    """CommittingService._propose checks the entry's `fl` as it checks its kind: the refusal
    (FAILED_PRECONDITION) says what level is needed and tells to finish the rolling upgrade."""
    from schedd.api.service import _spec_refusal
    why = _spec_refusal(C.PUT, {"fl": 6}, 5)
    assert why is not None and "needs feature level 6, cluster is at 5" in why and "rolling upgrade" in why
    assert _spec_refusal(C.PUT, {"fl": 6}, 6) is None and _spec_refusal(C.PUT, {}, 1) is None
