"""A shell job's env names and a job's pool are refused when the worker would
read them as something else: an env name with "=" (execve reads "A=B=v" as A set to "B=v"), a
NUL (it ends the string), an empty name; a pool name with a newline or another control
character (it would forge a line in listings, logs and the audit trail). Table-driven on the
proposer's validation (`validate_spec`), which runs before anything is committed."""

from __future__ import annotations

import pytest

from schedd.core.model import ValidationError, validate_spec


def spec(**over) -> dict:
    return {"name": "j", "schedule": "", "handler": {"shell": {"command": "true"}}, **over}


def with_env(env: dict) -> dict:
    return spec(handler={"shell": {"command": "env", "env": env}})


@pytest.mark.parametrize(("env", "why"), [
    ({"A=B": "v"}, "'='"),
    ({"PATH=/tmp/evil:": "x"}, "'='"),
    ({"A\0B": "v"}, "NUL"),
    ({"": "v"}, "empty"),
    ({"A": "v\0w"}, "NUL"),
])
def test_bad_env_is_refused_with_its_reason(env, why):
    with pytest.raises(ValidationError, match=why):
        validate_spec(with_env(env))


@pytest.mark.parametrize("env", [{"A": "v"}, {"lower_case": "x=y"}, {"A.B-c": "=", "EMPTY": ""}])
def test_good_env_is_kept(env):
    assert validate_spec(with_env(env)).to_dict()["handler"]["shell"]["env"] == {k: v for k, v in env.items()}


@pytest.mark.parametrize("pool", ["gpu\n", "a\nb", "a\rb", "tab\there", "bell\x07", "del\x7f", "\x00"])
def test_pool_with_a_control_character_is_refused(pool):
    with pytest.raises(ValidationError, match="control character"):
        validate_spec(spec(pool=pool))


@pytest.mark.parametrize("pool", ["gpu", "eu-west-1.large", "Pool_A", "with space", "ü"])
def test_ordinary_pools_are_kept(pool):
    assert validate_spec(spec(pool=pool)).to_dict()["pool"] == pool
