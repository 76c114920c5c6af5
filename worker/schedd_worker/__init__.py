"""The schedd worker: runs the attempts the leader pushes (shell, HTTP, Python handlers, DAG
sensors) and reports how they ended.

    from schedd_worker import Worker       # embed a worker with Python handlers (see sdk.py)

`schedd-worker` (cli.py) is the command line. Modules: runtime.py (`WorkerRuntime`, which wires
the rest), lanes.py (one shard's link, ledger and share of the slots), leader_search.py and
leader_link.py (finding the leader, the stream's life), session.py (one stream's reads and
writes), reports.py (heartbeats, results and their resends), admission.py (whether an assignment
is taken), starts.py and slots.py (when an attempt starts), attempt.py (one attempt's life),
giving_up.py (drain, self-fence), ledger.py (what is held and owed), executors.py (one attempt,
to its end), handlers/ (one module per handler kind behind one interface), hooks.py (the fault suite's test-mode hooks).

`Worker` and `HandlerContext` load lazily: importing this package (e.g. the CLI) must not import
gRPC before the CLI has set GRPC_ENABLE_FORK_SUPPORT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .sdk import CredentialRefused, HandlerContext, Worker

__all__ = ["Worker", "HandlerContext", "CredentialRefused"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import sdk
        return getattr(sdk, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
