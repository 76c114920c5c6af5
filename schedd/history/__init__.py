"""A node's history of finished executions, on disk (SQLite), derived from the Raft log.

The daemon opens one per node (schedd.runtime.history) and the Raft shell hands it what apply
moves out of the replicated tables (schedd.core.history). See docs/architecture.md, "History
store", for what it holds and its contract with the log; schedd.history.store for the API.
"""

from schedd.history.retention import PruneStep, Retention
from schedd.history.store import HistoryStore

__all__ = ["HistoryStore", "PruneStep", "Retention"]
