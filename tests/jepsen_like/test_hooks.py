"""The test-only switches are refused outside test mode, and the recorder writes whole lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedd.runtime.config import ConfigError, from_dict
from schedd.testing import hooks


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
    hooks.configure_node(_cfg(tmp_path, False))
    assert hooks.RECORDER is None and hooks.UNSAFE == frozenset()
    assert hooks.configure_worker("w1") is None
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
    with pytest.raises(hooks.TestModeError):
        hooks.configure_worker("w1")
    monkeypatch.delenv("SCHEDD_FAILPOINT_DIR")
    monkeypatch.setenv("SCHEDD_WORKER_DIAL", '{"127.0.0.1:1": "127.0.0.1:2"}')
    with pytest.raises(hooks.TestModeError):
        hooks.configure_worker("w1")


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
    try:
        hooks.configure_worker("w1")
        assert hooks.worker_dial("127.0.0.1:1") == "127.0.0.1:2"
        assert hooks.worker_dial("127.0.0.1:3") == "127.0.0.1:3"
    finally:
        monkeypatch.setattr(hooks, "WORKER_DIAL", {})
        monkeypatch.setattr(hooks, "FAILPOINTS", None)
