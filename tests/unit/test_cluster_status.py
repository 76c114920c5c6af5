"""Status an operator can trust, and the versions and feature levels behind it: summarize's
warnings, the `cluster status` table (unreachable nodes, no leader, versions and levels),
`schedd --version` / `schedctl --version`, the leader's feature raiser and the API's refusal of
a kind above the cluster's level."""

from __future__ import annotations

from schedd.core.commands import FEATURES

import asyncio
from types import SimpleNamespace

import grpc
import pytest

from schedd.api.acl_service import AuditService
from schedd.api.service import ClusterService, summarize, supported_level
from schedd.core import commands as C
from schedd.leader.features import FeatureRaiser, target_level
from schedd.ports.fakes import FakeNode
from schedd.runtime import cli as schedd_cli
from schedd.versions import PROTOCOL_VERSION, build_info
from schedd_client import cluster_commands, schedctl
from schedd_proto import PROTOCOL_VERSION as CLIENT_PROTOCOL
from schedd_proto import acl_pb2 as apb
from schedd_proto import scheduler_pb2 as pb
from tests.support.env import TestEnv
from tests.support.state import Harness


def node(nid: str, role: str = "follower", *, level: int = 2, tz: str = "2026a", cron: str = "7.0.0",
         cluster_level: int = 1, **kw) -> pb.NodeStatus:
    return pb.NodeStatus(id=nid, role=role, term=4, commit_index=50, applied_index=50, version="0.2.0",
                         max_feature_level=level, feature_level=cluster_level, tzdata=tz, croniter=cron,
                         grpc_address=f"127.0.0.1:{nid[1:]}", raft_address=f"127.0.0.1:9{nid[1:]}", **kw)


def unreachable(nid: str, error: str = "failed to connect to all addresses") -> pb.NodeStatus:
    return pb.NodeStatus(id=nid, role="unreachable", error=error, grpc_address=f"127.0.0.1:{nid[1:]}",
                         raft_address=f"127.0.0.1:9{nid[1:]}")


# ---------------------------------------------------------------- summarize


def test_a_node_with_other_schedule_deps_than_the_leader_is_a_warning() -> None:
    nodes = [node("n1", "leader"), node("n2", tz="2025b"), node("n3"), unreachable("n4")]
    leader, warnings = summarize(nodes, now_ms=0)
    assert leader is not None and leader.id == "n1"
    assert len(warnings) == 1 and warnings[0].startswith("n2 schedules with tzdata 2025b")
    assert "the leader n1 with tzdata 2026a" in warnings[0]
    _, none = summarize([node("n1", "leader"), node("n2"), node("n3")], now_ms=0)
    assert none == []
    _, cron = summarize([node("n1", "leader"), node("n2", cron="6.0.0")], now_ms=0)
    assert "croniter 6.0.0" in cron[0]


def test_a_node_whose_build_is_behind_the_cluster_level_is_a_warning() -> None:
    nodes = [node("n1", "leader", cluster_level=2), node("n2", level=1, cluster_level=2)]
    _, warnings = summarize(nodes, now_ms=0)
    assert warnings == ["n2 runs schedd 0.2.0, which supports feature levels up to 1, but the cluster "
                        "is at 2: upgrade it"]


def test_a_halted_node_is_a_warning_with_its_reason() -> None:
    why = "this node runs schedd 0.1.0, feature level 2; the cluster is at 3: upgrade this node"
    _, warnings = summarize([node("n1", "leader"), node("n2", halted=why)], 0)
    assert any(w.startswith("n2 halted") and why in w for w in warnings), warnings


def test_the_supported_level_waits_for_every_node() -> None:
    assert supported_level([node("n1", level=2), node("n2", level=3)]) == 2
    assert supported_level([node("n1", level=2), unreachable("n2")]) == 0
    assert supported_level([node("n1", level=2), node("n2", level=0)]) == 0    # a build before levels


# ---------------------------------------------------------------- the table


def _status(**kw) -> pb.ClusterStatus:
    base = dict(leader_id="n1", leader_grpc_address="127.0.0.1:1", term=4, commit_index=50, jobs=3,
                executions=7, answered_by="n2", feature_level=1, supported_feature_level=1,
                nodes=[node("n1", "leader"), node("n2"), unreachable("n3", "connection refused")])
    base.update(kw)
    return pb.ClusterStatus(**base)


def test_an_unreachable_node_shows_why_not_zeros() -> None:
    lines = cluster_commands._cluster_table(_status()).splitlines()
    assert lines[0] == ("Leader: n1 (127.0.0.1:1)   term 4   commit 50   jobs 3   executions 7   "
                        "feature level 1   (answered by n2)")
    assert lines[1].split() == ["ID", "ROLE", "VERSION", "LEVEL", "TERM", "COMMIT", "APPLIED", "LAG", "GRPC",
                                "RAFT", "ERROR"]
    assert lines[3].split()[:8] == ["n2", "follower", "0.2.0", "2", "4", "50", "50", "0"]
    n3 = lines[4].split()
    assert n3[:8] == ["n3", "unreachable", "-", "-", "-", "-", "-", "-"] and "0" not in n3
    assert lines[4].endswith("connection refused")


def test_with_no_leader_the_header_says_so_and_no_commit_index() -> None:
    out = cluster_commands._cluster_table(_status(leader_id="", leader_grpc_address="", commit_index=0, feature_level=0,
                                          nodes=[node("n1", "candidate"), unreachable("n2"), unreachable("n3")]))
    header = out.splitlines()[0]
    assert header.startswith("Leader: none (no leader elected") and "commit" not in header
    assert "feature level" not in header          # no leader: no authoritative level to show
    # -o json: what only a leader knows is null, not zero
    data = cluster_commands.status_dict(_status(leader_id="", leader_grpc_address="", commit_index=0, feature_level=0))
    assert {k: data[k] for k in cluster_commands.LEADER_FIELDS} == dict.fromkeys(cluster_commands.LEADER_FIELDS)
    assert data["term"] == 4 and data["jobs"] == 3                # what any node knows stays
    led = cluster_commands.status_dict(_status())
    assert (led["leader_id"], led["commit_index"], led["feature_level"]) == ("n1", 50, 1)


def test_versions_levels_and_warnings_are_shown() -> None:
    out = cluster_commands._cluster_table(_status(supported_feature_level=2, warnings=["n2 schedules with tzdata x"]))
    assert "Every node supports feature level 2: the leader raises" in out
    assert out.splitlines()[-1] == "WARNING: n2 schedules with tzdata x"
    settled = cluster_commands._cluster_table(_status(feature_level=2, supported_feature_level=2))
    assert "Every node supports" not in settled and "feature level 2" in settled


# ---------------------------------------------------------------- --version


def test_schedctl_version_prints_the_client_and_protocol_versions(capsys) -> None:
    assert schedctl.main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("schedctl ") and out.endswith(f"(protocol {CLIENT_PROTOCOL})")


def test_schedd_version_prints_the_build(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        schedd_cli.main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out == build_info().one_line() and f"protocol {PROTOCOL_VERSION}" in out
    assert f"feature level {FEATURES.max_level}" in out and "tzdata" in out and "croniter" in out
    assert PROTOCOL_VERSION is CLIENT_PROTOCOL                   # one place, read by both
    assert build_info(C.table_upto(1)).feature_level == 1         # an older build's table says so


# ---------------------------------------------------------------- the leader raises the level


def test_the_target_is_the_level_every_member_supports() -> None:
    assert target_level(1, 2, [node("n1"), node("n2"), node("n3")]) == 2
    assert target_level(1, 2, [node("n1"), node("n2", level=1)]) is None        # an old node holds it
    assert target_level(1, 2, [node("n1"), unreachable("n2")]) is None           # so does a silent one
    assert target_level(1, 2, [node("n1", level=3), node("n2", level=3)]) == 2   # never above its own
    assert target_level(2, 2, [node("n1")]) is None and target_level(1, 2, []) is None


def _raiser(reports: list[pb.NodeStatus]) -> tuple[FeatureRaiser, Harness, FakeNode]:
    env = TestEnv()

    async def infos() -> list[pb.NodeStatus]:
        return reports

    return FeatureRaiser(env.node, env.clock, infos), env.h, env.node  # type: ignore[arg-type]


def test_the_raiser_proposes_once_every_member_supports_the_level() -> None:
    reports = [node("n1"), node("n2"), node("n3", level=1)]
    raiser, h, fake = _raiser(reports)
    assert asyncio.run(raiser.step()) is None and fake.proposed == []
    reports[2] = node("n3")                                   # n3 upgraded
    assert asyncio.run(raiser.step()) == 2 and h.state.feature_level == 2
    assert [C.decode(e).kind for e in fake.proposed] == [C.FEATURE_LEVEL]
    assert asyncio.run(raiser.step()) is None and len(fake.proposed) == 1    # nothing left to raise


def test_the_raiser_counts_the_non_voters_too() -> None:
    """A joiner learning as a read-only node applies the log as well. Its build (from
    its JoinCluster prepare) caps the level; a learner nobody accounted for holds it."""
    raiser, h, fake = _raiser([node("n1"), node("n2")])
    fake.learner_count = 1                                  # prepared with a previous leader
    assert asyncio.run(raiser.step()) is None and fake.proposed == []
    raiser.joiners.note("n4", 1, raiser.clock.now_ms())                   # an older build, learning
    assert asyncio.run(raiser.step()) is None and fake.proposed == []
    raiser.joiners.forget("n4")
    raiser.joiners.note("n4", 2, raiser.clock.now_ms())                   # upgraded, asked again
    assert asyncio.run(raiser.step()) == 2


def test_member_infos_ask_the_recorded_non_voters() -> None:
    from schedd.replication.membership import MemberInfo
    asked: list[str] = []
    service = object.__new__(ClusterService)
    voters = [MemberInfo("n1", "r1", "g1"), MemberInfo("n2", "r2", "g2")]
    service.node = SimpleNamespace(cfg=SimpleNamespace(node_id="n1"), membership=SimpleNamespace(
        members=lambda: voters, recorded=lambda: [*voters, MemberInfo("n4", "r4", "g4")]))
    service.local_info = lambda with_digest=False: node("n1")

    async def peer_info(peer, with_digest=False):
        asked.append(peer.id)
        return node(peer.id)
    service._peer_info = peer_info
    assert [n.id for n in asyncio.run(service.member_infos())] == ["n1", "n2", "n4"]
    assert asked == ["n2", "n4"]


# ---------------------------------------------------------------- proposers refuse


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


class Context:
    def __init__(self) -> None:
        self._code = None

    async def abort(self, code, details, trailing_metadata=()):
        self._code = code
        raise Aborted(code, details)

    def set_trailing_metadata(self, trailing_metadata):
        self.trailing = trailing_metadata

    def time_remaining(self):
        return None

    def code(self):
        return self._code

    def invocation_metadata(self):
        return ()

    def peer(self):
        return "ipv4:127.0.0.1:1"


def test_a_level_2_operation_is_refused_until_the_level_is_raised() -> None:
    env = TestEnv()
    h, fake = env.h, env.node
    service = AuditService(fake, env.clock, env.metrics, router=None)  # type: ignore[arg-type]
    request = apb.AuditNoteRequest(note="upgrading n3")
    with pytest.raises(Aborted) as refused:
        asyncio.run(service.Note(request, Context()))
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert "needs feature level 2, cluster is at 1" in refused.value.details
    assert "finish the rolling upgrade" in refused.value.details
    assert fake.proposed == []                                  # nothing proposed, nothing committed
    h.apply(C.FEATURE_LEVEL, rid="f", level=2)
    answer = asyncio.run(service.Note(request, Context()))
    assert answer.record.target == "upgrading n3" and answer.record.action == C.AUDIT_NOTE
    with pytest.raises(Aborted) as empty:
        asyncio.run(service.Note(apb.AuditNoteRequest(note=" "), Context()))
    assert empty.value.code is grpc.StatusCode.INVALID_ARGUMENT
