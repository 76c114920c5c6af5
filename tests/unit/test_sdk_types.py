"""The SDK's methods are declared on its classes, typed, and a type checker sees them.

``Client`` and ``AsyncClient`` get their methods from mixins per area (``schedd_client._methods``),
each a ``def`` with its signature and documentation, carrying out one plan builder. These tests
keep the three in step (the blocking method, its awaited twin, the builder), and run mypy on a
user's file, from outside the repository, against the installed package: with the README's
editable install (``pip install -e ./client``) mypy must find ``schedd_client`` and its
``py.typed``, and reveal real signatures, not ``Any``.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
import typing
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from schedd_client import AsyncClient, Client, _plans, acl, calendars, dags, membership

BUILDER_MODULES = (_plans, dags, acl, membership, calendars)
NOT_BUILT = {"save_snapshot",     # a stream written to a file (schedd_client.backup), no plan builder
             # wait for the run to end: their builder's call, then reads of the run (schedd_client.waiting)
             "trigger_job", "run_dag", "wait_for",
             # server streams (schedd_client.watching), read for as long as the caller iterates
             "watch_jobs", "watch_executions", "watch_workers", "watch_dag_run",
             "logs",
             "apply_jobs"}        # calls decided one after another (schedd_client.job_sync.apply_steps)            # a stream of chunks (schedd_client.run_logs), no plan builder


def public_methods(cls: type) -> dict[str, typing.Any]:
    return {name: getattr(cls, name) for name in dir(cls) if not name.startswith("_")}


def builder_of(name: str) -> typing.Any:
    found = [getattr(m, name) for m in BUILDER_MODULES if callable(getattr(m, name, None))]
    assert len(found) == 1, f"{name}: {len(found)} builders"
    return found[0]


def test_every_method_is_a_def_of_a_mixin_or_of_the_client():
    """Declared, not attached at import: a function made elsewhere and set on the class would
    carry another qualified name (and a type checker would not see it)."""
    for cls in (Client, AsyncClient):
        for name, method in public_methods(cls).items():
            owner = next(c for c in cls.__mro__ if name in c.__dict__)
            assert owner.__module__ in ("schedd_client._methods", "schedd_client.client"), (cls, name, owner)
            assert inspect.isfunction(inspect.unwrap(method)) or isinstance(inspect.getattr_static(cls, name),
                                                                              classmethod), (cls, name)
            assert method.__qualname__ == f"{owner.__qualname__}.{name}", (cls, name)
    assert {c.__name__ for c in Client.__mro__} >= {"JobsMixin", "RunsMixin", "DagsMixin", "AclMixin",
                                                    "ClusterMixin"}


def test_the_twins_agree_and_follow_their_builders():
    blocking, awaited = public_methods(Client), public_methods(AsyncClient)
    assert blocking.keys() == awaited.keys()
    for name, method in blocking.items():
        twin = awaited[name]
        if name in ("close", "from_context"):      # each client's own (returns itself, awaits its channels)
            continue
        if name not in NOT_BUILT:          # save_snapshot's names the function each one calls
            assert twin.__doc__ == method.__doc__, f"{name}: the two clients document it differently"
        hints, twin_hints = typing.get_type_hints(method), typing.get_type_hints(twin)
        result, twin_result = hints.pop("return"), twin_hints.pop("return")
        assert hints == twin_hints, name
        if typing.get_origin(result) is Iterator:
            assert typing.get_origin(twin_result) is AsyncIterator, name
            assert typing.get_args(twin_result) == typing.get_args(result), name
            assert not inspect.iscoroutinefunction(twin), f"{name}: an async iterator, not a coroutine"
        else:
            assert twin_result == result, name
            assert inspect.iscoroutinefunction(twin), name
        params = list(inspect.signature(method).parameters.values())
        assert params == list(inspect.signature(twin).parameters.values()), name
        if name in NOT_BUILT:
            continue
        build = builder_of(name)
        assert [(p.name, p.kind, p.default) for p in params[1:]] == [
            (p.name, p.kind, p.default) for p in inspect.signature(build).parameters.values()], name
        build_hints = typing.get_type_hints(build, vars(sys.modules[build.__module__]))
        built = typing.get_args(build_hints.pop("return"))[0]
        assert hints == build_hints, name
        assert result in (built, Iterator[built], list[built]), (name, result, built)


def test_every_builder_has_its_methods():
    builders = {name for m in BUILDER_MODULES for name, f in vars(m).items()
                if inspect.isfunction(f) and f.__module__ == m.__name__ and not name.startswith("_")
                and typing.get_origin(typing.get_type_hints(f, vars(m)).get("return")) in (_plans.Plan, _plans.Pager)}
    assert builders <= public_methods(Client).keys(), builders - public_methods(Client).keys()


MYPY_USER_FILE = """
    from schedd_client import AsyncClient, Client

    client = Client("127.0.0.1:7070")
    reveal_type(client.put_job)
    reveal_type(client.put_dag)
    reveal_type(client.list_executions)
    reveal_type(client.acl_whoami)
    reveal_type(client.save_snapshot)
    reveal_type(AsyncClient().get_job)
"""


def test_mypy_sees_the_installed_sdk(tmp_path: Path) -> None:
    """mypy, run from outside the repository on a user's file, finds the installed package (the
    editable install puts client/ on sys.path through a .pth line: mypy reads those but never
    runs an import hook) and reveals each method's real signature."""
    pytest.importorskip("mypy")
    user = tmp_path / "user_code.py"
    user.write_text(textwrap.dedent(MYPY_USER_FILE))
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         "--python-executable", sys.executable, "--config-file", os.devnull, "--hide-error-context",
         "--no-error-summary", user.name],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    revealed = [ln.split("Revealed type is ", 1)[1] for ln in run.stdout.splitlines() if "Revealed type is" in ln]
    errors = [ln for ln in run.stdout.splitlines() if ": error:" in ln]
    assert errors == [] and len(revealed) == 6, run.stdout + run.stderr
    put_job, put_dag, list_executions, whoami, save_snapshot, get_job = revealed
    for shown in revealed:
        assert shown.startswith('"def ') and shown != '"Any"', shown
    assert "spec: schedd_proto.scheduler_pb2.JobSpec" in put_job and put_job.endswith('-> schedd_proto.scheduler_pb2.Job"')
    assert "-> schedd_proto.dags_pb2.PutDagResponse" in put_dag
    assert "-> typing.Iterator[schedd_proto.scheduler_pb2.Execution]" in list_executions
    assert "-> schedd_proto.acl_pb2.WhoAmIResponse" in whoami
    assert "-> schedd_client.snapshot_file.SnapshotMeta" in save_snapshot
    assert "-> typing.Coroutine[Any, Any, schedd_proto.scheduler_pb2.Job]" in get_job
