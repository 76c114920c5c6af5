"""How DAG rows and runs are named in the job and run tables (docs/architecture.md "Facts": entities).

A DAG's tasks are ordinary job rows named `<dag>:<task>` (a colon never appears in a user's job
name); a scheduled DAG also has a row `<dag>:` holding its schedule. Kept apart from
schedd.core.dags so that the job-table code can tell a DAG's rows from a user's without
importing the DAG engine (which imports it).
"""

from __future__ import annotations

from schedd.core import schedule as sched
from schedd.core.results import ApplyResult, Code, reject


def run_id(dag: str, logical_ms: int) -> str:
    return f"{dag}@{sched.format_ms(logical_ms, 'UTC')}"


def task_job(dag: str, task: str) -> str:
    return f"{dag}:{task}"


def schedule_row(dag: str) -> str:
    return f"{dag}:"


def dag_of_job(name: str) -> str | None:
    """The DAG a job row belongs to (`etl:load` -> `etl`, `etl:` -> `etl`), else None."""
    dag, sep, _ = name.partition(":")
    return dag if sep else None


def refuse_job_op(name: str, kind: str = "") -> ApplyResult:
    """Job calls (put, delete, pause, resume, trigger) on a DAG's rows are refused: the DAG owns them."""
    dag = dag_of_job(name)
    return reject(Code.INVALID, f"job {name!r} is part of DAG {dag!r}; use `schedctl dag` (apply, run, "
                                "delete) to change or run it")
