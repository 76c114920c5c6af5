"""Membership: the replicated member table (schedd.core.members), the Membership view
that joins it with pysyncobj's Raft configuration, and the one-change-at-a-time gate, alone and
behind the Membership service."""

from __future__ import annotations

import asyncio
import itertools
import pickle
from dataclasses import dataclass

import grpc
import pytest

from schedd.api.membership_service import MembershipService
from schedd.core import commands as C
from schedd.core import members as member_table
from schedd.core.digest import state_digest
from schedd.core.results import Code
from schedd.core.state import SchedulerState
from tests.support.state import at_top_level
from schedd.ports.fakes import FakeNode, ManualClock, RecordingMetrics
from schedd.replication import membership as mf
from schedd.replication.membership import ChangeGate, ChangeRefused, MemberInfo, Membership
from schedd.replication.node import RaftStatus
from schedd.settings import Peer
from schedd.versions import build_info
from schedd_proto import membership_pb2 as mpb
from schedd_proto import membership_pb2_grpc as mpb_grpc

A, B, C3, D = "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004"


def entry(rows, rid: str = "r") -> str:
    return C.encode(C.MEMBERS, rid=rid, now=1, term=1, members=rows)


# ---------------------------------------------------------------- the replicated table


def test_a_members_entry_replaces_the_table_and_survives_a_snapshot():
    st = at_top_level(SchedulerState())
    rows = [["n1", A, "127.0.0.1:8001"], ["n2", B, "127.0.0.1:8002"]]
    assert st.apply(entry(rows), 1).ok
    assert st.members == {"n1": (A, "127.0.0.1:8001"), "n2": (B, "127.0.0.1:8002")}
    copy = at_top_level(SchedulerState())
    copy.restore(pickle.loads(pickle.dumps(st.snapshot(), protocol=2)))
    assert copy.members == st.members and copy.state_digest() == st.state_digest()
    copy.members = {"n1": (A, "127.0.0.1:8001")}
    assert state_digest(copy) != state_digest(st)            # replicas that differ here are told apart


@pytest.mark.parametrize("rows, why", [
    ([], "non-empty"),
    ([["n1", A, "127.0.0.1:8001"], ["n1", B, "127.0.0.1:8002"]], "appears twice"),
    ([["n1", A, "127.0.0.1:8001"], ["n2", A, "127.0.0.1:8002"]], "used by two members"),
    ([["n1", "nowhere", "127.0.0.1:8001"]], "not host:port"),
    ([["bad id!", A, "127.0.0.1:8001"]], "node id"),
    ([["n1", A]], "[id, raft_address, grpc_address]"),
])
def test_a_bad_table_is_refused_and_changes_nothing(rows, why):
    st = at_top_level(SchedulerState())
    st.apply(entry([["n1", A, "127.0.0.1:8001"]], "first"), 1)
    result = st.apply(entry(rows, "second"), 2)
    assert result.code is Code.INVALID and why in result.msg
    assert st.members == {"n1": (A, "127.0.0.1:8001")}


# ---------------------------------------------------------------- the Membership view


def view(raft: list[str], table: dict, static=(), saved=(), data_dir=None) -> Membership:
    return Membership("n1", list(static), lambda: list(raft), lambda: dict(table), data_dir, saved=saved)


STATIC = [Peer("n1", A, "g1:1"), Peer("n2", B, "g2:1"), Peer("n3", C3, "g3:1")]


def test_voters_come_from_the_raft_config_and_names_from_the_table_over_the_config():
    ms = view([A, B, D], {"n4": (D, "g4:1"), "n2": (B, "g2:2")}, STATIC)
    assert [m.id for m in ms.members()] == ["n1", "n2", "n4"]        # n3 is configured, not a voter
    assert ms.grpc_of_raft(B) == "g2:2"                                # the table wins over the config
    assert ms.id_of_raft(D) == "n4" and ms.grpc_of_raft(D) == "g4:1"   # added at run time
    assert ms.by_id("n3") is None


def test_a_voter_nobody_named_shows_its_address_and_membership_json_names_it_meanwhile():
    assert MemberInfo(D, D, "") in view([A, D], {}, STATIC).members()
    ms = view([A, D], {}, STATIC, saved=[MemberInfo("n4", D, "g4:1")])
    assert ms.id_of_raft(D) == "n4" and ms.grpc_of_raft(D) == "g4:1"


def test_a_config_that_disagrees_with_the_committed_membership_is_reported():
    assert view([A, B, C3], {}, STATIC).config_disagreement() == ""
    text = view([A, C3, D], {"n4": (D, "g4:1")}, STATIC).config_disagreement()
    assert "lists n2, not members" in text and "does not list members n4" in text
    assert view([A, B, C3], {}, [STATIC[0]]).config_disagreement() == ""   # a joined node: no peers


def test_a_raft_config_read_racing_the_tick_thread_is_retried():
    calls = itertools.count()

    def racing() -> list[str]:
        if next(calls) < 3:
            raise RuntimeError("Set changed size during iteration")
        return [A, B]
    ms = Membership("n1", STATIC, racing, dict)
    assert [m.id for m in ms.members()] == ["n1", "n2"]


def test_the_membership_file_is_written_when_it_changes_and_read_back(tmp_path):
    raft = [A, B, C3]
    ms = Membership("n1", STATIC, lambda: list(raft), dict, tmp_path)
    assert ms.persist() and not ms.persist()              # unchanged: not rewritten
    raft.append(D)
    assert ms.persist()
    assert sorted(m.raft_address for m in mf.read_file(tmp_path)) == [A, B, C3, D]
    assert (tmp_path / mf.MEMBERSHIP_FILE).stat().st_mode & 0o777 == 0o600
    (tmp_path / mf.MEMBERSHIP_FILE).write_text("{not json")
    assert mf.read_file(tmp_path) is None
    assert mf.read_file(tmp_path / "nowhere") is None


# ---------------------------------------------------------------- one change at a time


def test_the_gate_admits_one_change_and_names_it_to_the_next():
    gate = ChangeGate()
    change = gate.begin("add", "n4", D)
    gate.step(change, "catching up")
    with pytest.raises(ChangeRefused, match=r"in flight \(add n4 \(127.0.0.1:7004\): catching up"):
        gate.begin("remove", "n2", B)
    assert gate.in_flight().startswith("add n4")
    gate.end(change, "committed")
    assert gate.in_flight() == "" and gate.last.startswith("add n4: committed")
    gate.end(gate.begin("remove", "n2", B), "committed")


def test_a_remove_takes_back_a_committed_add_of_the_same_node_and_nothing_else():
    gate = ChangeGate()
    add = gate.begin("add", "n4", D)
    with pytest.raises(ChangeRefused):            # not committed yet: Raft allows no second change
        gate.begin("remove", "n4", D)
    gate.committed(add)
    with pytest.raises(ChangeRefused):            # another node: the add still holds the gate
        gate.begin("remove", "n2", B)
    with pytest.raises(ChangeRefused):            # an add is never taken over
        gate.begin("add", "n5", "127.0.0.1:7005")
    with pytest.raises(ChangeRefused):            # the same id at another address is not that add
        gate.begin("remove", "n4", B)
    remove = gate.begin("remove", "n4", D)
    assert gate.current is remove and add.outcome.startswith("committed; taken back by remove n4")
    assert gate.last.startswith("add n4: committed; taken back")
    gate.end(add, "committed; not caught up within 60 s")     # the add's watch ends late: no effect
    assert gate.current is remove and "taken back" in gate.last


class Aborted(Exception):
    pass


class Context:
    def __init__(self) -> None:
        self.status: grpc.StatusCode | None = None

    async def abort(self, code, details="", trailing_metadata=()):
        self.status = code
        raise Aborted(details)

    def set_trailing_metadata(self, trailing_metadata):
        self.trailing = trailing_metadata

    def time_remaining(self):
        return None

    def code(self):
        return self.status

    def invocation_metadata(self):
        return ()

    def peer(self):
        return "ipv4:127.0.0.1:1"

    def time_remaining(self):
        return 10.0


@dataclass
class Cfg:
    node_id: str = "n1"
    raft_address: str = A
    grpc_address: str = "g1:1"
    secret: str = ""


class MemberNode(FakeNode):
    """A leader whose pysyncobj membership changes wait until the test lets them commit."""

    def __init__(self) -> None:
        st = at_top_level(SchedulerState())
        index = itertools.count(1)
        super().__init__(lambda e: st.apply(e, next(index)), lambda: st, cfg=Cfg())
        self.raft = [A, B, C3]
        self.membership = Membership("n1", STATIC, lambda: list(self.raft), lambda: dict(st.members))
        self.changes = ChangeGate()
        self.release = asyncio.Event()
        self.catches_up = True          # False: an added node that never starts
        self.raft_status = RaftStatus(role="leader", term=1, commit_index=10, applied_index=10,
                                      leader_commit_index=10, has_quorum=True, uptime_s=1)

    async def change_config(self, op: str, raft_address: str, *, timeout: float = 10.0) -> None:
        await self.release.wait()
        (self.raft.append if op == "add" else self.raft.remove)(raft_address)
        if self.catches_up:
            self.raft_status.match_index[raft_address] = 10


def service(node: MemberNode) -> MembershipService:
    return MembershipService(node, ManualClock(1_000), RecordingMetrics(), router=None)


def test_a_second_change_while_one_is_in_flight_is_refused_with_failed_precondition():
    async def run() -> None:
        node = MemberNode()
        svc = service(node)
        first = asyncio.create_task(svc.AddNode(mpb.AddNodeRequest(
            id="n4", raft_address=D, grpc_address="g4:1"), Context()))
        while node.changes.current is None or "Raft" not in node.changes.current.step:
            await asyncio.sleep(0.01)
        ctx = Context()
        with pytest.raises(Aborted, match="another membership change is in flight .add n4"):
            await svc.AddNode(mpb.AddNodeRequest(id="n5", raft_address="127.0.0.1:7005",
                                                 grpc_address="g5:1"), ctx)
        assert ctx.status == grpc.StatusCode.FAILED_PRECONDITION
        node.release.set()
        out = await first
        assert [m.id for m in out.members] == ["n1", "n2", "n3", "n4"]
        assert node.state.members["n4"] == (D, "g4:1")              # recorded with the add
        for _ in range(100):                                          # caught up: the gate opens
            if node.changes.current is None:
                break
            await asyncio.sleep(0.05)
        assert node.changes.current is None and "caught up" in node.changes.last
        await svc.RemoveNode(mpb.RemoveNodeRequest(id="n2"), Context())
        assert [m.id for m in node.membership.members()] == ["n1", "n3", "n4"]
        assert sorted(node.state.members) == ["n1", "n3", "n4"]       # the table follows the remove
    asyncio.run(run())


def test_remove_node_takes_back_an_add_whose_node_never_started_at_once():
    async def run() -> None:
        node = MemberNode()
        node.catches_up = False
        node.release.set()
        svc = service(node)
        added = await svc.AddNode(mpb.AddNodeRequest(id="n4", raft_address=D, grpc_address="g4:1"), Context())
        assert [m.id for m in added.members] == ["n1", "n2", "n3", "n4"]
        assert node.changes.current is not None and "catch up" in node.changes.current.step
        refused = Context()
        with pytest.raises(Aborted, match="another membership change is in flight .add n4"):
            await svc.RemoveNode(mpb.RemoveNodeRequest(id="n2"), refused)
        assert refused.status == grpc.StatusCode.FAILED_PRECONDITION
        out = await svc.RemoveNode(mpb.RemoveNodeRequest(id="n4"), Context())
        assert out.steps[0] == "took back the add of n4: committed, never caught up"
        assert node.raft == [A, B, C3] and sorted(node.state.members) == ["n1", "n2", "n3"]
        assert node.changes.current is None and node.changes.last.startswith("remove n4: committed")
        await asyncio.gather(*svc._tasks)                # the add's watch saw it end, and left
        assert node.changes.last.startswith("remove n4: committed")
        await svc.RemoveNode(mpb.RemoveNodeRequest(id="n2"), Context())    # the gate is open
    asyncio.run(run())


def test_a_join_with_other_schedule_dependencies_is_refused_naming_both():
    async def run() -> None:
        node = MemberNode()
        ctx = Context()
        with pytest.raises(Aborted) as refused:
            await service(node).JoinCluster(mpb.JoinClusterRequest(
                id="n4", raft_address=D, grpc_address="g4:1", tzdata="1999a", croniter="0.0.1"), ctx)
        tz, cron = build_info().schedule_deps()
        assert ctx.status == grpc.StatusCode.FAILED_PRECONDITION
        assert "tzdata 1999a" in str(refused.value) and f"tzdata {tz}" in str(refused.value)
        assert f"croniter {cron}" in str(refused.value)
        assert node.proposed == [] and node.changes.current is None
    asyncio.run(run())


@pytest.mark.parametrize("request_, code", [
    (mpb.AddNodeRequest(id="n2", raft_address=D, grpc_address="g4:1"), grpc.StatusCode.ALREADY_EXISTS),
    (mpb.AddNodeRequest(id="n4", raft_address=B, grpc_address="g4:1"), grpc.StatusCode.ALREADY_EXISTS),
    (mpb.AddNodeRequest(id="n4", raft_address="nowhere", grpc_address="g4:1"), grpc.StatusCode.INVALID_ARGUMENT),
    (mpb.RemoveNodeRequest(id="n9"), grpc.StatusCode.NOT_FOUND),
])
def test_bad_changes_are_refused_and_commit_nothing(request_, code):
    async def run() -> None:
        node = MemberNode()
        svc = service(node)
        ctx = Context()
        call = svc.AddNode if isinstance(request_, mpb.AddNodeRequest) else svc.RemoveNode
        with pytest.raises(Aborted):
            await call(request_, ctx)
        assert ctx.status == code and node.proposed == [] and node.changes.current is None
    asyncio.run(run())


def test_a_recorded_member_that_never_voted_is_forgotten_from_the_table_only():
    async def run() -> None:
        node = MemberNode()
        svc = service(node)
        node.apply(entry([["n1", A, "g1:1"], ["n2", B, "g2:1"], ["n3", C3, "g3:1"], ["n4", D, "g4:1"]]))
        out = await svc.RemoveNode(mpb.RemoveNodeRequest(id="n4"), Context())
        assert "recorded but not voting" in out.steps[0]
        assert sorted(node.state.members) == ["n1", "n2", "n3"] and node.raft == [A, B, C3]
    asyncio.run(run())


def test_the_table_parser_sorts_rows_into_one_text_per_table():
    table = {"n2": (B, "g2:1"), "n1": (A, "g1:1")}
    assert member_table.rows_of(table) == [["n1", A, "g1:1"], ["n2", B, "g2:1"]]
    assert member_table.parse_table(member_table.rows_of(table)) == table


# ---------------------------------------------------------------- the joining side


class FakeMembership(mpb_grpc.MembershipServicer):
    """A Membership servicer answering JoinCluster from a script of (code, details) or a reply."""

    def __init__(self, script) -> None:
        self.script = list(script)
        self.calls: list[mpb.JoinClusterRequest] = []

    async def JoinCluster(self, request, context):
        self.calls.append(request)
        step = self.script.pop(0)
        if isinstance(step, tuple):
            await context.abort(*step)
        return step


def run_join(tmp_path, script):
    from schedd.runtime import join as joining
    from schedd.settings import NodeConfig

    async def go():
        server = grpc.aio.server()
        fake = FakeMembership(script)
        mpb_grpc.add_MembershipServicer_to_server(fake, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        cfg = NodeConfig(node_id="n4", data_dir=tmp_path / "n4", raft_address=D, grpc_address="127.0.0.1:8004",
                         secret="s" * 32, join=(f"127.0.0.1:{port}",))
        try:
            return await joining.join(cfg, grpc.aio.insecure_channel, deadline_s=10), fake
        finally:
            await server.stop(0)
    return asyncio.run(go())


def test_the_joiner_retries_an_unavailable_node_and_reports_the_clusters_refusal(tmp_path):
    from schedd.runtime.join import JoinRefused
    reply = mpb.MembershipChangeResponse(members=[{"id": "n1", "raft_address": A, "grpc_address": "g1:1"},
                                                  {"id": "n4", "raft_address": D, "grpc_address": "127.0.0.1:8004"}])
    (members, member), fake = run_join(tmp_path, [(grpc.StatusCode.UNAVAILABLE, "no leader is elected yet"), reply])
    assert [m.id for m in members] == ["n1", "n4"] and not member and len(fake.calls) == 2
    tz, cron = build_info().schedule_deps()
    assert (fake.calls[0].tzdata, fake.calls[0].croniter) == (tz, cron)
    with pytest.raises(JoinRefused, match="refused to add n4: refusing n4: its schedule dependencies"):
        run_join(tmp_path, [(grpc.StatusCode.FAILED_PRECONDITION,
                             "refusing n4: its schedule dependencies (tzdata 1999a, croniter 0.0.1) differ")])


def test_join_is_a_list_or_a_comma_separated_string_and_needs_the_secret(tmp_path):
    from schedd.runtime import config
    base = {"node_id": "n4", "data_dir": str(tmp_path), "raft_address": D, "grpc_address": "127.0.0.1:8004"}
    secret = config.generate_secret()
    assert config.from_dict({**base, "secret": secret, "join": "127.0.0.1:8001, 127.0.0.1:8002"}).join == (
        "127.0.0.1:8001", "127.0.0.1:8002")
    assert config.from_dict({**base, "secret": secret, "join": ["127.0.0.1:8001"]}).join == ("127.0.0.1:8001",)
    with pytest.raises(config.ConfigError, match="join must be host:port"):
        config.from_dict({**base, "secret": secret, "join": ["nowhere"]})
    with pytest.raises(config.ConfigError, match="join needs the cluster's secret"):
        config.from_dict({**base, "join": ["127.0.0.1:8001"]})


def test_a_node_may_join_only_as_the_node_its_certificate_names():
    from schedd.api import auth

    class TlsContext(Context):
        def auth_context(self):
            return {"transport_security_type": [b"ssl"], "peer_uri": [b"spiffe://schedd/node/n5"]}

    async def run() -> None:
        node = MemberNode()
        ctx = TlsContext()
        auth.CALL.set(auth.CallInfo("node:n4", "", "/schedd.v1.Membership/JoinCluster", None, forwarded_by="n4"))
        tz, cron = build_info().schedule_deps()
        with pytest.raises(Aborted, match="the certificate names node/n5, the request 'n4'"):
            await service(node).JoinCluster(mpb.JoinClusterRequest(
                id="n4", raft_address=D, grpc_address="g4:1", tzdata=tz, croniter=cron), ctx)
        assert ctx.status == grpc.StatusCode.PERMISSION_DENIED and node.proposed == []
    asyncio.run(run())


def test_cluster_status_lines_show_voters_non_voters_learners_and_the_change_in_flight():
    from schedd_client.membership_commands import membership_lines
    from schedd_proto import scheduler_pb2 as spb
    st = spb.ClusterStatus(
        leader_id="n1", nodes=[spb.NodeStatus(id="n1", learners=1)],
        members=[spb.MemberInfo(id="n1", voter=True), spb.MemberInfo(id="n2", voter=True),
                 spb.MemberInfo(id="n9", voter=False)],
        membership_change="add n4 (127.0.0.1:7004): catching up, 1.0 s")
    assert membership_lines(st).splitlines()[1:] == [
        "Voters (2): n1, n2   recorded, not voting: n9",
        "Non-voters catching up (joining nodes): 1",
        "Membership change in flight: add n4 (127.0.0.1:7004): catching up, 1.0 s"]


def test_a_restored_image_forgets_the_old_clusters_member_table():
    """`schedd restore` seeds a new cluster: its members are its config, never the old table."""
    st = at_top_level(SchedulerState())
    assert st.apply(entry([["n1", A, "127.0.0.1:8001"], ["old", B, "127.0.0.1:8002"]]), 1).ok
    with_table = st.state_digest()
    st.drop_member_table()
    assert st.members == {} and st.state_digest() != with_table
    assert st.state_digest() == state_digest(st)      # the cached digest went with the table
