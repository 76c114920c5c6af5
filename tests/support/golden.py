"""Golden scenarios of the state machine: files of commands and their expected output.

A scenario (tests/unit/testdata/*.txt, run by tests/unit/test_golden.py) is a sequence of
directives in the style of etcd raft's datadriven testdata files::

    # comments and blank lines between directives are kept as they are
    put name=j1 schedule="@every 10s"
    ----
    ok created=true name=j1 version=1

A directive is one command line (shell-like words: quote a value with spaces), optional input
lines (a JSON document, for `dag_put`), a line `----`, then the expected output up to the next
blank line (so an output line is never blank). Every directive runs against one TestEnv
(tests.support.env): a real SchedulerState fed entries as the Raft log would, and the manual
clock the entries are stamped with. The actual output is compared with the expected output of
the whole file; a difference fails with a unified diff.

Rewriting: `SCHEDD_GOLDEN_REWRITE=1 python -m pytest -q -n0 tests/unit/test_golden.py` writes the
actual output into the files instead of comparing (then READ the diff, `git diff
tests/unit/testdata`, before committing it: a golden file is worth something only once a person
checked that its output is what the scenario claims). A directive that cannot run (an unknown
command, a bad argument) fails even when rewriting.

Values. `key=value`: a value that parses as JSON is that JSON (`3`, `true`, `[1,2]`,
`{"max_attempts":3}`), else it is the text. Outside `put` and `dag_put` (whose values are the
spec's), a text that is a whole RFC 3339 time (`2027-01-15T08:00:10Z`; without an offset, in the
display zone) is that instant in epoch ms, also inside JSON lists. An execution is named by its
id `<job>@<RFC 3339 time>` (`j1@2027-01-15T08:00:10Z`, `etl:load@...` for a DAG task). A duration
is `500ms`, `35s`, `1m30s`, `2h`, `1d`.

Output. A result prints as its code (`ok`, or `<code>: <msg>` for a refusal), then its payload
`key=value` sorted by key; a payload list of lists (`items`, `claims`, `results`) prints one
element a line (`  items: j1 2027-01-15T08:00:10Z created`), and each effect a line
(`  effect: Launch job=j1 scheduled_ms=...`). Integers that are epoch milliseconds between the
years 2000 and 2100 print as RFC 3339 times in the display zone (tokens and counts are far
smaller), texts with spaces or quotes print JSON-quoted.

Commands (`<kind>` is any entry kind of schedd.core.commands, `-` or `_` alike):

  cluster [level=N] [now=TIME] [tz=ZONE]  a new environment: feature level (default 1), start
                                        time (default 2027-01-15T08:00:00Z), display zone (UTC)
  now TIME / advance DURATION           set / move the clock; prints the time
  put key=value...                      a job spec (handler `shell: true` unless given) applied
                                        as a `put`: the result
  dag_put + JSON input lines            a DAG (tasks without a handler run `shell: true`)
  fire [EXEC...] [lookahead=DUR]        a `fire` of the given instants, or of what the planner
                                        (schedd.leader.planner.plan_fires) finds due by now +
                                        lookahead ("nothing due": nothing applied)
  plan [lookahead=DUR]                  what the planner would fire, applying nothing
  start EXEC [attempt=N] [worker=W]     a claim; attempt defaults to the next one, worker to w1
  finish EXEC state=S [token=N] ...     a worker's result; token defaults to the running attempt's
  <kind> [EXEC | NAME] [key=value...]   any other entry: EXEC gives job= and scheduled_ms=, NAME
                                        gives name=; `rid=` and `term=` set the entry's request id
                                        and term (default: the harness's term)
  leader term=N                         a new leader: the harness's term becomes N, its epoch entry
                                        applied
  exec EXEC                             an execution: state, trigger, reason, retry time and backoff
                                        (retry_at - the time it began waiting), attempts, events
  execs JOB                             a job's executions, oldest first
  job JOB                               a job's row: next fire, last fire, fired total, DST policy,
                                        its ledger of gaps
  instants JOB [after=TIME] [n=N]       the schedule's next N instants (default 5) after TIME
                                        (default now), each with how DST shaped it
  run DAG[@TIME]                        a DAG run (the newest without @TIME) and its tasks
  digest                                the state digest (schedd.core.digest)
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedd.core import commands as C
from schedd.core import dags as D
from schedd.core import schedule as sched
from schedd.core.model import ValidationError, parse_execution_id, validate_spec
from schedd.core.results import ApplyResult
from schedd.core.tables import schedule_of
from schedd.leader.planner import plan_fires
from tests.support.env import TestEnv
from tests.support.state import SHELL, T0

REWRITE_ENV = "SCHEDD_GOLDEN_REWRITE"
SEPARATOR = "----"
TIME_LO, TIME_HI = 946_684_800_000, 4_102_444_800_000     # 2000-01-01 .. 2100-01-01 (ms)
PLAN_LIMIT = 500
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})?")
_BARE = re.compile(r"[A-Za-z0-9_.:@/+*-]+")
_KEY = re.compile(r"[a-z_][a-z0-9_.]*")


class GoldenError(Exception):
    """A directive that cannot run: a mistake in the scenario file, never a result."""


# ------------------------------------------------------------------ the file


@dataclass
class Directive:
    line: int                     # 1-based line of its command
    command: str
    input: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)


Part = str | Directive            # a kept line (comment or blank), or a directive


def parse(text: str) -> list[Part]:
    """The file as kept lines and directives (see the module docstring for the layout)."""
    lines = text.splitlines()
    parts: list[Part] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            parts.append(line)
            i += 1
            continue
        d = Directive(line=i + 1, command=line)
        i += 1
        while i < len(lines) and lines[i] != SEPARATOR:
            d.input.append(lines[i])
            i += 1
        if i == len(lines):
            raise GoldenError(f"line {d.line}: {d.command!r} has no {SEPARATOR} line")
        i += 1
        while i < len(lines) and lines[i].strip():
            d.expected.append(lines[i])
            i += 1
        i += 1                    # the blank line that ends the output (or the end of the file)
        parts.append(d)
    return parts


def render(parts: Iterable[Part], outputs: Mapping[int, list[str]] | None = None) -> str:
    """The file text again; with `outputs` (directive line -> output lines), those outputs."""
    out: list[str] = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
            continue
        out += [p.command, *p.input, SEPARATOR]
        out += outputs[p.line] if outputs is not None else p.expected
        out.append("")
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + "\n"


def run_file(path: Path, rewrite: bool | None = None) -> None:
    """Run scenario `path`: compare its outputs (AssertionError with a unified diff) or, with
    `rewrite` (default: the SCHEDD_GOLDEN_REWRITE environment variable), write them into it."""
    if rewrite is None:
        rewrite = os.environ.get(REWRITE_ENV, "") not in ("", "0")
    expected = path.read_text()
    parts = parse(expected)
    scenario = Scenario()
    outputs: dict[int, list[str]] = {}
    for p in parts:
        if isinstance(p, Directive):
            try:
                outputs[p.line] = scenario.run(p)
            except GoldenError as e:
                raise GoldenError(f"{path}:{p.line}: {e}") from None
    actual = render(parts, outputs)
    if rewrite:
        if actual != expected:
            path.write_text(actual)
        return
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                            fromfile=f"{path.name} (expected)", tofile=f"{path.name} (actual)"))
        raise AssertionError(f"golden scenario {path.name} differs (- expected, + actual); if the change "
                             f"is intended, rerun with {REWRITE_ENV}=1 and read the diff before committing:\n"
                             f"{diff}")


# ------------------------------------------------------------------ values in and out


def duration_ms(text: str) -> int:
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise GoldenError(f"bad duration {text!r}: use e.g. 500ms, 35s, 1m30s, 2h, 1d")
    return sum(int(n) * _UNIT_MS[u] for n, u in parts)


class Scenario:
    """The environment of one scenario file and its commands."""

    def __init__(self) -> None:
        self.env = TestEnv()
        self.tz = "UTC"
        self.started = False

    # ------------------------------------------------------------ values

    def time(self, text: str) -> int:
        try:
            return sched.parse_time(text, self.tz)
        except sched.ScheduleError as e:
            raise GoldenError(str(e)) from None

    def value(self, text: str, *, times: bool = True) -> Any:
        try:
            v = json.loads(text)
        except ValueError:
            v = text
        return self._times(v) if times else v

    def _times(self, v: Any) -> Any:
        if isinstance(v, str) and _TIME.fullmatch(v):
            return self.time(v)
        if isinstance(v, list):
            return [self._times(x) for x in v]
        if isinstance(v, dict):
            return {k: self._times(x) for k, x in v.items()}
        return v

    def fmt(self, v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if v is None:
            return "null"
        if isinstance(v, int):
            return sched.format_ms(v, self.tz) if TIME_LO <= v < TIME_HI else str(v)
        if isinstance(v, float):
            return f"{v:g}"
        if isinstance(v, str):
            return v if _BARE.fullmatch(v) else json.dumps(v, ensure_ascii=False)
        if isinstance(v, Mapping):
            return "{" + ",".join(f"{k}={self.fmt(x)}" for k, x in sorted(v.items())) + "}"
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return type(v).__name__ + " " + " ".join(
                f"{f.name}={self.fmt(getattr(v, f.name))}" for f in dataclasses.fields(v))
        if isinstance(v, (list, tuple)):
            return "[" + ",".join(self.fmt(x) for x in v) + "]"
        return repr(v)

    def words(self, directive: Directive) -> tuple[str, list[str], dict[str, str]]:
        """The command, its positional words and its key=value words (values still text)."""
        try:
            tokens = shlex.split(directive.command)
        except ValueError as e:
            raise GoldenError(f"cannot split {directive.command!r}: {e}") from None
        cmd, pos, kw = tokens[0].replace("-", "_"), [], {}
        for t in tokens[1:]:
            key, eq, val = t.partition("=")
            if eq and _KEY.fullmatch(key):
                kw[key] = val
            else:
                pos.append(t)
        return cmd, pos, kw

    def exec_key(self, text: str) -> tuple[str, int]:
        try:
            return parse_execution_id(text)
        except ValidationError as e:
            raise GoldenError(str(e)) from None

    # ------------------------------------------------------------ results

    def result(self, r: ApplyResult) -> list[str]:
        d = r.as_dict()
        head = "ok" if r.ok else f"{d['code']}: {d['msg']}"
        inline, listed = [], []
        for key in sorted(k for k in d if k not in ("ok", "code", "msg")):
            v = d[key]
            if isinstance(v, (list, tuple)) and v and all(isinstance(x, (list, tuple, Mapping)) for x in v):
                for x in v:
                    text = " ".join(self.fmt(y) for y in x) if isinstance(x, (list, tuple)) else self.fmt(x)
                    listed.append(f"  {key}: {text}")
            else:
                inline.append(f"{key}={self.fmt(v)}")
        lines = [" ".join([head, *inline]), *listed]
        lines += [f"  effect: {self.fmt(e)}" for e in r.effects]
        return lines

    # ------------------------------------------------------------ directives

    def run(self, d: Directive) -> list[str]:
        cmd, pos, kw = self.words(d)
        if cmd == "cluster":
            if self.started:
                raise GoldenError("cluster must be the first directive")
            self.started = True
            return self.cluster(pos, kw)
        self.started = True
        handler = getattr(self, f"do_{cmd}", None)
        if handler is not None:
            lines: list[str] = handler(d, pos, kw)
        elif cmd in C.KINDS:
            lines = self.entry(cmd, pos, kw, d)
        else:
            raise GoldenError(f"unknown command {cmd!r}")
        if any(not line.strip() for line in lines):
            raise GoldenError(f"{cmd!r} printed a blank line")
        return lines or ["(no output)"]

    def cluster(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        self.tz = sched.validate_tz(kw.pop("tz", "UTC"))
        now = self.time(kw.pop("now")) if "now" in kw else T0
        level = int(kw.pop("level", "1"))
        if pos or kw:
            raise GoldenError(f"cluster takes level=, now= and tz=, not {pos or kw}")
        self.env = TestEnv(now=now, level=level)
        return [f"level={self.env.state.feature_level} now={self.fmt(self.env.now)} tz={self.tz}"]

    def do_now(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        if len(pos) != 1 or kw:
            raise GoldenError("now takes one time")
        self.env.now = self.time(pos[0])
        return [f"now {self.fmt(self.env.now)}"]

    def do_advance(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        if len(pos) != 1 or kw:
            raise GoldenError("advance takes one duration")
        self.env.advance(duration_ms(pos[0]))
        return [f"now {self.fmt(self.env.now)}"]

    def _meta(self, kw: dict[str, Any]) -> dict[str, Any]:
        meta: dict[str, Any] = {"rid": str(kw.pop("rid", ""))}
        if "term" in kw:
            meta["term"] = int(kw.pop("term"))
        return meta

    def apply(self, kind: str, meta: dict[str, Any], args: dict[str, Any]) -> list[str]:
        r = self.env.h.apply(kind, **meta, **args)
        assert isinstance(r, ApplyResult)
        return self.result(r)

    def entry(self, kind: str, pos: list[str], kw: dict[str, str], d: Directive) -> list[str]:
        args: dict[str, Any] = {k: self.value(v) for k, v in kw.items()}
        meta = self._meta(args)
        for p in pos:
            if "@" in p:
                args["job"], args["scheduled_ms"] = self.exec_key(p)
            else:
                args["name"] = p
        if d.input:
            body = self.value("\n".join(d.input))
            if not isinstance(body, dict):
                raise GoldenError("the input of an entry is a JSON object of its arguments")
            args.update(body)
        return self.apply(kind, meta, args)

    def do_put(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        spec: dict[str, Any] = {k: self.value(v, times=False) for k, v in kw.items()}
        meta = self._meta(spec)
        if pos:
            raise GoldenError("put takes key=value spec fields only")
        spec.setdefault("handler", SHELL)
        try:
            text = validate_spec(spec).text()
        except ValidationError as e:
            return [f"invalid spec (not proposed): {e}"]
        return self.apply(C.PUT, meta, {"spec": text})

    def do_dag_put(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        if pos or kw or not d.input:
            raise GoldenError("dag_put takes the DAG as JSON input lines")
        try:
            doc = json.loads("\n".join(d.input))
        except ValueError as e:
            raise GoldenError(f"bad DAG JSON: {e}") from None
        for t in doc.get("tasks") or []:
            if isinstance(t, dict) and "handler" not in t and "sensor" not in t:
                t["handler"] = SHELL
        try:
            text = D.canonical_dag(doc)[1]
        except ValidationError as e:
            return [f"invalid DAG (not proposed): {e}"]
        return self.apply(C.DAG_PUT, {"rid": ""}, {"spec": text})

    def _plan(self, kw: dict[str, str]) -> list[tuple[str, int]]:
        lookahead = duration_ms(kw.pop("lookahead")) if "lookahead" in kw else 0
        return plan_fires(self.env.state, self.env.now, lookahead, limit=PLAN_LIMIT)

    def do_plan(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        items = self._plan(kw)
        if pos or kw:
            raise GoldenError("plan takes lookahead= only")
        return [f"{name} {self.fmt(t)}" for name, t in items] or ["nothing due"]

    def do_fire(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        meta = self._meta(kw)
        items = [self.exec_key(p) for p in pos] if pos else self._plan(kw)
        if kw:
            raise GoldenError(f"fire takes instants, lookahead=, rid= and term=, not {kw}")
        if not items:
            return ["nothing due"]
        return self.apply(C.FIRE, meta, {"items": [list(i) for i in items]})

    def do_leader(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        if pos or set(kw) != {"term"}:
            raise GoldenError("leader takes term=")
        self.env.h.term = int(kw["term"])
        self.env.node.term = self.env.h.term
        return self.apply(C.EPOCH, {"rid": ""}, {})

    def _one_exec(self, pos: list[str]) -> Any:
        if len(pos) != 1:
            raise GoldenError("name one execution: <job>@<time>")
        key = self.exec_key(pos[0])
        ex = self.env.state.execs.get(key)
        if ex is None:
            raise GoldenError(f"no execution {pos[0]}")
        return ex

    def do_start(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        ex = self._one_exec(pos)
        args: dict[str, Any] = {k: self.value(v) for k, v in kw.items()}
        meta = self._meta(args)
        args = {"job": ex.job, "scheduled_ms": ex.scheduled_ms, "attempt": len(ex.attempts) + 1,
                "worker": "w1", **args}
        return self.apply(C.START, meta, args)

    def do_finish(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        ex = self._one_exec(pos)
        args: dict[str, Any] = {k: self.value(v) for k, v in kw.items()}
        meta = self._meta(args)
        token = ex.attempts[-1].fencing_token if ex.attempts else 0
        args = {"job": ex.job, "scheduled_ms": ex.scheduled_ms, "token": token, **args}
        return self.apply(C.FINISH, meta, args)

    # ------------------------------------------------------------ queries

    def do_exec(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        ex = self._one_exec(pos)
        head = [ex.id, ex.state, f"trigger={ex.trigger}", f"attempts={len(ex.attempts)}"]
        for name, default in (("due_ms", 0), ("retry_at", None), ("lane", ""), ("cancel_requested", False),
                              ("reason", "")):
            v = getattr(ex, name)
            if v != default:
                head.append(f"{name}={self.fmt(v)}")
            if name == "retry_at" and v is not None:     # the wait since it entered RETRY_WAIT
                head.append(f"backoff={(v - ex.updated_ms) / 1000:g}s")
        lines = [" ".join(head)]
        for a in ex.attempts:
            words = [f"  attempt {a.number}", f"token={a.fencing_token}", f"worker={self.fmt(a.worker)}", a.state,
                     f"started={self.fmt(a.started_ms)}"]
            if a.ended_ms:
                words.append(f"ended={self.fmt(a.ended_ms)}")
            for name in ("exit_code", "error", "rejected"):
                v = getattr(a, name)
                if v:
                    words.append(f"{name}={self.fmt(v)}")
            lines.append(" ".join(words))
        lines += [f"  event {self.fmt(e.time_ms)} {e.kind}: {e.message}" for e in ex.events]
        return lines

    def do_execs(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        if len(pos) != 1 or kw:
            raise GoldenError("execs takes one job name")
        st = self.env.state
        return [f"{st.execs[(pos[0], t)].id} {st.execs[(pos[0], t)].state} trigger={st.execs[(pos[0], t)].trigger}"
                for t in st.by_job.get(pos[0], [])] or [f"no executions of {pos[0]}"]

    def do_job(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        if len(pos) != 1 or kw:
            raise GoldenError("job takes one job name")
        job = self.env.state.jobs.get(pos[0])
        if job is None:
            return [f"no job {pos[0]}"]
        head = [job.name, f"version={job.version}", f"next_fire={self.fmt(job.next_fire)}",
                f"last_fire={self.fmt(job.last_fire)}", f"fired_total={job.fired_total}"]
        if job.paused:
            head.append("paused=true")
        if job.dst:
            head.append(f"dst={job.dst}")
        lines = [" ".join(head)]
        for start, end, disposition, detail in job.gaps:
            lines.append(f"  gap [{self.fmt(start)}, {self.fmt(end)}) {disposition}: {detail}")
        return lines

    def do_instants(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        if len(pos) != 1:
            raise GoldenError("instants takes one job name")
        job = self.env.state.jobs.get(pos[0])
        if job is None:
            raise GoldenError(f"no job {pos[0]}")
        after = self.time(kw.pop("after")) if "after" in kw else self.env.now
        n = int(kw.pop("n", "5"))
        if kw:
            raise GoldenError(f"instants takes after= and n=, not {kw}")
        s = schedule_of(job)
        lines = []
        for t in sched.next_n(s, after, n):
            note = sched.dst_note(s, t)
            lines.append(f"{self.fmt(t)}" + (f" {note}" if note else ""))
        return lines or ["no instants"]

    def do_run(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        if len(pos) != 1 or kw:
            raise GoldenError("run takes one DAG run: <dag> or <dag>@<time>")
        name, _, when = pos[0].partition("@")
        run = D.find_run(self.env.state, name, when)
        if run is None:
            return [f"no run of {pos[0]}"]
        head = [run.run_id, run.state, f"trigger={run.trigger}"]
        if run.ended_ms:
            head.append(f"ended={self.fmt(run.ended_ms)}")
        lines = [" ".join(head)]
        for task in run.order:
            v = D.task_view(self.env.state, run, task)
            words = [f"  {task}", v["state"], f"attempts={v['attempts']}"]
            if v["state"] == D.PENDING:
                words.append(f"pending_upstream={v['pending_upstream']}")
            if v["trigger_rule"] != "all_success":
                words.append(f"rule={v['trigger_rule']}")
            if v["reason"]:
                words.append(f"reason={self.fmt(v['reason'])}")
            lines.append(" ".join(words))
        return lines

    def do_digest(self, d: Directive, pos: list[str], kw: dict[str, str]) -> list[str]:
        if pos or kw:
            raise GoldenError("digest takes nothing")
        return [self.env.digest()]

