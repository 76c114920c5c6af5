"""``--watch`` on ``job list``, ``run list``, ``worker list`` and ``dag show``: the server's stream
of changes (the SDK's ``watch_*``), shown two ways.

On a terminal (and ``-o table``) the listing is redrawn in place after each change, with the
list command's own table. In a pipe each change is one line, flushed at once (``ADDED``,
``CHANGED``, ``REMOVED``, then the row's key and state), so ``schedctl job list --watch | grep``
sees a job the moment it is added; ``-o json`` gives one JSON object per event and line. It runs
until interrupted (Ctrl-C) or until the server ends the stream.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

from .convert import printable, to_dict
from .invocation import Invocation

REDRAW = "\x1b[H\x1b[2J"          # cursor home, clear the screen
WATCH_HELP = ("keep watching: the server streams each change (redrawn in place on a terminal, one line "
              "per change in a pipe) until Ctrl-C")


def _live(cmd: Invocation) -> bool:
    return cmd.output.format == "table" and sys.stdout.isatty()


def _show(text: str) -> None:
    print(text, flush=True)


def watch_listing(cmd: Invocation, events: Iterable[Any], field: str, table: Callable[[list[Any]], str],
                  line: Callable[[Any], str]) -> None:
    """Show a watch of WatchEvents whose row is in `field` (job, execution, worker)."""
    rows: dict[str, Any] = {}
    synced = False
    live = _live(cmd)
    for event in events:
        if event.type == "synced":
            synced = True
        elif event.type == "removed":
            rows.pop(event.key, None)
        else:
            rows[event.key] = getattr(event, field)
        if cmd.output.format != "table":
            _show(json.dumps(to_dict(event), separators=(",", ":")))
        elif live:
            if synced:
                _show(REDRAW + printable(table([rows[k] for k in sorted(rows)])))
        elif event.type == "removed":
            _show(f"REMOVED {printable(event.key)}")
        elif event.type != "synced":
            _show(f"{event.type.upper()} {printable(line(getattr(event, field)))}")


def watch_run(cmd: Invocation, runs: Iterable[Any], render: Callable[[Any], str]) -> None:
    """Show a watch of one DAG run: redrawn on a terminal, one line per change in a pipe."""
    live = _live(cmd)
    for run in runs:
        if cmd.output.format != "table":
            _show(json.dumps(to_dict(run), separators=(",", ":")))
        elif live:
            _show(REDRAW + printable(render(run)))
        else:
            tasks = " ".join(f"{t.task}={t.state}" for t in run.tasks)
            _show(printable(f"{run.run_id} {run.state} {tasks}"))
