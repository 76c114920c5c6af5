"""``schedctl quota set|delete|list``: caps on running attempts per team, pool or lane.

Its own module because quotas are a resource of the cluster with their own wording; nothing
else in schedctl reads them.
"""

from __future__ import annotations

from ._cli import _table
from .convert import to_dict
from .invocation import Invocation


def quota_set(cmd: Invocation) -> None:
    q = cmd.client.set_quota(cmd.args.quota_key, cmd.args.limit)
    cmd.emit(to_dict(q), lambda: f"quota {q.key}: at most {q.limit} running ({q.running} now)")


def quota_delete(cmd: Invocation) -> None:
    q = cmd.client.set_quota(cmd.args.quota_key, 0)
    cmd.emit(to_dict(q), lambda: f"quota {q.key} removed" + (f" (default {q.limit} applies)" if q.limit else ""))


def quota_list(cmd: Invocation) -> None:
    quotas = cmd.client.list_quotas()
    cmd.emit(
        [to_dict(q) for q in quotas],
        lambda: _table(("QUOTA", "LIMIT", "RUNNING"),
                       [(q.key, q.limit or "-", q.running) for q in quotas], empty="No quotas."),
    )
