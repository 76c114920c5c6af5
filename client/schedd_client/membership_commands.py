"""``schedctl cluster add-node|remove-node|replace-node``: membership changes from the command
line (the SDK methods are in ``schedd_client.membership``).

    cluster add-node ID --raft ADDR --grpc ADDR [--wait S]   record it, commit the add; start the node
    cluster remove-node ID                                   commit the removal; stop the node
    cluster replace-node OLD NEW --raft ADDR --grpc ADDR     remove OLD, then add NEW, each step printed
"""

from __future__ import annotations

import sys
import time
from typing import Any

from schedd_proto import membership_pb2 as mpb

from .convert import to_dict


def _lines(title: str, out: mpb.MembershipChangeResponse) -> str:
    voters = ", ".join(f"{m.id} ({m.raft_address})" for m in out.members)
    steps = "".join(f"\n  - {s}" for s in out.steps)
    return f"{title} in {out.seconds:.1f} s:{steps}\nvoters now: {voters}"


def membership_lines(status: Any) -> str:
    """`cluster status`'s membership lines: voters, non-voters, the change in flight."""
    voters = [m.id for m in status.members if m.voter]
    others = [m.id for m in status.members if not m.voter]
    out = f"\nVoters ({len(voters)}): {', '.join(voters) or '-'}" if status.members else ""
    if others:
        out += f"   recorded, not voting: {', '.join(others)}"
    leader = next((n for n in status.nodes if n.id == status.leader_id), None)
    if leader is not None and leader.learners:
        out += f"\nNon-voters catching up (joining nodes): {leader.learners}"
    out += f"\nMembership change in flight: {status.membership_change}" if status.membership_change else ""
    return out


def add_node(cmd: Any) -> None:
    a = cmd.args
    out = cmd.client.add_node(a.id, raft_address=a.raft, grpc_address=a.grpc, wait_caught_up_s=a.wait)
    cmd.emit(to_dict(out), lambda: _lines(f"added {a.id}", out))


def remove_node(cmd: Any) -> None:
    out = cmd.client.remove_node(cmd.args.id)
    cmd.emit(to_dict(out), lambda: _lines(f"removed {cmd.args.id}", out))


def replace_node(cmd: Any) -> None:
    """Remove OLD, then add NEW: two changes, one after the other (the gate allows no more), each
    printed as it completes, so an operator who is interrupted knows which one is done."""
    a = cmd.args
    started = time.monotonic()
    print(f"step 1/2: removing {a.old} ...", file=sys.stderr)
    removed = cmd.client.remove_node(a.old)
    print(_lines(f"step 1/2: removed {a.old}", removed), file=sys.stderr)
    print(f"step 2/2: adding {a.new} ({a.raft}, gRPC {a.grpc}) ...", file=sys.stderr)
    added = cmd.client.add_node(a.new, raft_address=a.raft, grpc_address=a.grpc, wait_caught_up_s=a.wait)
    print(_lines(f"step 2/2: added {a.new}", added), file=sys.stderr)
    total = time.monotonic() - started
    cmd.emit({"removed": to_dict(removed), "added": to_dict(added), "seconds": total},
             lambda: f"replaced {a.old} with {a.new} in {total:.1f} s"
                     + ("" if added.caught_up or not a.wait else f" ({a.new} still catching up)"))


def add_commands(cluster: Any, command: Any) -> None:
    """Under ``schedctl cluster``; ``command`` is schedctl's parser helper."""
    def addresses(p: Any) -> None:
        p.add_argument("--raft", required=True, metavar="ADDR", help="its Raft address (host:port)")
        p.add_argument("--grpc", required=True, metavar="ADDR", help="its gRPC address (host:port)")
        p.add_argument("--wait", type=float, default=0.0, metavar="S",
                       help="wait up to S seconds for it to catch up (default 0: return once committed; raise --timeout above S)")

    add = command(cluster, "add-node", add_node, "add a voter (then start it with these addresses)")
    add.add_argument("id", metavar="ID")
    addresses(add)
    command(cluster, "remove-node", remove_node, "remove a voter (then stop it)").add_argument("id", metavar="ID")
    rep = command(cluster, "replace-node", replace_node, "remove OLD, then add NEW, printing each step")
    rep.add_argument("old", metavar="OLD")
    rep.add_argument("new", metavar="NEW")
    addresses(rep)
