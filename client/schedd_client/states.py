"""The states of a run (an execution), as an enum that is also a ``str``.

The API carries a run's state as text (``Execution.state``); ``RunState`` names the values, so a
typo is an ``AttributeError`` at once rather than a comparison that is never true. Being a
``StrEnum``, a member equals its text (``RunState.FAILED == "FAILED"``) and goes wherever a
state string went (``list_executions(state=RunState.FAILED)``); ``RunState(run.state)`` turns
a message's text into a member.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["RunState"]


class RunState(StrEnum):
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    RETRY_WAIT = "RETRY_WAIT"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"
    LOST = "LOST"

    @property
    def finished(self) -> bool:
        """A final state: the run will not change again."""
        return self not in (RunState.SCHEDULED, RunState.RUNNING, RunState.RETRY_WAIT)

    @classmethod
    def parse(cls, text: str) -> RunState:
        """The state named by ``text`` in any case (``failed``, ``Timed_Out``); ValueError naming
        the states otherwise."""
        try:
            return cls(text.strip().upper())
        except ValueError:
            raise ValueError(f"unknown run state {text!r}; one of: "
                             f"{', '.join(s.value.lower() for s in cls)}") from None
