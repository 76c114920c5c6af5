"""What schedctl writes cannot attack the terminal that reads it, JSON
and YAML stay exact, and a closed pipe or an ASCII-only terminal ends the command quietly."""

from __future__ import annotations

import json
import os
import unicodedata

import pytest
import yaml

from schedd_proto import scheduler_pb2 as pb
from tests.security._cli import fake, run_in_process, run_process  # noqa: F401
from tests.support.fake_api import NOW_MS, FakeCluster, add_execution

# an OSC title change with BEL, a color, a cursor move, C1 CSI, DEL, CR overwrite, bidi overrides
HOSTILE = "safe\x1b]0;pwned\x07 \x1b[31mred\x1b[0m \x1b[2J\x9b6n\x7f\rfake\u202egnp.exe\u2066x\u2069\x00end"
RUN_ID = "evil@2026-11-29T02:00:00Z"


def _dangerous(text: str) -> list[str]:
    """The characters of ``text`` a terminal could act on: C0 but newline and tab, DEL, C1, bidi."""
    bidi = {"\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
            "\u200e", "\u200f", "\u061c"}
    return [c for c in text if (unicodedata.category(c) == "Cc" and c not in "\n\t") or c in bidi]


def _seed(fake: FakeCluster) -> None:
    fake.add_job("evil", description=HOSTILE, labels={"note": HOSTILE}, command=f"echo {HOSTILE}")
    attempt = pb.Attempt(number=1, worker="w1", fencing_token=7, started_ms=NOW_MS, ended_ms=NOW_MS + 1000,
                         exit_code=1, error=HOSTILE, output_tail=f"line 1\n{HOSTILE}\nline 3\n", state="FAILED")
    add_execution(fake.state, "evil", NOW_MS, "FAILED", attempts=[attempt])


@pytest.mark.parametrize("argv", [["job", "get", "evil"], ["run", "get", RUN_ID], ["job", "list"], ["run", "list"]])
def test_control_characters_are_escaped_in_tables(fake: FakeCluster, capsys, argv) -> None:
    _seed(fake)
    code, out, err = run_in_process(capsys, fake.cluster, *argv)
    assert (code, err) == (0, "")
    assert _dangerous(out) == []
    if argv[0:2] in (["job", "get"], ["run", "get"]):
        assert "safe\\x1b]0;pwned\\x07" in out and "\\u202egnp.exe" in out and "\\x00end" in out
    if argv[0:2] == ["run", "get"]:
        assert "  line 1\n" in out and "  line 3\n" in out        # newlines in output still break lines


def test_control_characters_are_escaped_in_error_lines(fake: FakeCluster, capsys) -> None:
    fake.nodes[0].fail("GetJob", __import__("grpc").StatusCode.INVALID_ARGUMENT, HOSTILE)
    code, _, err = run_in_process(capsys, fake.cluster, "job", "get", "evil")
    assert code == 1 and _dangerous(err) == [] and "\\x1b]0;pwned" in err


def test_json_output_stays_exact(fake: FakeCluster, capsys) -> None:
    _seed(fake)
    code, out, _ = run_in_process(capsys, fake.cluster, "job", "get", "evil", "-o", "json")
    job = json.loads(out)
    assert code == 0 and job["spec"]["description"] == HOSTILE and job["spec"]["labels"] == {"note": HOSTILE}
    code, out, _ = run_in_process(capsys, fake.cluster, "run", "get", RUN_ID, "-o", "yaml")
    run = yaml.safe_load(out)
    assert code == 0 and run["attempts"][0]["error"] == HOSTILE
    assert run["attempts"][0]["output_tail"] == f"line 1\n{HOSTILE}\nline 3\n"
    code, out, _ = run_in_process(capsys, fake.cluster, "run", "list", "-o", "json")
    assert json.loads(out)[0]["attempts"][0]["error"] == HOSTILE


@pytest.mark.parametrize("rows", [3, 3000], ids=["fits-the-pipe-buffer", "larger-than-the-pipe-buffer"])
def test_broken_pipe_exits_quietly(fake: FakeCluster, rows) -> None:
    """``schedctl run list | head``: the reader is gone before schedctl writes (a closed pipe makes
    this deterministic); it ends quietly with 141 (128 + SIGPIPE), as a shell tool killed by the
    signal would, whether the write fails mid-output or at the flush on exit."""
    for i in range(rows):
        add_execution(fake.state, "demo", NOW_MS - i * 60_000, "SUCCEEDED")
    read, write = os.pipe()
    os.close(read)
    try:
        p = run_process(fake.cluster, "run", "list", "demo", "--limit", "0", stdout=write)
    finally:
        os.close(write)
    assert (p.returncode, p.stderr.decode()) == (141, "")


def test_ascii_only_terminal_does_not_crash(fake: FakeCluster) -> None:
    fake.add_job("cafe", description="Café ✓ 日本", labels={"owner": "José"})
    env = {"PYTHONIOENCODING": "ascii"}
    p = run_process(fake.cluster, "job", "get", "cafe", env=env)
    assert (p.returncode, p.stderr) == (0, b"")
    assert b"Caf\\xe9 \\u2713 \\u65e5\\u672c" in p.stdout and b"owner=Jos\\xe9" in p.stdout
    for output, load in (("json", json.loads), ("yaml", yaml.safe_load)):   # still exact, in ASCII
        p = run_process(fake.cluster, "job", "get", "cafe", "-o", output, env=env)
        assert (p.returncode, p.stderr) == (0, b"")
        p.stdout.decode("ascii")
        assert load(p.stdout)["spec"]["description"] == "Café ✓ 日本"
    p = run_process(fake.cluster, "job", "get", "nope", env={**env, "LC_ALL": "C"})
    assert p.returncode == 1 and p.stderr.startswith(b"schedctl: error: ") and b"Traceback" not in p.stderr
