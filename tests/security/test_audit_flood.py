"""One team token could roll the audit trail over with writes that name objects
that do not exist (PauseJob of an unknown job): each was committed, refused by apply and audited,
outside the denied-record limit. Such a write is now answered NOT_FOUND before anything is
proposed, for every write RPC that names an existing object."""

from __future__ import annotations

import grpc
import pytest

from schedd.core import commands as C
from schedd_client import Client, SchedError, job_spec
from tests.security._api_harness import NOW_MS

MISSING_EXEC = "ghost@2026-09-21T00:00:00Z"


def test_writes_naming_missing_objects_answer_not_found_and_propose_nothing(api) -> None:
    server = api()
    with Client(server.address, timeout=30) as client:
        client.put_job(job_spec("real", schedule="@every 1h", command="true"))
        client.put_dag({"name": "real-dag", "tasks": [{"name": "t", "command": "true"}]})
        before = len(server.node.entries)
        writes = {
            "pause": lambda: client.pause_job("ghost"),
            "resume": lambda: client.resume_job("ghost"),
            "delete": lambda: client.delete_job("ghost"),
            "trigger": lambda: client.trigger_job("ghost"),
            "backfill": lambda: client.backfill_job("ghost", NOW_MS - 7_200_000, NOW_MS - 3_600_000),
            "cancel": lambda: client.cancel_execution(MISSING_EXEC),
            "cancel a missing run of a real job": lambda: client.cancel_execution("real@2026-09-21T00:00:00Z"),
            "delete dag": lambda: client.delete_dag("ghost-dag"),
            "run dag": lambda: client.run_dag("ghost-dag"),
        }
        for what, write in writes.items():
            with pytest.raises(SchedError) as e:
                write()
            assert e.value.code == grpc.StatusCode.NOT_FOUND, what
            assert "not found" in str(e.value), what
        assert server.node.entries[before:] == [], [C.decode(x).kind for x in server.node.entries[before:]]
        # The positive control: the same writes on objects that exist are proposed.
        client.pause_job("real")
        client.run_dag("real-dag")
        assert server.node.kinds()[before:] == [C.PAUSE, C.DAG_RUN]
