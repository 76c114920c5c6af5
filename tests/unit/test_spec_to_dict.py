"""convert.spec_to_dict is MessageToDict(preserving_proto_field_name=True), only faster: the
registration path validates every spec of a batch with it, so it must give the same dict."""

from __future__ import annotations

import pytest
from google.protobuf.json_format import MessageToDict, ParseDict

from schedd.api.convert import spec_to_dict
from schedd_proto import scheduler_pb2 as pb

FULL = {
    "name": "a", "team": "t", "schedule": "@daily", "timezone": "UTC",
    "handler": {"shell": {"command": "x", "argv": ["a", "b"], "workdir": "/w", "env": {"A": "1"},
                          "inherit_env": ["X"]}},
    "description": "d", "labels": {"k": "v"},
    "retry": {"max_attempts": 3, "initial_backoff_seconds": 1.5, "max_backoff_seconds": 2, "multiplier": 2},
    "timeout_seconds": 3.25, "overlap": "skip", "catchup": "none", "priority": -4, "pool": "p", "paused": True,
    "history_limit": 5, "delivery": "at_most_once", "worker_labels": {"gpu": "1"}, "max_active": 2,
    "queue_limit": 3, "concurrency_key": "c", "concurrency_limit": 2, "catchup_window_seconds": 7,
    "catchup_max": 9, "catchup_order": "oldest", "starting_deadline_seconds": 1e-3, "jitter_seconds": 9.5,
    "dst_gap": "skip", "dst_fold": "both",
    "sla": {"within_seconds": 3, "by": "10:00", "timezone": "UTC", "webhook": "http://x"},
    "history_max_age_seconds": 9e9, "env_secret": {"S": "v"},
    "limits": {"memory_mb": "123456789012", "cpu_seconds": 1.5, "open_files": 9, "processes": 2},
}


@pytest.mark.parametrize("spec", [
    ParseDict(FULL, pb.JobSpec()),
    pb.JobSpec(name="h", handler=pb.Handler(http=pb.HttpHandler(url="http://x", method="GET", headers={"a": "b"},
                                                                body="x", insecure_skip_verify=True))),
    pb.JobSpec(name="p", handler=pb.Handler(python=pb.PythonHandler(name="m:f", args_json="[1]"))),
    pb.JobSpec(name="n", timeout_seconds=float("nan"), jitter_seconds=float("inf"),
               catchup_window_seconds=-float("inf")),
    pb.JobSpec(),
], ids=["every_field", "http", "python", "non_finite", "empty"])
def test_spec_to_dict_is_message_to_dict(spec):
    assert spec_to_dict(spec) == MessageToDict(spec, preserving_proto_field_name=True)
