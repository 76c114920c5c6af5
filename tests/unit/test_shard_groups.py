"""How a node lays out its replicas of a sharded cluster's groups (schedd.runtime.groups): each
group's data dir and Raft addresses, and a data dir that keeps the shard count it was made with."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from schedd.core.shards import PER_GROUP_PORTS, RAFT_PORT_MODES, SHARED_PORT, shard_raft_address
from schedd.runtime.groups import ShardCountError, check_shard_count, group_config
from schedd.settings import NodeConfig, Peer


def config(tmp_path: Path, shards: int) -> NodeConfig:
    return NodeConfig(node_id="n1", data_dir=tmp_path / "n1", raft_address="10.0.0.1:7100",
                      grpc_address="10.0.0.1:7070", shards=shards,
                      peers=(Peer("n2", "10.0.0.2:7100", "10.0.0.2:7070"),))


def test_each_group_has_its_own_dir_and_shares_the_nodes_raft_and_grpc_addresses(tmp_path):
    cfg = config(tmp_path, 4)
    assert group_config(cfg, 0) is cfg                               # shard 0: the node's own
    g3 = group_config(cfg, 3)
    assert g3.data_dir == tmp_path / "n1" / "shards" / "3"
    assert (g3.raft_address, g3.grpc_address) == ("10.0.0.1:7100", "10.0.0.1:7070")
    assert g3.peers == (Peer("n2", "10.0.0.2:7100", "10.0.0.2:7070"),)
    assert group_config(config(tmp_path, 1), 0) == config(tmp_path, 1)


def test_a_cluster_made_with_a_port_per_group_keeps_them(tmp_path):
    g3 = group_config(dataclasses.replace(config(tmp_path, 4), raft_ports=PER_GROUP_PORTS), 3)
    assert g3.raft_address == "10.0.0.1:7103"
    assert g3.peers == (Peer("n2", "10.0.0.2:7103", "10.0.0.2:7070"),)


def test_shard_raft_addresses():
    assert shard_raft_address("[::1]:7000", 2, PER_GROUP_PORTS) == "[::1]:7002"
    assert shard_raft_address("[::1]:7000", 2, SHARED_PORT) == "[::1]:7000"
    assert shard_raft_address("host:65535", 1, SHARED_PORT) == "host:65535"
    with pytest.raises(ValueError):
        shard_raft_address("host:65535", 1, PER_GROUP_PORTS)
    for mode in RAFT_PORT_MODES:
        with pytest.raises(ValueError):
            shard_raft_address("nohost", 1, mode)
    with pytest.raises(ValueError, match="port mode"):
        shard_raft_address("host:7000", 1, "")


def shards_doc(cfg: NodeConfig) -> dict:
    return json.loads((Path(cfg.data_dir) / "shards.json").read_text())


def test_a_new_sharded_data_dir_records_the_shared_port(tmp_path):
    cfg = check_shard_count(config(tmp_path, 4))
    assert cfg.raft_ports == SHARED_PORT
    assert shards_doc(cfg) == {"shards": 4, "raft_ports": SHARED_PORT}
    assert check_shard_count(config(tmp_path, 4)).raft_ports == SHARED_PORT     # and keeps it


def test_a_data_dir_of_the_build_before_keeps_a_port_per_group(tmp_path):
    """A rolling upgrade: the data dir records S but no mode, so the groups stay on port + k."""
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "shards.json").write_text('{"shards": 4}\n')
    cfg = check_shard_count(config(tmp_path, 4))
    assert cfg.raft_ports == PER_GROUP_PORTS
    assert shards_doc(cfg)["raft_ports"] == PER_GROUP_PORTS
    assert group_config(cfg, 2).raft_address == "10.0.0.1:7102"


def test_the_config_chooses_the_mode_when_it_says_one(tmp_path):
    joiner = check_shard_count(dataclasses.replace(config(tmp_path, 4), raft_ports=PER_GROUP_PORTS))
    assert joiner.raft_ports == PER_GROUP_PORTS and shards_doc(joiner)["raft_ports"] == PER_GROUP_PORTS
    switched = check_shard_count(dataclasses.replace(config(tmp_path, 4), raft_ports=SHARED_PORT))
    assert switched.raft_ports == SHARED_PORT and shards_doc(switched)["raft_ports"] == SHARED_PORT


def test_an_unsharded_node_has_no_port_mode(tmp_path):
    assert check_shard_count(config(tmp_path, 1)).raft_ports == ""
    assert not (tmp_path / "n1" / "shards.json").exists()


def test_a_data_dir_keeps_its_shard_count(tmp_path):
    cfg = config(tmp_path, 2)
    check_shard_count(cfg)                                            # a new dir records 2
    check_shard_count(cfg)
    for other in (1, 4):
        with pytest.raises(ShardCountError, match="holds a cluster of 2 shard"):
            check_shard_count(dataclasses.replace(cfg, shards=other))


def test_an_unsharded_dir_with_state_refuses_shards_and_stays_as_it_was(tmp_path):
    cfg = config(tmp_path, 1)
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "raft.journal").write_bytes(b"x")
    check_shard_count(cfg)
    assert not (tmp_path / "n1" / "shards.json").exists()
    with pytest.raises(ShardCountError, match="holds a cluster of 1 shard"):
        check_shard_count(dataclasses.replace(cfg, shards=3))


def test_metrics_of_every_group_come_out_once_labelled_by_shard():
    from prometheus_client import CollectorRegistry, Counter, generate_latest
    from schedd.runtime.metrics import by_shard
    regs = []
    for k in range(3):
        r = CollectorRegistry()
        Counter("schedd_fired_total", "Instants dispatched", ["trigger"], registry=r).labels("cron").inc(k + 1)
        regs.append(r)
    text = generate_latest(by_shard(lambda: dict(enumerate(regs)))).decode()
    assert text.count("# TYPE schedd_fired_total counter") == 1
    for k in range(3):
        assert f'schedd_fired_total{{shard="{k}",trigger="cron"}} {k + 1}.0' in text


class FakeGroup:
    """What the leader balancer reads of one group's replica on a node."""

    def __init__(self, k: int, leader: str, me: str) -> None:
        self.k, self.leader, self.me = k, leader, me
        self.asked: list[str] = []
        self.membership = self

    def addr(self, nid: str) -> str:
        return f"{nid}:{7000 + self.k}"

    def status(self):
        from types import SimpleNamespace
        return SimpleNamespace(leader=self.addr(self.leader) if self.leader else "")

    def id_of_raft(self, addr: str) -> str:
        return addr.partition(":")[0]

    def members(self):
        from types import SimpleNamespace
        return [SimpleNamespace(id=n, raft_address=self.addr(n)) for n in ("n1", "n2", "n3")]

    def is_leader(self) -> bool:
        return self.leader == self.me

    def transfer_leadership(self, to: str | None = None) -> None:
        self.asked.append(to or "")


def test_a_node_leading_too_many_shards_hands_one_over_once_the_view_is_stable():
    from schedd.leader.leader_balance import GAP_S, STABLE_S, LeaderBalancer
    t = [0.0]
    groups = [FakeGroup(k, "n1", "n1") for k in range(3)] + [FakeGroup(3, "n2", "n1")]
    b = LeaderBalancer("n1", groups, monotonic=lambda: t[0])
    assert b.step() is None                                  # first look: not yet stable
    t[0] += STABLE_S / 2
    assert b.step() is None
    t[0] += STABLE_S
    assert b.step() == (0, "n3")                              # n1 leads 3, n3 none: shard 0 goes to n3
    assert groups[0].asked == ["n3:7000"]
    t[0] += 1
    assert b.step() is None                                  # one transfer per GAP_S at most
    groups[0].leader = "n3"
    t[0] += GAP_S + STABLE_S
    b.step()
    t[0] += STABLE_S
    assert b.step() is None                                  # 2, 1, 1: even enough
    other = LeaderBalancer("n2", [FakeGroup(k, "n1", "n2") for k in range(4)], monotonic=lambda: t[0])
    other.step()
    t[0] += STABLE_S
    assert other.step() is None                               # only a group's leader acts


def test_the_config_key_takes_a_mode_or_nothing():
    from schedd.runtime.config import ConfigError, from_dict
    base = {"node_id": "n1", "data_dir": "/tmp/x", "raft_address": "127.0.0.1:7001",
            "grpc_address": "127.0.0.1:7070", "shards": 4}
    assert from_dict(base).raft_ports == ""
    assert from_dict({**base, "raft_ports": "per_group"}).raft_ports == PER_GROUP_PORTS
    for bad in ("one", 1, True):
        with pytest.raises(ConfigError, match="raft_ports"):
            from_dict({**base, "raft_ports": bad})


@pytest.mark.parametrize("theirs, ours, refused", [
    ("shared", "shared", False),
    ("per_group", "per_group", False),
    ("", "per_group", False),            # a joiner of the build before the shared port: a port per group
    ("", "shared", True),
    ("shared", "per_group", True),        # a new node's empty data dir chose one port; the cluster has many
    ("per_group", "shared", True),
])
def test_a_joiner_must_listen_as_the_clusters_nodes_do(theirs, ours, refused):
    from schedd.api.membership_service import raft_ports_unlike
    why = raft_ports_unlike("n4", theirs, ours)
    assert bool(why) == refused
    if refused:
        assert why.startswith("refusing n4") and f'set raft_ports = "{ours}"' in why
