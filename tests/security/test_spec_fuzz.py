"""Fuzzing the spec loader (the code behind ``schedctl job create|apply -f`` and
``dag apply -f``): for random bytes, YAML-ish token soup and random documents of the right
shape with values of every type, the loader returns specs or raises its own ``DocumentError``,
nothing else; and schedctl sends nothing to the cluster for a file it refuses.

CI runs ``SCHEDD_FUZZ_EXAMPLES`` (default 300) examples of the byte and text properties, a third
of that of random documents and a tenth through ``schedctl`` itself; a longer local run:
``SCHEDD_FUZZ_EXAMPLES=20000 pytest -q tests/security/test_spec_fuzz.py``."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedd_client.dags import _DAG_KEYS, _TASK_KEYS, dag_specs_from_bytes
from schedd_client.documents import DocumentError, Limits
from schedd_client.schedctl import main
from schedd_client.specs import _DOC_KEYS, job_specs_from_bytes
from tests.support.fake_api import FakeCluster

EXAMPLES = int(os.environ.get("SCHEDD_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 300,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SMALL = Limits(max_bytes=1 << 16, max_depth=64, max_nodes=20_000)   # keep a CI example cheap

TOKENS = [
    *_DOC_KEYS, *_DAG_KEYS, *_TASK_KEYS, "retry", "max_attempts", "url", "sensor", "file",
    ":", ": ", "- ", "-", "[", "]", "{", "}", ",", "\n", "  ", "    ", "\t", "#", "'", '"', "|", ">",
    "? ", "---", "...", "&a ", "*a", "&b ", "*b", "<<: *a", "!!binary ", "!!str ", "!!int ", "!!set ",
    "!!python/object/apply:os.system ", "!custom ", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "~", "null",
    "true", "no", "0x1F", "0o17", "1_000", "9" * 30, "1" + "0" * 5000, "1e999", "-.inf", ".nan",
    "2026-13-45", "2026-02-30T25:61:00Z", "12:30:00", "@daily", "0 2 * * *", "\\x1b", "\\ud800",
    "\\U0010ffff", "\x1b[31m", "\u202e", "\x00", "\x85", "\ufeff", "é", "日本",
]
yamlish = st.lists(st.sampled_from(TOKENS) | st.text(max_size=8), max_size=60).map("".join)

scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**40), max_value=10**40)
           | st.floats() | st.text(max_size=20) | st.sampled_from(["@every 30s", "5m", "06:00", "UTC", "x"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(TOKENS[:40]) | st.text(max_size=4), inner, max_size=3),
                      max_leaves=6)
job_docs = st.dictionaries(st.sampled_from([*_DOC_KEYS, "scheduel"]), values, max_size=6)
dag_docs = st.fixed_dictionaries({"name": values, "tasks": st.lists(
    st.dictionaries(st.sampled_from(_TASK_KEYS), values, max_size=4), max_size=2)},
    optional={k: values for k in ("schedule", "max_runs", "sla")})


def _dump(doc: object) -> bytes:
    return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")


def _load_both(data: bytes) -> None:
    """Each loader either returns specs or raises ``DocumentError``; anything else fails the test."""
    for load in (job_specs_from_bytes, dag_specs_from_bytes):
        try:
            specs = load(data, "fuzz.yaml", SMALL)
        except DocumentError as err:
            assert err.message.startswith("fuzz.yaml") and "\n" not in err.message, err.message
            assert len(err.message) < 1000, err.message[:300]
        else:
            assert specs
            for item in specs:               # jobs come with where they were read, DAGs alone
                spec = item[1] if isinstance(item, tuple) else item
                spec.SerializeToString()      # what would be sent must be a valid message


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes_raise_only_the_loaders_error(data: bytes) -> None:
    _load_both(data)


@FUZZ
@given(yamlish)
def test_yamlish_text_raises_only_the_loaders_error(text: str) -> None:
    _load_both(text.encode("utf-8", "surrogatepass"))


@settings(FUZZ, max_examples=max(EXAMPLES // 3, 20))        # generating documents is the slow part
@given(job_docs | st.lists(job_docs, max_size=3) | dag_docs)
def test_random_documents_raise_only_the_loaders_error(doc: object) -> None:
    _load_both(_dump(doc))


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster(1)
    yield fake
    fake.stop()


@settings(FUZZ, max_examples=max(EXAMPLES // 10, 20), suppress_health_check=list(HealthCheck))
@given(data=st.binary(max_size=256) | yamlish.map(lambda t: t.encode("utf-8", "surrogatepass")),
       command=st.sampled_from([["job", "apply"], ["job", "create"], ["dag", "apply"]]))
def test_refused_files_send_nothing(cluster: FakeCluster, tmp_path_factory, capsys, data: bytes,
                                    command: list[str]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "jobs.yaml"
    path.write_bytes(data)
    cluster.state.calls.clear()
    capsys.readouterr()
    code = main(["--cluster", cluster.cluster, "--timeout", "5", *command, "-f", str(path)])
    err = capsys.readouterr().err
    assert code in (0, 1) and "Traceback" not in err
    if code == 1 and err.startswith(f"schedctl: error: {path}"):     # refused by the loader
        assert cluster.state.calls == [] and err.count("\n") == 1, err
