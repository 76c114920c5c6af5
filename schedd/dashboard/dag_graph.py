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
MAX_WAYPOINTS = 1000              # waypoints of long edges laid out (each is a row in its layer)

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


Edge = tuple[str, str]          # (upstream task, task)


@dataclass(slots=True, frozen=True)
class Layout:
    """Each task's place, and for an edge that spans more than one layer, the places it passes
    through in the layers between (so it is drawn around the boxes there, never under one)."""

    placed: dict[str, Placed]
    bends: dict[Edge, list[Placed]]


def layout(tasks: Mapping[str, Sequence[str]]) -> dict[str, Placed]:
    """Where each task goes (`routed`'s places)."""
    return routed(tasks).placed


def routed(tasks: Mapping[str, Sequence[str]]) -> Layout:
    """The layered layout: layers by longest path; an edge spanning k layers gets k-1 waypoints,
    which take a row in their layers like a task; rows start from the tasks' given order
    (topological, as the API lists them), then barycentre sweeps reorder each layer by its
    neighbours' mean row, down then up."""
    layer = layers_of(tasks)
    up: dict[str, list[str]] = {n: [] for n in tasks}
    down: dict[str, list[str]] = {n: [] for n in tasks}
    chains: dict[Edge, list[str]] = {}
    edges = [(u, name) for name, ups in tasks.items() for u in ups if u in tasks]
    budget = MAX_WAYPOINTS                 # shortest spans first; past the budget, edges go straight
    for u, name in sorted(edges, key=lambda e: layer[e[1]] - layer[e[0]]):
        span = layer[name] - layer[u] - 1
        via: list[str] = []
        if 0 < span <= budget:
            budget -= span
            via = [f"\0{u}\0{name}\0{k}" for k in range(layer[u] + 1, layer[name])]
            for k, w in zip(range(layer[u] + 1, layer[name]), via):
                layer[w] = k
                up[w], down[w] = [], []
        if via:
            chains[(u, name)] = via
        path = [u, *via, name]
        for a, b in zip(path, path[1:]):
            down[a].append(b)
            up[b].append(a)
    columns: list[list[str]] = [[] for _ in range(1 + max(layer.values(), default=-1))]
    for n in [*tasks, *(w for via in chains.values() for w in via)]:   # tasks in their given order first
        columns[layer[n]].append(n)
    row = {n: i for col in columns for i, n in enumerate(col)}

    def reorder(col: list[str], neighbours: Mapping[str, Sequence[str]]) -> list[str]:
        def key(n: str) -> tuple[float, int]:
            near = [row[m] for m in neighbours[n]]
            return (sum(near) / len(near) if near else float(row[n]), row[n])
        ordered = sorted(col, key=key)
        for i, n in enumerate(ordered):
            row[n] = i
        return ordered

    for _ in range(SWEEPS):
        for i in range(1, len(columns)):
            columns[i] = reorder(columns[i], up)
        for i in range(len(columns) - 2, -1, -1):
            columns[i] = reorder(columns[i], down)
    return Layout({n: Placed(layer[n], row[n]) for n in tasks},
                  {e: [Placed(layer[w], row[w]) for w in via] for e, via in chains.items()})


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
def _layout_of(edges: tuple[tuple[str, tuple[str, ...]], ...]) -> Layout:
    """`routed`, kept for the graphs drawn lately: a page redraws its graph every few seconds as
    states change, and a DAG's shape rarely does. (Callers only read the answer.)"""
    return routed(dict(edges))


def _edge_path(start: Placed, via: list[Placed], end: Placed) -> str:
    """An edge from the right side of `start`'s box to the left side of `end`'s, a curve between
    layers and a straight run across each waypoint's place (where no box is)."""
    x, y = _xy(start)
    x, y = x + NODE_W, y + NODE_H // 2
    d = [f"M{x},{y}"]
    for p in [*via, end]:
        nx, ny = _xy(p)
        ny += NODE_H // 2
        mid = (x + nx) // 2
        d.append(f"C{mid},{y} {mid},{ny} {nx},{ny}")
        x, y = nx + NODE_W, ny
        if p is not end:
            d.append(f"L{x},{y}")
    return " ".join(d)


def _xy(p: Placed) -> tuple[int, int]:
    return MARGIN + p.layer * (NODE_W + GAP_X), MARGIN + p.row * (NODE_H + GAP_Y)


def svg(tasks: Mapping[str, Sequence[str]], states: Mapping[str, tuple[str, str]], *, title: str) -> str:
    """The DAG as SVG: `states` maps a task to (state, execution id) in the run shown (missing:
    not run yet); a task that ran links to its run page. Classes carry the colours (the page's
    CSP allows no inline style)."""
    drawn = _layout_of(tuple((n, tuple(ups)) for n, ups in tasks.items()))
    placed = drawn.placed
    every = [*placed.values(), *(p for via in drawn.bends.values() for p in via)]
    width = MARGIN * 2 + max((p.layer + 1 for p in every), default=0) * (NODE_W + GAP_X) - GAP_X
    height = MARGIN * 2 + max((p.row + 1 for p in every), default=0) * (NODE_H + GAP_Y) - GAP_Y
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="dag-graph" width="{max(width, 0)}" '
           f'height="{max(height, 0)}" viewBox="0 0 {max(width, 0)} {max(height, 0)}" role="img">',
           f"<title>{html.escape(title)}</title>",
           '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
           'orient="auto"><path d="M0,0 L8,4 L0,8 z" class="arrow"/></marker></defs>']
    for name, ups in tasks.items():
        for u in ups:
            if u not in placed:
                continue
            out.append(f'<path class="edge" data-from="{html.escape(u)}" data-to="{html.escape(name)}" '
                       f'd="{_edge_path(placed[u], drawn.bends.get((u, name), []), placed[name])}" '
                       'marker-end="url(#arrow)"/>')
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
