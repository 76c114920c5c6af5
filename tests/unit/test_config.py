"""Node configuration: good files load, bad ones are refused with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedd.runtime import config

ROOT = Path(__file__).resolve().parents[2]

BASE = """
node_id = "n1"
data_dir = "data"
raft_address = "127.0.0.1:7001"
grpc_address = "127.0.0.1:7070"
"""

PEERS = """
secret = "Wk3vQ9-xZr7LmP2sTa8yHd4nBc6Ej1FgUo5iRq0Nt_M"
[[peers]]
id = "n2"
raft_address = "127.0.0.1:7002"
grpc_address = "127.0.0.1:7071"
[[peers]]
id = "n3"
raft_address = "127.0.0.1:7003"
grpc_address = "127.0.0.1:7072"
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "node.toml"
    p.write_text(text)
    return p


def test_single_node_defaults(tmp_path):
    cfg = config.load(write(tmp_path, BASE))
    assert cfg.data_dir == tmp_path / "data"           # relative to the config file
    assert cfg.fsync == "always" and cfg.raft.leader_fallback_ms == 2500
    assert cfg.raft.compaction_bytes == 256 << 20
    assert [p.id for p in cfg.members] == ["n1"] and cfg.secret == ""


def test_metrics_table(tmp_path):
    assert config.load(write(tmp_path, BASE)).metrics.job_series_limit == 500
    cfg = config.load(write(tmp_path, BASE + '[metrics]\njob_series_limit = 20\njob_series_teams = ["b", "a"]\n'))
    assert (cfg.metrics.job_series_limit, cfg.metrics.job_series_teams) == (20, ("a", "b"))


def test_three_nodes_and_flag_overrides(tmp_path):
    cfg = config.load(write(tmp_path, BASE + PEERS), fsync="batch", grpc_address="127.0.0.1:9000")
    assert [p.id for p in cfg.members] == ["n1", "n2", "n3"]
    assert cfg.fsync == "batch" and cfg.grpc_address == "127.0.0.1:9000"
    assert cfg.grpc_of_raft("127.0.0.1:7002") == "127.0.0.1:7071"


def test_secret_file(tmp_path):
    (tmp_path / "s").write_text("h2Lx-9QpZr4vKc7TnW1mYs8dBe3Fg6Ja0Uo5iRqNt_E\n")
    cfg = config.load(write(tmp_path, BASE + PEERS.replace('secret = "Wk3vQ9-xZr7LmP2sTa8yHd4nBc6Ej1FgUo5iRq0Nt_M"',
                                                           'secret_file = "s"')))
    assert cfg.secret == "h2Lx-9QpZr4vKc7TnW1mYs8dBe3Fg6Ja0Uo5iRqNt_E"


@pytest.mark.parametrize("text, fragment", [
    (BASE + PEERS.replace('secret = "Wk3vQ9-xZr7LmP2sTa8yHd4nBc6Ej1FgUo5iRq0Nt_M"', ""), "refusing to start a multi-node cluster"),
    (BASE + PEERS.replace('"Wk3vQ9-xZr7LmP2sTa8yHd4nBc6Ej1FgUo5iRq0Nt_M"', '"short"'), "cluster secret"),
    (BASE + 'colour = "blue"\n', "unknown key in the config: colour"),
    (BASE.replace('"127.0.0.1:7001"', '"localhost"'), "raft_address must be host:port"),
    (BASE.replace('"127.0.0.1:7070"', '"127.0.0.1:99999"'), "out of range"),
    (BASE + 'fsync = "sometimes"\n', "fsync must be one of always, batch, never"),
    (BASE + "[raft]\nelection_timeout_ms = [100, 50]\n", "election_timeout_ms"),
    (BASE + "[raft]\nheartbeat_ms = 300\n", "more than 3 x heartbeat_ms"),
    (BASE + "[raft]\nheartbeats = 3\n", "unknown key in [raft]: heartbeats"),
    (BASE + "[raft]\ncompaction_bytes = 1024\n", "compaction_bytes"),
    (BASE + "[scheduler]\nlookahead_ms = -1\n", "lookahead_ms"),
    (BASE + PEERS.replace('id = "n3"', 'id = "n2"'), "node ids must be unique"),
    (BASE + PEERS.replace('"127.0.0.1:7003"', '"127.0.0.1:7001"'), "own raft_address"),
    (BASE + PEERS.split("[[peers]]\nid = \"n3\"")[0], "odd number"),
    (BASE.replace('node_id = "n1"', 'node_id = "n 1"'), "node_id"),
    (BASE + "this is not toml", "invalid TOML"),
    (BASE + 'secret_file = "missing"\n', "cannot read secret_file"),
    (BASE + "[metrics]\njob_series_limit = -1\n", "[metrics].job_series_limit"),
    (BASE + "[metrics]\njob_series_teams = \"payments\"\n", "job_series_teams must be a list"),
    (BASE + "[metrics]\nseries = 3\n", "unknown key in [metrics]: series"),
    (BASE + "test_mode = true\n", None),
])
def test_bad_configs_are_refused_with_the_key_named(tmp_path, monkeypatch, text, fragment):
    if fragment is None:                              # test_mode needs the test-suite switch
        monkeypatch.delenv("SCHEDD_TEST_MODE", raising=False)
        fragment = "test_mode is for the test suite only"
    with pytest.raises(config.ConfigError) as e:
        config.load(write(tmp_path, text))
    assert fragment in str(e.value) and "node.toml" in str(e.value)


def test_missing_file():
    with pytest.raises(config.ConfigError, match="cannot read config"):
        config.load("/nonexistent/schedd.toml")


@pytest.mark.parametrize("name", ["n1.toml", "n2.toml", "n3.toml"])
def test_shipped_sample_configs_are_valid(tmp_path, name):
    text = (ROOT / "deploy" / "config" / name).read_text()
    (tmp_path / "cluster.secret").write_text("pR4vKc7TnW1mYs8dBe3Fg6Ja0Uo5iRqNt-h2Lx9QZ")
    text = text.replace("/etc/schedd/cluster.secret", str(tmp_path / "cluster.secret"))
    cfg = config.load(write(tmp_path, text))
    assert len(cfg.members) == 3 and cfg.fsync == "always"
