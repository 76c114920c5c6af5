"""The replicated member table: which node id answers at which Raft and gRPC address.

pysyncobj's own configuration knows members only by their Raft address (architecture.md "Facts" §1f), so a node
added at run time would be unknown by id and gRPC address to every other node (forwarding to the
leader, cluster status). The leader commits the whole table in one MEMBERS entry before it adds a
node to the Raft configuration and after it removes one (schedd.api.membership_service); the
Raft configuration stays the authority on who votes (schedd.replication.membership joins both).

Apply validates the whole table before it replaces the old one: ids are node ids, addresses are
host:port, no two members share an id or an address.
"""

from __future__ import annotations

import re

from schedd.core import commands as C
from schedd.core import results as R
from schedd.core.results import ApplyResult, Code, ok, reject
from schedd.core.tables import Tables

NODE_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
ADDRESS_RE = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")
MAX_MEMBERS = 15

Table = dict[str, tuple[str, str]]


def parse_table(rows: object) -> Table | str:
    """The table of `rows` ([[id, raft, grpc], ...]), or why it is refused."""
    if not isinstance(rows, list) or not rows:
        return "members must be a non-empty list of [id, raft_address, grpc_address]"
    if len(rows) > MAX_MEMBERS:
        return f"at most {MAX_MEMBERS} members, got {len(rows)}"
    table: Table = {}
    seen: set[str] = set()
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and all(isinstance(x, str) for x in row)):
            return f"a member is [id, raft_address, grpc_address], got {row!r}"
        nid, raft, grpc = row
        if not NODE_ID_RE.match(nid):
            return f"node id must be 1-64 of A-Z a-z 0-9 . _ -, got {nid!r}"
        for addr in (raft, grpc):
            if not ADDRESS_RE.match(addr) or not 0 < int(addr.rsplit(":", 1)[1]) < 65536:
                return f"member {nid}: {addr!r} is not host:port"
        if nid in table:
            return f"node id {nid} appears twice"
        for addr in (raft, grpc):
            if addr in seen:
                return f"address {addr} is used by two members"
            seen.add(addr)
        table[nid] = (raft, grpc)
    return table


def rows_of(table: Table) -> list[list[str]]:
    """What a MEMBERS entry carries (sorted by id: one text per table)."""
    return [[nid, raft, grpc] for nid, (raft, grpc) in sorted(table.items())]


def put_members(st: Tables, cmd: C.Command, index: int) -> ApplyResult:
    parsed = parse_table(cmd.args.get("members"))
    if isinstance(parsed, str):
        return reject(Code.INVALID, parsed)
    st.members = parsed
    return ok(R.Members(len(parsed)))


HANDLERS = {C.MEMBERS: put_members}
