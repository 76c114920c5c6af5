"""Python SDK for schedd, the Raft-replicated job scheduler.

    from schedd_client import Client, RunState, job_spec

    with Client("10.0.0.1:7070,10.0.0.2:7070,10.0.0.3:7070") as client:
        client.put_job(job_spec("nightly-backup", schedule="0 2 * * *", tz="Europe/Paris",
                                command="/usr/local/bin/backup.sh"))
        job = client.get_job("nightly-backup", upcoming=3)
        for run in client.list_executions("nightly-backup", limit=10):
            print(run.id, RunState(run.state))     # RunState: a str-valued enum of the states

``Client()`` with no arguments reaches the cluster schedctl reaches (``$SCHEDD_CLUSTER``, else the
context file of ``$SCHEDD_CONTEXT``, with its certificates and token).
``AsyncClient`` has the same methods, awaited. Methods return the protobuf messages of
``schedd_proto`` (proto package ``schedd.v1``, typed by the generated ``.pyi``); ``to_dict`` turns one into plain data.
Any node will do: a node forwards writes, and reads unless ``stale_ok=True``, to the Raft leader.
On UNAVAILABLE or DEADLINE_EXCEEDED the client tries the next node until its ``timeout`` is spent;
a write keeps its request_id across those retries, so the server applies it at most once.

Errors (``code`` is the gRPC status code, ``message`` is for humans)::

    SchedError                 any failure; base class
    ├── ValidationError        INVALID_ARGUMENT: bad input (also a bad job document, locally)
    ├── NotFound               NOT_FOUND: no such job or execution
    ├── AlreadyExists          ALREADY_EXISTS: create_only and the job exists
    ├── Conflict               FAILED_PRECONDITION / ABORTED: expected_version did not match
    └── Unavailable            UNAVAILABLE / DEADLINE_EXCEEDED on every node until the timeout;
                               .tried lists the addresses; a write's outcome is then unknown
        └── TlsRequired        a plaintext client on a node that speaks only TLS (at once)
    └── WaitTimeout            DEADLINE_EXCEEDED: wait_for / wait=True gave up; the run goes on

An embedded worker with Python handlers is ``schedd_worker.Worker`` (the schedd-worker
distribution).

Job documents for YAML/JSON files (``spec_from_dict``) are described in ``schedd_client.specs``.
"""

from .client import AsyncClient, Client, parse_cluster
from .convert import format_duration, format_time, relative_time, to_dict
from .errors import (
    AlreadyExists,
    Conflict,
    NotFound,
    SchedError,
    TlsRequired,
    Unavailable,
    ValidationError,
)
from .specs import job_spec, parse_duration, spec_from_dict, spec_to_dict
from .dags import dag_from_dict, dag_to_dict
from .waiting import WaitTimeout
from .states import RunState

__all__ = [
    "Client",
    "AsyncClient",
    "RunState",
    "parse_cluster",
    "job_spec",
    "spec_from_dict",
    "spec_to_dict",
    "dag_from_dict",
    "dag_to_dict",
    "parse_duration",
    "to_dict",
    "format_time",
    "format_duration",
    "relative_time",
    "SchedError",
    "ValidationError",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Unavailable",
    "TlsRequired",
    "WaitTimeout",
]
