"""gRPC servicer of the Calendars service (proto/schedd_proto/calendars.proto).

Same rules as `schedd.api.service`: a non-leader forwards the call to the leader (once); input is
validated fully here (holidays and iCalendar files expanded by schedd.api.calendar_import) before
anything is proposed, so bad input commits nothing. Authorization: the interceptor checks
`write` (or `read`) on the team a calendar or blackout belongs to (schedd.api.auth RESOLVERS);
one that belongs to no team is cluster-wide, and writing it needs `operator` on the cluster,
checked here because only the request (or the stored row) says which it is.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import grpc

from schedd.api import auth
from schedd.api.calendar_import import expand
from schedd.api.service import CommittingService, Router, routed
from schedd.core import acl as A
from schedd.core import calendars as K
from schedd.core import commands as C
from schedd.core import results as R
from schedd.core.model import ValidationError
from schedd.core.tables import Tables
from schedd.ports.clock import Clock
from schedd.ports.metrics import Metrics
from schedd.ports.rpc import CallContext
from schedd.replication.node import RaftNode
from schedd_proto import calendars_pb2 as cpb
from schedd_proto import calendars_pb2_grpc as cpb_grpc

CHANGE_NOTE = ("takes effect for instants not yet recorded; instants already in the ledger keep "
               "their disposition")


def calendar_to_pb(st: Tables, cal: K.Calendar) -> cpb.Calendar:
    entries = [cpb.CalendarEntry(date=d, name=n) for d, n in cal.dates]
    entries += [cpb.CalendarEntry(date=a, last=b, name=n) for a, b, n in cal.ranges]
    spec = cpb.CalendarSpec(name=cal.name, team=cal.team, description=cal.description, entries=entries,
                            weekdays=[K.WEEKDAYS[w] for w in cal.weekdays])
    return cpb.Calendar(spec=spec, version=cal.version, updated_ms=cal.updated_ms, updated_by=cal.updated_by,
                        sources=cal.sources, used_by=K.users_of(st, cal.name))


def blackout_to_pb(b: K.Blackout) -> cpb.Blackout:
    return cpb.Blackout(name=b.name, start_ms=b.start_ms, end_ms=b.end_ms, team=b.team, labels=dict(b.labels),
                        reason=b.reason, created_ms=b.created_ms, created_by=b.created_by)


def _listed(rows: dict[str, Any], team: str) -> list[Any]:
    """The rows the caller may read, by name, of `team` if given: cluster-wide rows are read by
    anyone who may read a team, a team's by its readers."""
    teams = auth.read_filter()
    return [rows[n] for n in sorted(rows) if (teams is None or not rows[n].team or rows[n].team in teams)
            and (not team or rows[n].team == team)]


class CalendarsService(CommittingService, cpb_grpc.CalendarsServicer):
    SERVICE = "Calendars"

    def __init__(self, node: RaftNode, clock: Clock, metrics: Metrics, router: Router) -> None:
        self.node, self.clock, self.metrics = node, clock, metrics
        self.router = router

    async def _cluster_wide(self, context: CallContext, what: str) -> None:
        if not auth.may("operator", A.CLUSTER):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"permission denied: {what} is cluster-wide (no team): missing capability "
                                "'operator' on cluster")

    @routed(write=True)
    async def PutCalendar(self, request: cpb.PutCalendarRequest, context: CallContext) -> cpb.PutCalendarResponse:
        if not request.calendar.team:
            await self._cluster_wide(context, f"calendar {request.calendar.name!r}")
        this_year = datetime.fromtimestamp(self.clock.now_ms() / 1000, UTC).year
        try:
            doc = expand(request.calendar, this_year)
            C.encode(C.CALENDAR_PUT, rid="x", now=0, term=0, calendar=doc)
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{e}; nothing was committed")
        except C.EntryTooLarge as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"calendar too large ({e}): give fewer years or entries; nothing was committed")
        result = await self._commit(context, C.CALENDAR_PUT, request.request_id, calendar=doc,
                                    create_only=request.create_only)
        stored = result.of(R.Stored)
        with self.node.lock:
            st = self.node.state
            cal = st.calendars.get(stored.name)
            out = calendar_to_pb(st, cal) if cal is not None else cpb.Calendar()
        note = "" if stored.created or not out.used_by else f"used by {len(out.used_by)} job(s): the change {CHANGE_NOTE}"
        return cpb.PutCalendarResponse(calendar=out, created=stored.created, note=note)

    @routed(write=False)
    async def GetCalendar(self, request: cpb.GetCalendarRequest, context: CallContext) -> cpb.Calendar:
        with self.node.lock:
            st = self.node.state
            cal = st.calendars.get(request.name)
            if cal is not None:
                return calendar_to_pb(st, cal)
        await context.abort(grpc.StatusCode.NOT_FOUND, f"calendar {request.name!r} not found")

    @routed(write=False)
    async def ListCalendars(self, request: cpb.ListCalendarsRequest, context: CallContext) -> cpb.ListCalendarsResponse:
        with self.node.lock:
            st = self.node.state
            rows = [calendar_to_pb(st, row) for row in _listed(st.calendars, request.team)]
        return cpb.ListCalendarsResponse(calendars=rows)

    @routed(write=True)
    async def DeleteCalendar(self, request: cpb.DeleteCalendarRequest, context: CallContext) -> cpb.DeleteCalendarResponse:
        await self._delete(context, "calendar", C.CALENDAR_DELETE, request.name, request.request_id)
        return cpb.DeleteCalendarResponse(name=request.name)

    async def _delete(self, context: CallContext, kind: str, entry: str, name: str, rid: str) -> None:
        """NOT_FOUND before anything is proposed; a cluster-wide row needs operator."""
        with self.node.lock:
            st = self.node.state
            row = (st.calendars if kind == "calendar" else st.blackouts).get(name)
        if row is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"{kind} {name!r} not found")
        if not row.team:
            await self._cluster_wide(context, f"{kind} {name!r}")
        await self._commit(context, entry, rid, name=name)

    @routed(write=True)
    async def PutBlackout(self, request: cpb.PutBlackoutRequest, context: CallContext) -> cpb.Blackout:
        b = request.blackout
        if not b.team:
            await self._cluster_wide(context, f"blackout {b.name!r}")
        doc = {"name": b.name, "start_ms": b.start_ms, "end_ms": b.end_ms, "team": b.team,
               "labels": dict(b.labels), "reason": b.reason}
        try:
            doc = K.check_blackout(doc)
        except ValidationError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{e}; nothing was committed")
        await self._commit(context, C.BLACKOUT_PUT, request.request_id, blackout=doc)
        with self.node.lock:
            row = self.node.state.blackouts.get(b.name)
            return blackout_to_pb(row) if row is not None else cpb.Blackout()

    @routed(write=False)
    async def ListBlackouts(self, request: cpb.ListBlackoutsRequest, context: CallContext) -> cpb.ListBlackoutsResponse:
        with self.node.lock:
            rows = [blackout_to_pb(row) for row in _listed(self.node.state.blackouts, request.team)]
        return cpb.ListBlackoutsResponse(blackouts=rows)

    @routed(write=True)
    async def DeleteBlackout(self, request: cpb.DeleteBlackoutRequest, context: CallContext) -> cpb.DeleteBlackoutResponse:
        await self._delete(context, "blackout", C.BLACKOUT_DELETE, request.name, request.request_id)
        return cpb.DeleteBlackoutResponse(name=request.name)
