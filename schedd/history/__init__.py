"""A node's history of finished executions, on disk (SQLite), derived from the Raft log.

Not wired in yet: nothing in the daemon opens a store. See docs/architecture.md, "History
store", for what it holds and its contract with the log; schedd.history.store for the API.
"""

from schedd.history.retention import PruneStep, Retention
from schedd.history.store import HistoryStore

__all__ = ["HistoryStore", "PruneStep", "Retention"]
