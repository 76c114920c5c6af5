"""schedctl under bad input ends in one clear error line (exit 1, or 2 for a
bad command line), never a traceback, never a huge value in the message, and sends nothing."""

from __future__ import annotations

import pytest

from tests.security._cli import assert_one_line_error, fake, run_in_process, run_process  # noqa: F401
from tests.support.fake_api import FakeCluster

HUGE = "9" * 30                      # far past int32 and int64
DIGITS = "1" + "0" * 5000            # past Python's int-from-text limit (4300 digits)
CREATE = ["job", "create", "a", "--schedule", "@daily", "--command", "x"]


@pytest.mark.parametrize("argv", [
    [*CREATE, "--priority", HUGE],
    [*CREATE, "--priority", "-" + HUGE],
    [*CREATE, "--max-attempts", HUGE],
    [*CREATE, "--history-limit", HUGE],
    [*CREATE, "--queue-limit", DIGITS],
    ["quota", "set", "team:a", HUGE],
    ["run", "list", "a", "--limit", HUGE],
    ["dag", "runs", "etl", "--limit", HUGE],
    ["job", "get", "a", "--next", DIGITS],
    ["job", "backfill", "a", "--from", HUGE + "d", "--to", "now"],
    ["run", "list", "a", "--all-instants", "--since", HUGE + "d"],
], ids=lambda argv: " ".join(a[:12] for a in argv))
def test_integer_overflow_in_flags_is_one_line_error(fake: FakeCluster, capsys, argv) -> None:
    code, out, err = run_in_process(capsys, fake.cluster, *argv)
    assert code == 2 and out == ""
    assert_one_line_error(err)
    assert fake.state.calls == []


@pytest.mark.parametrize("text", [f"priority: {HUGE}", f"priority: {DIGITS}", f"retry: {{max_attempts: {HUGE}}}"])
def test_integer_overflow_in_a_file_is_one_line_error(fake: FakeCluster, capsys, tmp_path, text) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(f"name: a\ncommand: x\n{text}\n")
    code, out, err = run_in_process(capsys, fake.cluster, "job", "apply", "-f", str(path))
    assert code == 1 and out == ""
    assert_one_line_error(err, contains="jobs.yaml")
    assert fake.state.calls == []


@pytest.mark.parametrize("command", [["job", "apply"], ["job", "create"], ["dag", "apply"]])
def test_non_utf8_file_is_one_line_error(fake: FakeCluster, capsys, tmp_path, command) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_bytes(b"name: a\ncommand: \"caf\xe9 \xff\xfe\"\n")
    code, out, err = run_in_process(capsys, fake.cluster, *command, "-f", str(path))
    assert code == 1 and out == ""
    assert_one_line_error(err, contains="not UTF-8")
    assert fake.state.calls == []


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,                                   # flow style
    "{a: " * 50_000 + "1" + "}" * 50_000,
    "".join(" " * i + "- \n" for i in range(3_000)),                 # block style
], ids=["flow-list", "flow-map", "block-list"])
def test_deeply_nested_yaml_is_refused(fake: FakeCluster, capsys, tmp_path, text) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    for command in (["job", "apply"], ["dag", "apply"]):
        code, out, err = run_in_process(capsys, fake.cluster, *command, "-f", str(path))
        assert code == 1 and out == ""
        assert_one_line_error(err, contains="nested")
    assert fake.state.calls == []


def _laughs(levels: int = 12, fan_out: int = 9) -> str:
    """A billion-laughs job file: a few hundred bytes whose aliases expand to 9**12 strings; the
    value lands where the old loader put it into an error message with repr()."""
    lines = ["name: a", "env:", "  l0: &l0 [" + ", ".join(["lol"] * fan_out) + "]"]
    lines += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fan_out) + "]" for i in range(1, levels)]
    return "\n".join([*lines, f"command: *l{levels - 1}", ""])


def test_billion_laughs_yaml_is_refused_in_bounded_memory(fake: FakeCluster, tmp_path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(_laughs())
    assert path.stat().st_size < 1000
    for command in (["job", "apply"], ["job", "create"], ["dag", "apply"]):
        p = run_process(fake.cluster, *command, "-f", str(path), limit_memory=2 << 30)
        err = p.stderr.decode()
        assert p.returncode == 1 and p.stdout == b"", err[-2000:]
        assert_one_line_error(err, contains="alias")
    assert fake.state.calls == []


def test_file_larger_than_the_limit_is_refused(fake: FakeCluster, capsys, tmp_path, monkeypatch) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("name: a\ncommand: x\ndescription: " + "y" * 5000 + "\n")
    code, _, err = run_in_process(capsys, fake.cluster, "job", "apply", "-f", str(path), "--max-file-size", "4KiB")
    assert code == 1
    assert_one_line_error(err, contains="larger than 4096 bytes")
    monkeypatch.setenv("SCHEDCTL_MAX_FILE_BYTES", "1000")
    code, _, err = run_in_process(capsys, fake.cluster, "dag", "apply", "-f", str(path))
    assert code == 1
    assert_one_line_error(err, contains="larger than 1000 bytes")
    assert "SCHEDCTL_MAX_FILE_BYTES" in err
    assert fake.state.calls == []
    assert run_in_process(capsys, fake.cluster, "job", "apply", "-f", str(path), "--max-file-size", "8KiB")[0] == 0
