"""schedctl's run flow: ``--param k=v`` and ``--wait [--timeout D]`` on ``job trigger``,
``dag run`` and ``run retry``, and the commands ``run retry`` and ``dag clear``.

With ``--wait`` the command reads the run until it ends, prints its output as the cluster
recorded it (``waiting.RecordedTail``; a streaming source plugs in there) and exits with the
status that says how it ended (``waiting.EXIT_STATUS``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from schedd_proto import dags_pb2 as dpb
from schedd_proto import scheduler_pb2 as pb

from ._cli import PROG, UsageError, _deadline
from .convert import printable, to_dict
from .invocation import Invocation
from . import waiting


class RunOutcome(Exception):
    """A waited-for run ended other than SUCCEEDED (or the wait timed out): schedctl exits
    with ``code`` after the command printed the run."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def param_arg(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def add_flow_flags(parser: argparse.ArgumentParser, *, params: bool = True) -> None:
    """--param (repeatable), --wait and --timeout on a command that starts a run."""
    if params:
        parser.add_argument("--param", dest="params", action="append", type=param_arg, default=[],
                            metavar="NAME=VALUE",
                            help="a run parameter (repeat for more); a shell job sees SCHEDD_PARAM_<NAME>")
    parser.add_argument("--wait", action="store_true",
                        help="wait for the run to end, print its output, exit with its outcome "
                             "(0 succeeded, 3 failed, 4 timed out, 5 cancelled, 6 skipped, 7 --timeout passed)")
    parser.add_argument("--timeout", dest="wait_timeout", type=_deadline, default=None, metavar="D",
                        help="with --wait: stop waiting after D (30s, 5m, ...; the run goes on); "
                             "without it: give up on the cluster after D (default 15s)")


def params_of(args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in getattr(args, "params", ()):
        if name in out:
            raise UsageError(f"--param {name} given twice")
        out[name] = value
    return out


def report_run(cmd: Invocation, run: pb.Execution, started: str) -> None:
    """Print the run just started (or retried); with --wait, wait for it and exit with its outcome."""
    if not cmd.args.wait:
        note = f": {run.reason}" if run.reason else ""
        cmd.emit(to_dict(run), lambda: f"{started}: execution {run.id} ({run.state}{note})")
        return
    print(f"{PROG}: {started}: execution {run.id}; waiting for it to end", file=sys.stderr)
    source: waiting.OutputSource = waiting.RecordedTail()
    try:
        done = waiting.wait_until(lambda: cmd.client.get_execution(run.id), waiting.run_ended,
                                  cmd.args.wait_timeout, f"run {run.id}",
                                  on_read=lambda r: _print(source.seen(r)))
    except waiting.WaitTimeout as e:
        print(f"{PROG}: {e.message} (it goes on: {PROG} run get {run.id})", file=sys.stderr)
        raise RunOutcome(waiting.EXIT_WAIT_TIMEOUT) from None
    if cmd.output.format == "table":
        _print(source.lines(done))
    reason = f": {done.reason}" if done.reason else ""
    cmd.emit(to_dict(done), lambda: f"{done.id} {done.state}{reason}")
    _exit_for(done.state)


def report_dag_run(cmd: Invocation, run: dpb.DagRun, render: Any) -> None:
    """`dag run`: the run started; with --wait, the run once it ended, and its outcome."""
    if not cmd.args.wait:
        cmd.emit(to_dict(run), lambda: f"started {run.run_id}\n" + render(run, cmd.clock))
        return
    print(f"{PROG}: started {run.run_id}; waiting for it to end", file=sys.stderr)
    try:
        done = waiting.wait_until(lambda: cmd.client.get_dag_run(run.dag, run.run_id), waiting.dag_run_ended,
                                  cmd.args.wait_timeout, f"DAG run {run.run_id}")
    except waiting.WaitTimeout as e:
        print(f"{PROG}: {e.message} (it goes on: {PROG} dag show {run.dag} --run {run.run_id})", file=sys.stderr)
        raise RunOutcome(waiting.EXIT_WAIT_TIMEOUT) from None
    cmd.emit(to_dict(done), lambda: render(done, cmd.clock))
    _exit_for(done.state)


def _print(lines: Any) -> None:
    for line in lines:
        print(printable(line))


def _exit_for(state: str) -> None:
    code = waiting.EXIT_STATUS.get(state, waiting.EXIT_FAILED)
    if code:
        raise RunOutcome(code)


def job_trigger(cmd: Invocation) -> None:
    run = cmd.client.trigger_job(cmd.args.name, force=cmd.args.force, params=params_of(cmd.args))
    report_run(cmd, run, f"triggered job {run.job}")


def run_retry(cmd: Invocation) -> None:
    run = cmd.client.retry_execution(cmd.args.id)
    report_run(cmd, run, f"retried {run.id} (attempt {len(run.attempts) + 1})")


def dag_clear(cmd: Invocation) -> None:
    dag, sep, when = cmd.args.run_ref.partition("@")
    if not sep or not dag:
        raise UsageError(f"expected a DAG run id <dag>@<time> (or <dag>@latest), got {cmd.args.run_ref!r}")
    run = cmd.client.clear_dag_task(dag, "" if when == "latest" else when, cmd.args.task,
                                    downstream=cmd.args.downstream)
    cleared = [t.task for t in run.tasks if t.state in ("PENDING", "SCHEDULED")]
    cmd.emit(to_dict(run), lambda: f"cleared {cmd.args.task}{' and downstream' if cmd.args.downstream else ''} "
                                   f"in {run.run_id}: {', '.join(cleared) or 'nothing'} to run again "
                                   f"(run {run.state})")


def add_run_commands(runs: Any, command: Any) -> None:
    """`run retry` beside the other run commands (schedctl's parser helpers)."""
    retry = command(runs, "retry", run_retry,
                    "start a new attempt of a finished run (same id, a new fencing token)", timeout=False)
    retry.add_argument("id", metavar="RUN", help="an execution id, or JOB@latest")
    add_flow_flags(retry, params=False)


def add_dag_commands(dags: Any, command: Any) -> None:
    """`dag clear` beside the other dag commands."""
    clear = command(dags, "clear", dag_clear,
                    "run a finished task of a DAG run again (and, with --downstream, what depends on it)")
    clear.add_argument("run_ref", metavar="RUN", help="the run id, <dag>@<time> or <dag>@latest")
    clear.add_argument("--task", required=True, metavar="TASK")
    clear.add_argument("--downstream", action="store_true",
                       help="also every task that depends on TASK, transitively (like Airflow's clear)")
