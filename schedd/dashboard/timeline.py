"""The job page's ledger of instants drawn as a timeline: one lane per kind of outcome, so an
instant's kind is read from its lane's label (and its shape and tooltip), never from colour alone.

Pure shaping, no I/O: `category` sorts an instant (its ledger disposition, its run's state and
trigger) into a lane; `svg` draws the lanes. Marks are binned per pixel column and lane, so a
window of 10,000 instants draws at most `WIDTH` marks per lane (each with a tooltip that counts
what it holds) and renders in milliseconds. Each mark is focusable and carries its (first)
instant (`data-t`): the page explains it when it is clicked or activated with the keyboard (one
mark is a tab stop, the arrow keys move between them: a roving tabindex, set by the page). The SVG uses classes and presentation attributes
only: the dashboard's CSP allows no inline style.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime, UTC

#: The lanes, in drawing order: (key, label, letter). The letter marks each instant in the
#: run table and legend too.
LANES = (
    ("succeeded", "Succeeded", "S"),
    ("failed", "Failed", "F"),
    ("caught-up", "Caught up", "C"),
    ("running", "Running / waiting", "R"),
    ("skipped", "Skipped", "K"),
    ("missed", "Missed (not run)", "M"),
    ("paused", "Paused", "P"),
    ("manual", "Manual / backfill", "T"),
    ("other", "Other", "?"),
)
_LANE_INDEX = {key: i for i, (key, _, _) in enumerate(LANES)}
LETTERS = {key: letter for key, _, letter in LANES}
LABELS = {key: label for key, label, _ in LANES}

WIDTH = 1000            # pixels of the time axis
LABEL_W = 150           # the lane labels' column
LANE_H = 20
AXIS_H = 22
_MISSED = {"coalesced", "skipped-window", "skipped-catchup", "skipped-cap", "missing"}
_FAILED_STATES = {"FAILED", "TIMED_OUT", "LOST", "UPSTREAM_FAILED"}


def category(disposition: str, state: str = "", trigger: str = "") -> str:
    """The lane of one instant: what became of it, as a person asks it ("did it run? did it
    fail? was it skipped, and why?")."""
    if disposition in ("ran", "cancelled", "upstream-failed"):
        if trigger in ("manual", "backfill", "retry"):
            return "manual"
        if state in _FAILED_STATES or disposition == "upstream-failed":
            return "failed"
        if trigger == "catchup":
            return "caught-up"
        return "succeeded" if state == "SUCCEEDED" else "other"
    if disposition in ("running", "pending"):
        return "manual" if trigger in ("manual", "backfill") else "running"
    if disposition in _MISSED:
        return "missed"
    if disposition.startswith("skipped"):
        return "skipped"
    if disposition == "paused":
        return "paused"
    return "other"


@dataclass(slots=True)
class _Bin:
    first_ms: int
    last_ms: int
    count: int
    sample: str             # the first instant's disposition and detail


def _hhmm(ms: int, span_ms: int) -> str:
    d = datetime.fromtimestamp(ms / 1000, UTC)
    if span_ms <= 600_000:
        return d.strftime("%H:%M:%S")
    if span_ms <= 2 * 86_400_000:
        return d.strftime("%H:%M")
    return d.strftime("%m-%d %H:%M") if span_ms <= 60 * 86_400_000 else d.strftime("%Y-%m-%d")


def _stamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def svg(rows: list[dict[str, object]], since_ms: int, until_ms: int) -> str:
    """The timeline of `rows` (each: t, category, disposition, detail) over [since_ms, until_ms]
    (UTC on the axis, seconds shown for a window of minutes): one lane per category present,
    marks binned per pixel column."""
    span = max(until_ms - since_ms, 1)
    bins: dict[tuple[int, int], _Bin] = {}
    for r in rows:
        t = int(r["t"])                                     # type: ignore[call-overload]
        lane = _LANE_INDEX.get(str(r["category"]), _LANE_INDEX["other"])
        x = min(WIDTH - 1, max(0, (t - since_ms) * WIDTH // span))
        b = bins.get((lane, x))
        if b is None:
            detail = str(r.get("detail") or "")
            bins[(lane, x)] = _Bin(t, t, 1, str(r["disposition"]) + (f": {detail}" if detail else ""))
        else:
            b.last_ms, b.count = max(b.last_ms, t), b.count + 1
    lanes = sorted({lane for lane, _ in bins})
    row_of = {lane: i for i, lane in enumerate(lanes)}
    height = AXIS_H + LANE_H * max(len(lanes), 1) + 4
    total_w = LABEL_W + WIDTH + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" id="timeline-svg" '
           f'viewBox="0 0 {total_w} {height}" width="{total_w}" height="{height}" role="img" '
           f'aria-label="instants by outcome">']
    for lane in lanes:
        key, label, letter = LANES[lane]
        y = AXIS_H + row_of[lane] * LANE_H
        out.append(f'<g class="lane lane-{key}" data-lane="{key}">'
                   f'<rect class="lane-bg" x="{LABEL_W}" y="{y}" width="{WIDTH}" height="{LANE_H}"/>'
                   f'<text class="lane-label" x="4" y="{y + 14}">{letter} {html.escape(label)}</text>')
        for (b_lane, x), b in sorted(bins.items()):
            if b_lane != lane:
                continue
            when = _stamp(b.first_ms) if b.count == 1 else f"{b.count} instants, {_stamp(b.first_ms)} to {_stamp(b.last_ms)}"
            out.append(f'<rect class="mark mark-{key}" x="{LABEL_W + x}" y="{y + 3}" width="3" height="{LANE_H - 6}" '
                       f'data-t="{b.first_ms}" tabindex="-1" role="button">'
                       f'<title>{html.escape(label)}: {html.escape(when)}, {html.escape(b.sample)}</title></rect>')
        out.append("</g>")
    for i in range(6):                                      # the axis: six ticks, UTC
        x = LABEL_W + i * (WIDTH - 1) // 5
        t = since_ms + span * i // 5
        anchor = "start" if i == 0 else "end" if i == 5 else "middle"
        out.append(f'<line class="tick" x1="{x}" y1="{AXIS_H - 4}" x2="{x}" y2="{height - 4}"/>'
                   f'<text class="tick-label" x="{x}" y="{AXIS_H - 8}" text-anchor="{anchor}">'
                   f'{html.escape(_hhmm(t, span))}</text>')
    if not lanes:
        out.append(f'<text class="empty" x="{LABEL_W + 10}" y="{AXIS_H + 14}">no instants in this window</text>')
    out.append("</svg>")
    return "".join(out)


def legend(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each lane present with its count (the page's legend): key, label, letter, count."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[str(r["category"])] = counts.get(str(r["category"]), 0) + 1
    return [{"key": k, "label": label, "letter": letter, "count": counts[k]}
            for k, label, letter in LANES if k in counts]
