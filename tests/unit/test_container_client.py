"""The container handler on the client side: the SDK's job_spec(container=...), the job
document's `container:` block (and back), DAG tasks, and schedctl's flags and `job get` line."""

from __future__ import annotations

import pytest

from schedd.api.convert import spec_to_dict as pb_dict
from schedd.core.model import validate_spec
from schedd_client import schedctl as S
from schedd_client._cli import UsageError
from schedd_client.job_commands import _describe_handler
from schedd_client.job_flags import _flag_doc, _merge
from schedd_client.dags import dag_from_dict
from schedd_client.errors import ValidationError
from schedd_client.specs import job_spec, spec_from_dict, spec_to_dict

IMAGE = "localhost/schedd-test-busybox:latest"


def test_sdk_mapping_and_document_agree_and_round_trip() -> None:
    box = {"image": IMAGE, "command": "echo hi", "memory": 64, "cpu": 0.5, "pids": 10, "read_only": False,
           "mounts": [{"source": "/data", "target": "/in"}], "env": {"N": 1}}
    spec = job_spec("c1", container=box)
    assert spec == spec_from_dict({"name": "c1", "container": box})
    assert spec_from_dict(spec_to_dict(spec)) == spec
    c = validate_spec(pb_dict(spec)).to_dict()["handler"]["container"]
    assert c["memory"] == "64Mi" and c["read_only"] is False and c["env"] == {"N": "1"}
    assert c["mounts"] == [{"source": "/data", "target": "/in", "read_only": True}]


@pytest.mark.parametrize(("doc", "message"), [
    ({"container": {"command": "x"}}, "missing required key 'image'"),
    ({"container": {"image": IMAGE, "mode": "x"}}, "mode"),
    ({"container": {"image": IMAGE}, "command": "x"}, "more than one handler"),
    ({"container": {"image": IMAGE, "mounts": "/a:/b"}}, "must be a list"),
    ({"container": {"image": IMAGE, "memory": [1]}}, "memory"),
])
def test_bad_container_documents_name_the_key(doc: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec_from_dict({"name": "c1", **doc})


def test_a_dag_task_may_be_a_container() -> None:
    dag = dag_from_dict({"name": "d", "tasks": [{"name": "t", "container": {"image": IMAGE, "args": ["true"]}}]})
    assert dag.tasks[0].handler.container.args == ["true"]


def test_schedctl_flags_build_the_container_block() -> None:
    args = S.build_parser().parse_args([
        "job", "create", "c1", "--schedule", "", "--image", IMAGE, "--command", "echo hi", "--memory", "1Gi",
        "--cpus", "0.5", "--pids", "10", "--mount", "/data:/in", "--mount", "/o:/out:rw", "--env", "A=1",
        "--read-write", "--network", "host", "--pull", "if-missing"])
    doc = _flag_doc(args)
    assert doc["container"] == {
        "image": IMAGE, "command": "echo hi", "env": {"A": "1"}, "network": "host", "cpu": 0.5, "memory": "1Gi",
        "pids": 10, "pull": "if-missing", "read_only": False,
        "mounts": [{"source": "/data", "target": "/in", "read_only": True},
                   {"source": "/o", "target": "/out", "read_only": False}]}
    line = _describe_handler(spec_from_dict({"name": "c1", **doc}))
    assert line.startswith(f'container {IMAGE} sh -c "echo hi"; network host, writable root, cpus 0.5')
    assert "mount /o:/out:rw" in line
    args = S.build_parser().parse_args(["job", "create", "c2", "--schedule", "", "--image", IMAGE,
                                        "--container-arg", "echo", "--container-arg", "x y"])
    assert _flag_doc(args)["container"] == {"image": IMAGE, "args": ["echo", "x y"]}


def test_schedctl_update_merges_into_the_container_block() -> None:
    args = S.build_parser().parse_args(["job", "update", "c1", "--memory", "128"])
    merged = _merge({"name": "c1", "container": {"image": IMAGE, "memory": "64Mi"}}, _flag_doc(args))
    assert merged["container"] == {"image": IMAGE, "memory": "128"}
    with pytest.raises(UsageError, match="SRC:DST"):
        _flag_doc(S.build_parser().parse_args(["job", "create", "c", "--image", IMAGE, "--mount", "/a"]))
