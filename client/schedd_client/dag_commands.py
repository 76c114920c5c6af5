"""``schedctl dag ...``: apply, run, show, runs, list, get, delete. The DAG document and the SDK
methods are in ``schedd_client.dags``; this module is the command line only."""

from __future__ import annotations

import yaml

from schedd_proto import dags_pb2 as dpb

from ._cli import _count, _file_options, _global_options, _table
from .convert import format_duration, format_time, to_dict
from .dags import dag_specs_from_bytes, dag_to_dict
from .documents import Limits, read_input
from .run_flow_commands import add_dag_commands, add_flow_flags, params_of, report_dag_run
from .watch_commands import WATCH_HELP, watch_run


_STATE_MARK = {"SUCCEEDED": "✓", "FAILED": "✗", "TIMED_OUT": "✗", "LOST": "✗", "CANCELLED": "✗",
               "UPSTREAM_FAILED": "⊘", "SKIPPED": "-", "RUNNING": "▶", "RETRY_WAIT": "…",
               "SCHEDULED": "·", "PENDING": " "}


def add_commands(groups, command) -> None:
    """The ``schedctl dag`` group; ``groups``/``command`` are schedctl's parser helpers."""
    sub = groups.add_parser("dag", help="define, run and inspect DAGs of tasks",
                            description="define, run and inspect DAGs of tasks")
    _global_options(sub, top=False)
    dags = sub.add_subparsers(dest="command", required=True, metavar="COMMAND")
    apply = command(dags, "apply", dag_apply, "create or replace every DAG in a YAML/JSON file")
    _file_options(apply, required=True)
    dag_run_cmd = command(dags, "run", dag_run, "start a run of a DAG now", timeout=False)
    dag_run_cmd.add_argument("name", metavar="NAME")
    add_flow_flags(dag_run_cmd)
    add_dag_commands(dags, command)          # dag clear
    show = command(dags, "show", dag_show, "the graph with each task's state in a run (default: newest)")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--run", dest="run_id", default="", metavar="ID", help="run id, or its time part")
    show.add_argument("--watch", action="store_true", help=WATCH_HELP)
    runs = command(dags, "runs", dag_runs, "runs of a DAG, newest first, with states and durations")
    runs.add_argument("name", metavar="NAME")
    runs.add_argument("--limit", type=_count(1), default=20, metavar="N")
    command(dags, "list", dag_list, "every DAG")
    get = command(dags, "get", dag_get, "a DAG's definition (-o yaml gives the document back)")
    get.add_argument("name", metavar="NAME")
    command(dags, "delete", dag_delete, "delete a DAG with its runs (no confirmation)").add_argument(
        "name", metavar="NAME")


def _read_dags(path: str, limits: Limits) -> list[dpb.DagSpec]:
    return dag_specs_from_bytes(*read_input(path, limits), limits)


def _duration(run: dpb.DagRun | dpb.DagTaskRun, now_ms: int) -> str:
    start = getattr(run, "started_ms", 0) or getattr(run, "created_ms", 0)
    if not start:
        return "-"
    end = run.ended_ms or now_ms
    return format_duration(max(0, end - start) / 1000) + ("" if run.ended_ms else "+")


def dag_apply(cmd) -> None:
    specs = _read_dags(cmd.args.file, cmd.file_limits())
    out = [cmd.client.put_dag(spec) for spec in specs]
    cmd.emit([to_dict(r) for r in out], lambda: "\n".join(
        f"dag {r.dag.spec.name} {'created' if r.created else 'configured'} (version {r.dag.version}, "
        f"{len(r.dag.spec.tasks)} tasks" + (f", next run {cmd.when(r.dag.next_fire_ms)}" if r.dag.next_fire_ms else "")
        + ")" for r in out))


def dag_run(cmd) -> None:
    run = cmd.client.run_dag(cmd.args.name, params=params_of(cmd.args))
    report_dag_run(cmd, run, render_run)


def dag_show(cmd) -> None:
    if cmd.args.watch:
        watch_run(cmd, cmd.client.watch_dag_run(cmd.args.name, cmd.args.run_id), lambda r: render_run(r, cmd.clock))
        return
    run = cmd.client.get_dag_run(cmd.args.name, cmd.args.run_id)
    cmd.emit(to_dict(run), lambda: render_run(run, cmd.clock))


def render_run(run: dpb.DagRun, clock=None) -> str:
    """The graph in layers (a task sits one layer below its deepest upstream), each task with its
    state in the run; upstreams are named when a task has several or they are not the layer above."""
    import time
    now_ms = int((clock or time.time)() * 1000)
    depth: dict[str, int] = {}
    for t in run.tasks:                       # topological order
        depth[t.task] = 1 + max((depth[u] for u in t.upstream), default=-1)
    width = max((len(t.task) for t in run.tasks), default=4)
    lines = [f"run {run.run_id}  {run.state}  trigger={run.trigger}  "
             f"duration {_duration(run, now_ms)}  (dag version {run.dag_version})"
             + (f"  SLA deadline {format_time(run.sla_deadline_ms)}" if run.sla_deadline_ms else "")
             + ("  ! SLA missed" if _sla_missed(run) else "")]
    for t in run.tasks:
        pad = "    " * depth[t.task]
        arrow = "└─ " if t.upstream else "● "
        state = f"{_STATE_MARK.get(t.state, '?')} {t.state}"
        info = []
        if t.upstream:
            info.append("after " + ", ".join(t.upstream))
        if t.trigger_rule and t.trigger_rule != "all_success":
            info.append(t.trigger_rule)
        if t.sensor:
            info.append("sensor")
        if t.attempts:
            info.append(f"{t.attempts} attempt{'s' if t.attempts > 1 else ''}")
        if t.started_ms:
            info.append(f"{format_time(t.started_ms)} {_duration(t, now_ms)}")
        if t.reason and t.state not in ("SUCCEEDED",):
            info.append(t.reason if len(t.reason) <= 70 else t.reason[:67] + "...")
        name = f"{pad}{arrow}{t.task}"
        lines.append(f"  {name:<{width + 4 * max(depth.values(), default=0) + 3}}  {state:<18} {'  '.join(info)}")
    if run.events:
        lines.append("events:")
        lines += [f"  {format_time(e.time_ms) or '-'}  {'! ' if e.kind == 'sla_missed' else ''}{e.kind}  "
                  f"{e.message}" for e in run.events]
    return "\n".join(lines)


def dag_runs(cmd) -> None:
    runs = list(cmd.client.list_dag_runs(cmd.args.name, limit=cmd.args.limit).runs)
    now_ms = int(cmd.clock() * 1000)
    sla = any(_sla_missed(r) for r in runs)              # an SLA column only when one missed

    def table() -> str:
        rows = []
        for r in runs:
            counts: dict[str, int] = {}
            for t in r.tasks:
                counts[t.state] = counts.get(t.state, 0) + 1
            rows.append((r.run_id, r.state, r.trigger, format_time(r.logical_ms), _duration(r, now_ms),
                         ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())))
                        + (("! missed" if _sla_missed(r) else "-",) if sla else ()))
        return _table(("RUN ID", "STATE", "TRIGGER", "LOGICAL TIME", "DURATION", "TASKS") + (("SLA",) if sla else ()),
                      rows, empty=f"No runs of {cmd.args.name} yet.")
    cmd.emit([to_dict(r) for r in runs], table)


def _sla_missed(run: dpb.DagRun) -> bool:
    return any(e.kind == "sla_missed" for e in run.events)


def dag_list(cmd) -> None:
    dags = list(cmd.client.list_dags().dags)
    cmd.emit([to_dict(d) for d in dags], lambda: _table(
        ("NAME", "TASKS", "SCHEDULE", "NEXT RUN", "LAST RUN", "STATE", "VERSION"),
        [(d.spec.name, len(d.spec.tasks), (f"{d.spec.schedule} ({d.spec.timezone})" if d.spec.schedule else "on demand"),
          cmd.when(d.next_fire_ms), d.last_run_id or "-", d.last_run_state or "-", d.version) for d in dags],
        empty="No DAGs."))


def dag_get(cmd) -> None:
    d = cmd.client.get_dag(cmd.args.name)
    if cmd.args.output == "yaml":
        cmd.print_data(dag_to_dict(d.spec))
        return
    cmd.emit(to_dict(d), lambda: yaml.safe_dump(dag_to_dict(d.spec), sort_keys=False, allow_unicode=True)
             + f"# version {d.version}, last run {d.last_run_id or '-'} {d.last_run_state}")


def dag_delete(cmd) -> None:
    cmd.client.delete_dag(cmd.args.name)
    cmd.emit({"deleted": cmd.args.name}, lambda: f"dag {cmd.args.name} deleted")
