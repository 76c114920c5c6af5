"""The container broker's checks (schedd_worker.handlers.container_broker): it takes the
worker's word for nothing that reaches the engine's command line or decides who a container
runs as, and its config survives the trip to it unchanged; a container's output reaches the
worker's run log through it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from schedd.core.model import validate_spec
from schedd_worker.handlers import container_broker as broker
from schedd_worker.handlers.base import Assignment, Stop
from schedd_worker.handlers.container import ContainerConfig, MountRule
from schedd_worker.handlers.container_broker import _request, config_from_json, config_to_json, shape_refusal
from schedd_worker.run_logs import STDERR, STDOUT, LogSink

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


class _Lines:
    """A writer that keeps what is written (the broker's end of an attempt's stream)."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, b: bytes) -> None:
        self.data += b

    def is_closing(self) -> bool:
        return False

    async def drain(self) -> None:
        return None


class _Sink(LogSink):
    def __init__(self) -> None:
        self.got: list[tuple[int, bytes]] = []

    def write(self, stream: int, data: bytes) -> None:
        self.got.append((stream, data))


async def test_a_containers_output_is_relayed_to_the_workers_run_log() -> None:
    broker_end = _Lines()
    relay = broker._Relay(broker_end)                 # what the broker's handler writes to
    relay.write(STDOUT, b"hello\n")
    relay.write(STDERR, b"\x00\xffbinary\n")
    broker_end.write(json.dumps({"state": "SUCCEEDED", "exit_code": 0, "output_tail": "hello\n"}).encode() + b"\n")
    reader = asyncio.StreamReader()
    reader.feed_data(broker_end.data)
    reader.feed_eof()
    sink = _Sink()
    result = await broker._answer(reader, _Lines(), Stop(None, None, 0.0, sink))  # type: ignore[arg-type]
    assert result.state == "SUCCEEDED" and result.output_tail == "hello\n"
    assert sink.got == [(STDOUT, b"hello\n"), (STDERR, b"\x00\xffbinary\n")]
