"""A DAG drawn: where each task goes (`layout`), and the SVG the DAG page shows (`svg`). Pure.

The layout is the classic layered one, small enough to read: a task's layer is the longest path
from a root to it (so every edge points right), and within a layer the tasks are ordered to
reduce crossings by barycentre sweeps (a task moves toward the mean position of its neighbours
in the layers before it, then after it), a few times over. Disconnected parts fall out as bands
of their own. No library: the page needs only positions, and 200 tasks lay out in milliseconds.

Each task's state is said three ways, so colour is never the only signal: the node's class (its
colour), a symbol, and the state's name in words under the task's name.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

NODE_W, NODE_H = 168, 46          # a node's box
GAP_X, GAP_Y = 64, 18             # between layers, between nodes of a layer
MARGIN = 12
SWEEPS = 4                        # barycentre passes (down then up); more rarely helps

#: A state's symbol and words (PENDING and "" say the task has not started in that run).
STATES: dict[str, tuple[str, str]] = {
    "": ("○", "not run yet"), "PENDING": ("○", "waiting"), "SCHEDULED": ("◷", "scheduled"),
    "RUNNING": ("▶", "running"), "RETRY_WAIT": ("↻", "retry wait"), "SUCCEEDED": ("✓", "succeeded"),
    "FAILED": ("✗", "failed"), "TIMED_OUT": ("⌛", "timed out"), "LOST": ("?", "lost"),
    "CANCELLED": ("⊘", "cancelled"), "SKIPPED": ("↷", "skipped"), "UPSTREAM_FAILED": ("⤫", "upstream failed"),
}


@dataclass(slots=True, frozen=True)
class Placed:
    """A task's place: its layer (column) and its row within the layer."""

    layer: int
    row: int


def layers_of(tasks: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Each task's layer: 0 for a root, else one more than its deepest upstream (longest path).
    `tasks`: name -> upstream names (an acyclic graph, as the API keeps; unknown upstreams are
    ignored)."""
    layer: dict[str, int] = {}
    for name in tasks:
        stack = [name]
        while stack:                       # iterative: a 1,000-task chain must not recurse that deep
            top = stack[-1]
            if top in layer:
                stack.pop()
                continue
            waiting = [u for u in tasks[top] if u in tasks and u not in layer]
            if waiting:
                stack.extend(waiting)
            else:
                layer[top] = 1 + max((layer[u] for u in tasks[top] if u in tasks), default=-1)
                stack.pop()
    return layer


def layout(tasks: Mapping[str, Sequence[str]]) -> dict[str, Placed]:
    """Where each task goes. Rows start from the tasks' given order (topological, as the API
    lists them), then barycentre sweeps reorder each layer by its neighbours' mean row."""
    layer = layers_of(tasks)
    columns: list[list[str]] = [[] for _ in range(1 + max(layer.values(), default=-1))]
    for name in tasks:
        columns[layer[name]].append(name)
    down: dict[str, list[str]] = {n: [] for n in tasks}
    for name, ups in tasks.items():
        for u in ups:
            if u in down:
                down[u].append(name)
    row = {n: i for col in columns for i, n in enumerate(col)}

    def reorder(col: list[str], neighbours: Mapping[str, Sequence[str]]) -> list[str]:
        def key(n: str) -> tuple[float, int]:
            near = [row[m] for m in neighbours[n] if m in row]
            return (sum(near) / len(near) if near else float(row[n]), row[n])
        ordered = sorted(col, key=key)
        for i, n in enumerate(ordered):
            row[n] = i
        return ordered

    upstream = {n: [u for u in tasks[n] if u in tasks] for n in tasks}
    for _ in range(SWEEPS):
        for i in range(1, len(columns)):
            columns[i] = reorder(columns[i], upstream)
        for i in range(len(columns) - 2, -1, -1):
            columns[i] = reorder(columns[i], down)
    return {n: Placed(layer[n], row[n]) for n in tasks}


def crossings(tasks: Mapping[str, Sequence[str]], placed: Mapping[str, Placed]) -> int:
    """Pairs of edges between the same two adjacent layers that cross (the layout's score)."""
    edges = [(placed[u], placed[n]) for n, us in tasks.items() for u in us if u in placed]
    count = 0
    for i, (a1, b1) in enumerate(edges):
        for a2, b2 in edges[i + 1:]:
            if a1.layer == a2.layer and b1.layer == b2.layer and (a1.row - a2.row) * (b1.row - b2.row) < 0:
                count += 1
    return count


def downstream(tasks: Mapping[str, Sequence[str]], task: str) -> list[str]:
    """`task` and every task that depends on it, transitively, in the tasks' given order: what
    "clear with downstream" runs again (as schedd.core.dags.clear decides it)."""
    down: dict[str, list[str]] = {n: [] for n in tasks}
    for name, ups in tasks.items():
        for u in ups:
            down.setdefault(u, []).append(name)
    below, todo = {task}, [task]
    while todo:
        for d in down.get(todo.pop(), ()):
            if d not in below:
                below.add(d)
                todo.append(d)
    return [n for n in tasks if n in below]


@functools.lru_cache(maxsize=64)
def _layout_of(edges: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, Placed]:
    """`layout`, kept for the graphs drawn lately: a page redraws its graph every few seconds as
    states change, and a DAG's shape rarely does. (Callers only read the answer.)"""
    return layout(dict(edges))


def _xy(p: Placed) -> tuple[int, int]:
    return MARGIN + p.layer * (NODE_W + GAP_X), MARGIN + p.row * (NODE_H + GAP_Y)


def svg(tasks: Mapping[str, Sequence[str]], states: Mapping[str, tuple[str, str]], *, title: str) -> str:
    """The DAG as SVG: `states` maps a task to (state, execution id) in the run shown (missing:
    not run yet); a task that ran links to its run page. Classes carry the colours (the page's
    CSP allows no inline style)."""
    placed = _layout_of(tuple((n, tuple(ups)) for n, ups in tasks.items()))
    width = MARGIN * 2 + max((p.layer + 1 for p in placed.values()), default=0) * (NODE_W + GAP_X) - GAP_X
    height = MARGIN * 2 + max((p.row + 1 for p in placed.values()), default=0) * (NODE_H + GAP_Y) - GAP_Y
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="dag-graph" width="{max(width, 0)}" '
           f'height="{max(height, 0)}" viewBox="0 0 {max(width, 0)} {max(height, 0)}" role="img">',
           f"<title>{html.escape(title)}</title>",
           '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
           'orient="auto"><path d="M0,0 L8,4 L0,8 z" class="arrow"/></marker></defs>']
    for name, ups in tasks.items():
        for u in ups:
            if u not in placed:
                continue
            (x1, y1), (x2, y2) = _xy(placed[u]), _xy(placed[name])
            x1, y1, y2 = x1 + NODE_W, y1 + NODE_H // 2, y2 + NODE_H // 2
            mid = (x1 + x2) // 2
            out.append(f'<path class="edge" data-from="{html.escape(u)}" data-to="{html.escape(name)}" '
                       f'd="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}" marker-end="url(#arrow)"/>')
    for name, p in placed.items():
        state, execution = states.get(name, ("", ""))
        symbol, words = STATES.get(state, ("•", state.lower().replace("_", " ")))
        x, y = _xy(p)
        node = (f'<g class="node state-{html.escape((state or "none").lower())}" data-task="{html.escape(name)}" '
                f'data-state="{html.escape(words)}">'
                f'<title>{html.escape(name)}: {html.escape(words)}</title>'
                f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6"/>'
                f'<text class="symbol" x="{x + 10}" y="{y + 29}">{symbol}</text>'
                f'<text class="name" x="{x + 30}" y="{y + 19}">{html.escape(_fit(name))}</text>'
                f'<text class="label" x="{x + 30}" y="{y + 36}">{html.escape(words)}</text></g>')
        if execution:
            node = f'<a href="/runs/{quote(execution, safe="")}">{node}</a>'
        out.append(node)
    out.append("</svg>")
    return "".join(out)


def _fit(name: str, chars: int = 19) -> str:
    """A name shortened to fit its box (the full name is in the node's title)."""
    return name if len(name) <= chars else name[:chars - 1] + "…"
