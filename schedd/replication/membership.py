"""Who the cluster's members are, from one place: `Membership`; one change at a time: `ChangeGate`.

The source of truth is two replicated things joined:
- who votes: pysyncobj's Raft configuration (this node plus `otherNodes`, by Raft address). It
  changes when a membership entry is appended (architecture.md "Facts" §1f), it is kept in pysyncobj's dump and
  re-applied from the journal, and after a restart it overrides the config file's peers (#133);
- what each voter is called and where its gRPC port is: the member table the leader commits in a
  MEMBERS entry (schedd.core.members) before an add and after a remove.
A voter the table does not name yet (a cluster that never changed its membership) is looked up
in the static config, the bootstrap membership. Every lookup by address (forwarding to the
leader, cluster status, replica names) goes through `Membership`.

The Raft configuration a node last saw is also written to `membership.json` in its data dir, so
a node that restarts before it has a dump (or that joined with no peers in its config) builds
its SyncObj with the right peers; pysyncobj's dump and journal then have the last word.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger("schedd.membership")

MEMBERSHIP_FILE = "membership.json"
READ_TRIES = 20


@dataclass(slots=True, frozen=True)
class MemberInfo:
    id: str
    raft_address: str
    grpc_address: str


class StaticMember(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def raft_address(self) -> str: ...
    @property
    def grpc_address(self) -> str: ...


def read_file(data_dir: str | os.PathLike[str]) -> list[MemberInfo] | None:
    """The members last written to the data dir (None: no file, or an unreadable one)."""
    path = Path(data_dir) / MEMBERSHIP_FILE
    try:
        rows = json.loads(path.read_text())["members"]
        return [MemberInfo(str(r[0]), str(r[1]), str(r[2])) for r in rows]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        log.warning("ignoring %s: %s", path, e)
        return None


def write_file(data_dir: str | os.PathLike[str], members: Iterable[MemberInfo]) -> None:
    """Atomically (rename), 0600 like the rest of the data dir."""
    path = Path(data_dir) / MEMBERSHIP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    text = json.dumps({"members": [[m.id, m.raft_address, m.grpc_address] for m in members]})
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Membership:
    """The committed membership as this node knows it (module doc). Thread-safe reads: the
    Raft configuration is copied from the tick thread's set (retried if it changes under the
    read), the table under the node lock."""

    def __init__(self, self_id: str, static: Sequence[StaticMember],
                 raft_config: Callable[[], list[str]], table: Callable[[], dict[str, tuple[str, str]]],
                 data_dir: str | os.PathLike[str] | None = None, saved: Iterable[MemberInfo] = ()) -> None:
        self.self_id = self_id
        self._static = [MemberInfo(m.id, m.raft_address, m.grpc_address) for m in static]
        self._saved = list(saved)       # membership.json's names: used until the table has them
        self._raft_config = raft_config
        self._table = table
        self._data_dir = data_dir
        self._written: list[MemberInfo] | None = None
        self.source = "config"          # where the topology at start came from (start-up log)

    def raft_addresses(self) -> list[str]:
        """The voters' Raft addresses (this node first), as pysyncobj has them now."""
        for _ in range(READ_TRIES):
            try:
                return self._raft_config()
            except RuntimeError:        # the set changed size under the copy
                continue
        return self._raft_config()

    def _known(self) -> dict[str, MemberInfo]:
        """Raft address -> member: the table over the static config over membership.json."""
        out = {m.raft_address: m for m in self._saved}
        out.update((m.raft_address, m) for m in self._static)
        for nid, (raft, grpc) in self._table().items():
            out[raft] = MemberInfo(nid, raft, grpc)
        return out

    def members(self) -> list[MemberInfo]:
        """The voters, ordered by id; one whose name no one recorded shows its address as id."""
        known = self._known()
        out = [known.get(a) or MemberInfo(a, a, "") for a in self.raft_addresses()]
        return sorted(out, key=lambda m: m.id)

    def recorded(self) -> list[MemberInfo]:
        """The member table alone (what the last MEMBERS entry committed), by id."""
        return sorted((MemberInfo(n, r, g) for n, (r, g) in self._table().items()), key=lambda m: m.id)

    def by_id(self, node_id: str) -> MemberInfo | None:
        return next((m for m in self.members() if m.id == node_id), None)

    def by_raft(self, raft_address: str) -> MemberInfo | None:
        return self._known().get(raft_address)

    def grpc_of_raft(self, raft_address: str) -> str:
        m = self.by_raft(raft_address)
        return m.grpc_address if m is not None else ""

    def id_of_raft(self, raft_address: str) -> str:
        m = self.by_raft(raft_address)
        return m.id if m is not None else ""

    def config_disagreement(self) -> str:
        """Why the config file's member list is not the committed one ("" if it is)."""
        committed = {m.raft_address for m in self.members()}
        configured = {m.raft_address for m in self._static}
        if committed == configured or len(self._static) <= 1:
            return ""                   # a config with no peers (a node that joined) agrees
        extra = sorted(self.id_of_raft(a) or a for a in configured - committed)
        missing = sorted(self.id_of_raft(a) or a for a in committed - configured)
        parts = ([f"lists {', '.join(extra)}, not members"] if extra else []) + \
                ([f"does not list members {', '.join(missing)}"] if missing else [])
        return ("the config file's peers disagree with the committed membership (which wins): it "
                + " and ".join(parts))

    def describe(self) -> str:
        return ", ".join(f"{m.id}={m.raft_address}" for m in self.members())

    def persist(self) -> bool:
        """Write the voters to membership.json if they changed since the last write."""
        if self._data_dir is None:
            return False
        now = self.members()
        if now == self._written:
            return False
        write_file(self._data_dir, now)
        self._written = now
        return True


class ChangeRefused(Exception):
    """Another membership change is in flight (FAILED_PRECONDITION)."""


@dataclass(slots=True)
class Change:
    op: str                 # add | remove
    node_id: str
    raft_address: str
    step: str
    started: float          # time.monotonic()
    committed: bool = False  # its Raft configuration entry is committed (an add then catches up)
    outcome: str = ""       # how it ended ("": it holds the gate, or is about to)

    def describe(self) -> str:
        return (f"{self.op} {self.node_id} ({self.raft_address}): {self.step}, "
                f"{time.monotonic() - self.started:.1f} s")

    def taken_back_by(self, op: str, node_id: str, raft_address: str) -> bool:
        """Whether `op` on (node_id, raft_address) may replace this change in the gate: a remove
        of the node this add made a voter, once the add is committed. Raft's single-server
        rule asks only that the previous configuration entry be committed; the catch-up wait
        after it is ours, and for a node that never starts (a typo) it would otherwise hold a
        voter no one runs, and the gate, for CATCH_UP_S."""
        return (op == "remove" and self.op == "add" and self.committed
                and (node_id, raft_address) == (self.node_id, self.raft_address))


class ChangeGate:
    """One membership change at a time on this node (the leader: changes are forwarded there).
    pysyncobj does not enforce it (architecture.md "Facts" F3: two back-to-back adds both commit), and Raft's
    single-server changes are only safe one after another. A change holds the gate from the
    request until its node is in the committed configuration and, for an add, caught up (or
    `catch_up_s` passed), so the next one waits for a cluster whose quorum is sound. The one
    exception: the remove of a node whose add is committed but not caught up takes the gate
    over at once (Change.taken_back_by), so an add of a wrong address can be undone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current: Change | None = None
        self.last: str = ""         # how the previous change ended (status)

    def begin(self, op: str, node_id: str, raft_address: str) -> Change:
        with self._lock:
            held = self.current
            if held is not None and not held.taken_back_by(op, node_id, raft_address):
                raise ChangeRefused(f"another membership change is in flight ({held.describe()}); "
                                    "retry once it completes (see `schedctl cluster status`)")
            if held is not None:
                self._end(held, f"committed; taken back by remove {node_id} before it caught up")
            self.current = Change(op, node_id, raft_address, "starting", time.monotonic())
            return self.current

    def step(self, change: Change, step: str) -> None:
        change.step = step
        log.info("membership: %s %s: %s", change.op, change.node_id, step)

    def committed(self, change: Change) -> None:
        """Its configuration entry is committed: from now on a remove may take back an add."""
        change.committed = True

    def end(self, change: Change, outcome: str) -> None:
        """Release the gate if `change` still holds it (a change taken back has ended already:
        its own later end changes nothing)."""
        with self._lock:
            if self.current is change:
                self._end(change, outcome)

    def _end(self, change: Change, outcome: str) -> None:
        change.outcome = outcome
        self.current = None
        self.last = f"{change.op} {change.node_id}: {outcome} after {time.monotonic() - change.started:.1f} s"
        log.info("membership: %s", self.last)

    def in_flight(self) -> str:
        c = self.current
        return c.describe() if c is not None else ""
