"""The test-only switches are refused outside test mode, and the recorder writes whole lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedd.ports.faults import NO_FAULTS
from schedd.runtime.config import ConfigError, from_dict
from schedd.testing import hooks
from schedd_worker import hooks as worker_hooks


def _cfg(tmp_path: Path, test_mode: bool):
    return from_dict({"node_id": "n1", "data_dir": str(tmp_path), "raft_address": "127.0.0.1:7001",
                      "grpc_address": "127.0.0.1:7070", "test_mode": test_mode})


def test_unsafe_switches_need_test_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDD_UNSAFE", "no_fencing")
    with pytest.raises(hooks.TestModeError):
        hooks.configure_node(_cfg(tmp_path, False))
    monkeypatch.delenv("SCHEDD_TEST_MODE", raising=False)
    with pytest.raises(hooks.TestModeError):
        hooks.unsafe_switches()
    with pytest.raises(ConfigError):                  # and test_mode itself needs the env
        _cfg(tmp_path, True)


def test_unknown_switch_is_refused(monkeypatch):
    monkeypatch.setenv("SCHEDD_TEST_MODE", "1")
    monkeypatch.setenv("SCHEDD_UNSAFE", "no_fencing,make_it_fast")
    with pytest.raises(hooks.TestModeError, match="make_it_fast"):
        hooks.unsafe_switches()


def test_off_by_default(tmp_path, monkeypatch):
    for k in ("SCHEDD_UNSAFE", "SCHEDD_HISTORY_DIR", "SCHEDD_RAFT_DIAL"):
        monkeypatch.delenv(k, raising=False)
    assert hooks.configure_node(_cfg(tmp_path, False)) is NO_FAULTS      # no recorder, no switch
    assert worker_hooks.configure_worker("w1").record is None
    assert hooks.transport_with_dial(object) is object


def test_recorder_appends_json_lines(tmp_path):
    rec = hooks.Recorder(str(tmp_path / "h.jsonl"), "p")
    for i in range(100):
        rec("x", i=i, text="y" * 300)
    lines = (tmp_path / "h.jsonl").read_text().splitlines()
    assert [json.loads(line)["i"] for line in lines] == list(range(100))


def test_no_dedup_rewrites_request_ids_deterministically():
    e = json.dumps({"rid": "abc", "k": "trigger"})
    assert hooks.unsafe_no_dedup(e, 7) == hooks.unsafe_no_dedup(e, 7) != hooks.unsafe_no_dedup(e, 8)
    assert json.loads(hooks.unsafe_no_dedup(e, 7))["rid"] == "abc#nodedup7"


def test_failpoints_and_worker_dial_need_test_mode(tmp_path, monkeypatch):
    monkeypatch.delenv("SCHEDD_TEST_MODE", raising=False)
    monkeypatch.setenv("SCHEDD_FAILPOINT_DIR", str(tmp_path))
    with pytest.raises(hooks.TestModeError):
        hooks.configure_node(_cfg(tmp_path, False))
    with pytest.raises(worker_hooks.TestModeError):
        worker_hooks.configure_worker("w1")
    monkeypatch.delenv("SCHEDD_FAILPOINT_DIR")
    monkeypatch.setenv("SCHEDD_WORKER_DIAL", '{"127.0.0.1:1": "127.0.0.1:2"}')
    with pytest.raises(worker_hooks.TestModeError):
        worker_hooks.configure_worker("w1")


def test_failpoint_fires_once(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDD_TEST_MODE", "1")
    monkeypatch.setenv("SCHEDD_FAILPOINT_DIR", str(tmp_path))
    fp = hooks.make_failpoints("n1")
    assert fp.take("stall_after_fire") is None          # not armed
    (tmp_path / "n1.stall_after_fire").write_text("4.5")
    (tmp_path / "n2.stall_after_fire").write_text("1")
    assert fp.take("stall_after_fire") == 4.5
    assert fp.take("stall_after_fire") is None          # one shot
    assert (tmp_path / "n2.stall_after_fire").exists()  # another process's failpoint is left alone


def test_worker_dial_maps_addresses(monkeypatch):
    monkeypatch.setenv("SCHEDD_TEST_MODE", "1")
    monkeypatch.setenv("SCHEDD_WORKER_DIAL", '{"127.0.0.1:1": "127.0.0.1:2"}')
    monkeypatch.delenv("SCHEDD_HISTORY_DIR", raising=False)
    monkeypatch.delenv("SCHEDD_FAILPOINT_DIR", raising=False)
    wh = worker_hooks.configure_worker("w1")
    assert wh.dial("127.0.0.1:1") == "127.0.0.1:2"
    assert wh.dial("127.0.0.1:3") == "127.0.0.1:3"


def _pushed(node, token: int) -> dict:
    """What the push hook records when `node` pushes an assignment of `token`."""
    from types import SimpleNamespace

    from schedd_proto import scheduler_pb2 as pb
    from schedd.leader.workers import WorkerHub
    from schedd.ports.fakes import ManualClock
    records: list[dict] = []
    faults = hooks.TestFaults(rec=lambda type_, **f: records.append({"type": type_, **f}))
    hub = WorkerHub(node, ManualClock(0), faults=faults)
    hub.send(SimpleNamespace(name="w2", closed=True), pb.LeaderMessage(assignment=pb.Assignment(
        job="queuer", scheduled_ms=1_796_120_838_000, fencing_token=token, attempt=1, term=2)))
    return records[0]


def test_push_records_what_the_state_machine_applied_not_pysyncobjs_lagging_counter():
    """S02 seed 92261289: n3 applied claim 180, and 8 ms later pushed it with
    pysyncobj's raftLastApplied still at 179 (its tick thread had been descheduled between
    answering the proposal and incrementing the counter); the checker reported C6. The hook now
    records the index the state machine applied, which apply sets before it answers."""
    import threading
    from types import SimpleNamespace

    from tests.jepsen_like import checker
    node = SimpleNamespace(cfg=SimpleNamespace(node_id="n3"), lock=threading.RLock(),
                           state=SimpleNamespace(last_index=180), sync=SimpleNamespace(raftLastApplied=179))
    push = {"ts": 2.0, "proc": "n3", **_pushed(node, 180)}
    assert push["applied"] == 180
    claim = {"ts": 1.0, "proc": "n3", "type": "apply", "node": "n3", "index": 180, "hash": "h",
             "entry": {"k": "start", "now": 0, "job": "queuer", "scheduled_ms": 1_796_120_838_000, "attempt": 1,
                       "worker": "w2", "term": 2, "rid": "start-queuer#1"}, "res": {"ok": True, "token": 180}}
    res = checker.check([claim, push], {"lease_ms": 3000})
    assert not [a for a in res["anomalies"] if a["check"] == "C6"], res["anomalies"]


def test_pysyncobj_answers_a_proposal_before_counting_it_applied(tmp_path):
    """Why the push hook cannot read raftLastApplied: in the proposal's callback (which is what
    wakes the leader's asyncio thread to push) pysyncobj's counter is still one short, while the
    state machine's index already names the applied entry."""
    import asyncio

    from schedd.core import commands as C
    from schedd.replication.node import RaftNode
    from schedd.runtime.cluster import restartable_ports
    base = restartable_ports(2)
    cfg = from_dict({"node_id": "n1", "data_dir": str(tmp_path), "raft_address": f"127.0.0.1:{base}",
                     "grpc_address": f"127.0.0.1:{base + 1}"})
    node = RaftNode(cfg)
    try:
        async def propose_and_look() -> tuple[int, int, int]:
            loop = asyncio.get_running_loop()
            while not node.is_leader():
                await asyncio.sleep(0.05)
            seen: asyncio.Future = loop.create_future()

            def callback(result, error) -> None:            # pysyncobj's tick thread, as in propose()
                try:
                    look = (node.sync.raftLastApplied, hooks.applied_through(node), node.state.last_index)
                    loop.call_soon_threadsafe(seen.set_result, look)
                except Exception as e:  # noqa: BLE001 - hand it to the test, never to the tick thread
                    loop.call_soon_threadsafe(seen.set_exception, e)
            node._consumer.apply_entry(C.encode(C.PAUSE, rid="r1", now=1, term=node.term, by="t", name="nope"),
                                       callback=callback)
            return await asyncio.wait_for(seen, 30)
        counter, recorded, index = asyncio.run(propose_and_look())
    finally:
        node.close()
    assert counter == index - 1          # pysyncobj counts the entry applied only after answering
    assert recorded == index             # what the push hook records


def test_a_shard_groups_records_say_their_shard_and_an_unsharded_nodes_do_not(tmp_path):
    """Each group of a sharded node has its own log (indexes, terms): its records name it."""
    from schedd.core.results import ok
    rec = hooks.Recorder(str(tmp_path / "n1.jsonl"), "n1")
    node = hooks.TestFaults(rec=rec)
    group = node.for_shard(2)
    for f in (node, group):
        f.role_changed("n1", 0, 2, 5)
        f.applied("n1", json.dumps({"k": "noop"}), ok(), 9, b"\x01")
    lines = [json.loads(line) for line in (tmp_path / "n1.jsonl").read_text().splitlines()]
    assert [(r["type"], r.get("shard")) for r in lines] == [("role", None), ("apply", None), ("role", 2), ("apply", 2)]
    assert node.shard is None and group.rec is node.rec and NO_FAULTS.for_shard(3) is NO_FAULTS
