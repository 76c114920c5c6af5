"""The capability every RPC needs: the table the authorizing interceptor looks methods up in.

Keyed by the gRPC full method name (`/schedd.v1.Scheduler/PutJob`, what `handler_call_details.method`
holds). `scope` says what the resource is: `team` (the team of the job, execution, DAG or spec the
request names: the servicer or a resolver finds it), `cluster`, `worker` (Workers.Connect: a worker
token, `serve` checked per pool and team by `acl.may_serve`), or `open` (no capability: bootstrap,
health). `filtered` marks lists that show only what `visible_teams(principal, capability)` admits.

Contract: every RPC of every service in proto/schedd_proto has exactly one entry (a unit test parses
the protos), so a new RPC without a decision here is refused, never silently open. See
docs/security-acl.md for the reasoning behind each row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from schedd.core.acl import KIND_CAPABILITIES, SERVE

Scope = Literal["team", "cluster", "worker", "open"]


@dataclass(slots=True, frozen=True)
class Need:
    capability: str            # "" for open methods
    scope: Scope
    filtered: bool = False     # a list: filter rows by visible_teams instead of refusing the call

    def __post_init__(self) -> None:
        fits = {"team": KIND_CAPABILITIES["team"], "cluster": KIND_CAPABILITIES["cluster"],
                "worker": frozenset((SERVE,)), "open": frozenset(("",))}[self.scope]
        if self.capability not in fits:
            raise ValueError(f"capability {self.capability!r} does not fit scope {self.scope}")


def _service(name: str, rows: dict[str, Need]) -> dict[str, Need]:
    return {f"/schedd.v1.{name}/{method}": need for method, need in rows.items()}


READ, LIST = Need("read", "team"), Need("read", "team", filtered=True)
WRITE = Need("write", "team")
OPERATOR = Need("operator", "cluster")

RPC_CAPABILITIES: dict[str, Need] = {
    **_service("Scheduler", {
        "PutJob": WRITE, "PutJobs": WRITE, "GetJob": READ, "ListJobs": LIST,
        "PauseJob": WRITE, "ResumeJob": WRITE, "DeleteJob": WRITE,
        "TriggerJob": Need("trigger", "team"), "ListExecutions": LIST, "GetExecution": READ,
        "CancelExecution": Need("cancel", "team"), "BackfillJob": Need("backfill", "team"),
        "ListInstants": READ, "SetQuota": Need("quota", "cluster"),
        "ListQuotas": LIST,                    # team rows by read; pool/lane rows need quota
        "RetryExecution": Need("trigger", "team"),   # a new attempt is a run asked for, as a trigger
        "WatchJobs": LIST, "WatchExecutions": LIST, "WatchWorkers": OPERATOR,   # as the listings they watch
        "DiffJobs": READ,                      # shows what a write would store; commits nothing
        "Forecast": LIST,                      # counts the jobs of the teams the caller may read;
                                               # worker slots only for operators
        "Explain": READ,                       # as GetExecution and ListInstants
    }),
    **_service("Dags", {
        "PutDag": WRITE, "GetDag": READ, "ListDags": LIST, "DeleteDag": WRITE,
        "RunDag": Need("trigger", "team"), "ListDagRuns": READ, "GetDagRun": READ,
        "ClearDagTask": Need("trigger", "team"), "WatchDagRun": READ,
    }),
    **_service("Workers", {"Connect": Need(SERVE, "worker"), "ConnectNode": Need(SERVE, "worker"),
                           "ListWorkers": OPERATOR}),
    **_service("Cluster", {"Status": OPERATOR, "NodeInfo": OPERATOR, "ListShards": OPERATOR,
                           "MoveShard": Need("membership", "cluster")}),
    **_service("Membership", {m: Need("membership", "cluster") for m in ("AddNode", "RemoveNode", "JoinCluster")}),
    **_service("Testing", {"SetClockOffset": OPERATOR, "GetClockOffset": OPERATOR}),
    **_service("Acl", {
        "Bootstrap": Need("", "open"), "WhoAmI": Need("", "open"),
        **{m: Need("acl", "cluster") for m in (
            "PutPolicy", "GetPolicy", "ListPolicies", "DeletePolicy", "PutRole", "GetRole", "ListRoles",
            "DeleteRole", "CreateToken", "GetToken", "ListTokens", "DeleteToken", "SetAnonymous")},
        # Any client token may have its own one-time dashboard link (logging in needs no
        # capability, as WhoAmI); the servicer refuses a caller without a token, or a worker's.
        "LoginLink": Need("", "open"),
    }),
    **_service("Audit", {"List": Need("acl", "cluster"), "Verify": Need("acl", "cluster"),
                         "Configure": Need("acl", "cluster"), "Note": Need("acl", "cluster")}),
    # The image holds every team's jobs, the token hashes and the audit trail: whoever may
    # grant any capability (acl) may read it, an operator alone may not.
    **_service("Backup", {"SaveSnapshot": Need("acl", "cluster"), "CopyHistory": Need("acl", "cluster"),
                          "SaveHistory": Need("acl", "cluster")}),
    # A team's calendars and blackouts: write (read) on the team; cluster-wide ones (no team)
    # are written with operator on the cluster, checked by the servicer (schedd.api.calendars_service).
    **_service("Calendars", {
        "PutCalendar": WRITE, "GetCalendar": READ, "ListCalendars": LIST, "DeleteCalendar": WRITE,
        "PutBlackout": WRITE, "ListBlackouts": LIST, "DeleteBlackout": WRITE,
    }),
    # A run's log is read like the run: whoever may read the job's team.
    **_service("Logs", {"ReadRunLogs": READ}),
}


def need_of(method: str) -> Need | None:
    """The need of a full method name; None: not in the table, so the call must be refused."""
    return RPC_CAPABILITIES.get(method)
