"""PutJob says which version THIS write made, even when another write lands between its apply and
the reply (the reply's job is read after the write and may show the later one). A client that
compares versions, as the fault suite's linearizability checker does, must not credit its value
to another writer's version."""

from __future__ import annotations

from schedd.core import commands as C
from schedd_client import Client, job_spec
from tests.security._api_harness import ApiServer, InMemoryNode


class RacingNode(InMemoryNode):
    """Right after the first update of "j" is applied, another writer's update is applied too."""

    raced = False

    def _apply_next(self, entry: str) -> dict:
        result = super()._apply_next(entry)
        cmd = C.decode(entry)
        if cmd.kind == C.PUT and not self.raced and cmd.args.get("expected_version"):
            self.raced = True
            other = C.encode(C.PUT, rid="other", now=cmd.now, term=1, spec=_spec_text("echo other"))
            super()._apply_next(other)
        return result


def _spec_text(command: str) -> str:
    from schedd.core.model import canonical_spec
    return canonical_spec({"name": "j", "handler": {"shell": {"command": command}}})[1]


def test_put_reply_names_the_version_this_write_made() -> None:
    node = RacingNode()
    server = ApiServer(node)
    try:
        with Client(server.address, timeout=10) as client:
            first = client.put_job_result(job_spec("j", command="echo first"))
            assert (first.version, first.job.version) == (1, 1)
            mine = client.put_job_result(job_spec("j", command="echo mine"), expected_version=1)
            assert mine.version == 2                              # what this write made
            assert mine.job.version == 3 and mine.job.spec.handler.shell.command == "echo other"
    finally:
        server.stop()
