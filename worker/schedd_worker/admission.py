"""Whether the worker takes an assignment: accept it, refuse it, or treat it as a duplicate.

Why separate: the leader counts on these rules (an assignment of an older term than the newest
seen is refused, so is one beyond `slots + ahead` held, or while draining; a token already held is
a duplicate, its result resent if it has one), and they read only numbers the worker keeps. A
pure function, so each rule is one line here and the runtime only acts on the verdict.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from enum import Enum

from schedd_proto import scheduler_pb2 as pb

__all__ = ["Verdict", "Admission", "admit"]


class Verdict(Enum):
    ACCEPT = "accept"
    REJECT = "reject"                    # reported REJECTED with `why`: the leader runs it elsewhere
    RUNNING = "running"                  # a duplicate of an attempt held here: ignored
    FINISHED = "finished"                # a duplicate of one that ended: its result is resent


@dataclass(slots=True, frozen=True)
class Admission:
    verdict: Verdict
    why: str = ""


def admit(a: pb.Assignment, *, max_term_seen: int, held: Container[int], owed: Container[int],
          draining: bool, holding: int, capacity: int) -> Admission:
    """The verdict on `a`, with `holding` attempts held of at most `capacity` (slots + ahead).
    The caller raises max_term_seen to `a.term` afterwards, whatever the verdict."""
    if a.term < max_term_seen:
        return Admission(Verdict.REJECT, f"assignment from term {a.term}, already saw term {max_term_seen}")
    if a.fencing_token in held:
        return Admission(Verdict.RUNNING)
    if a.fencing_token in owed:
        return Admission(Verdict.FINISHED)
    if draining:
        return Admission(Verdict.REJECT, "worker draining")
    if holding >= capacity:
        return Admission(Verdict.REJECT, "no free slot")
    return Admission(Verdict.ACCEPT)
