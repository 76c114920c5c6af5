"""`schedd local`'s temporary folder holds the CA key, the cluster secret and
both tokens, and it is removed on every way out. Before, `schedd local | head -3` died of
BrokenPipeError in its cleanup and left the folder behind, and so did a Ctrl-C with the output
piped through a filter (the terminal's SIGINT kills the filter too). Each case runs the real
`schedd local` with TMPDIR pointed at a directory of the test, and checks that the folder it
printed is gone, that nothing of it is left in TMPDIR and that it exited quietly."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schedd.ports.fakes import wait_until

pytestmark = pytest.mark.integration

UP = "Ctrl-C stops everything"
LOCAL = [sys.executable, "-m", "schedd", "local", "--base-port", "0"]     # free ports


def _env(tmp: Path) -> dict[str, str]:
    (tmp / "tmp").mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_") or k == "SCHEDD_PORT_BAND"}
    return {**env, "TMPDIR": str(tmp / "tmp")}


def _lines(stream, n: int, timeout: float) -> list[str]:
    """The first `n` lines of a pipe, waiting at most `timeout` seconds in all."""
    got: list[str] = []
    deadline = time.monotonic() + timeout
    buf = b""
    fd = stream.fileno()
    while len(got) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"only {got!r} within {timeout}s"
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1)          # one byte at a time: read no further than line n
        assert chunk, f"EOF after {got!r}"
        buf += chunk
        if chunk == b"\n":
            got.append(buf.decode())
            buf = b""
    return got


def _data_dir(line: str) -> Path:
    [path] = re.findall(r"data in (\S+)", line)
    return Path(path)


def _finish(proc: subprocess.Popen, timeout: float = 120) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        raise


def _assert_gone(tmp: Path, data: Path) -> None:
    assert data.is_relative_to(tmp / "tmp"), data
    assert not data.exists(), f"{data} was left behind: {sorted(p.name for p in data.iterdir())}"
    assert not list((tmp / "tmp").glob("schedd-local-*"))


def test_a_reader_that_stops_after_three_lines_stops_it_and_removes_the_folder(tmp_path: Path) -> None:
    """`schedd local | head -3`."""
    proc = subprocess.Popen(LOCAL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env(tmp_path), start_new_session=True)
    try:
        lines = _lines(proc.stdout, 3, timeout=120)
        data = _data_dir("".join(lines))
        assert (data / "tls" / "ca-key.pem").exists()
        proc.stdout.close()                                  # head exits
        code = _finish(proc)
        err = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert code == 0, err
    assert "BrokenPipeError" not in err and "Traceback" not in err, err
    _assert_gone(tmp_path, data)


@pytest.mark.parametrize("when", ["up", "starting"])
def test_ctrl_c_through_a_filter_removes_the_folder(tmp_path: Path, when: str) -> None:
    """`schedd local | cat > log`, then Ctrl-C: the terminal signals the whole foreground group,
    so the filter dies with schedd local and the pipe closes under its cleanup. `starting`: the
    Ctrl-C comes while it still waits for a leader."""
    log = tmp_path / "filtered.log"
    env = _env(tmp_path)
    proc = subprocess.Popen(LOCAL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, process_group=0)   # a job of a shell
    with open(log, "wb") as out:
        filt = subprocess.Popen(["cat"], stdin=proc.stdout, stdout=out, process_group=proc.pid)
    proc.stdout.close()                                      # the filter holds the read end
    try:
        wait_until(lambda: "data in " in log.read_text(), timeout=120, what="schedd local's first line")
        if when == "up":
            wait_until(lambda: UP in log.read_text(), timeout=120, what="schedd local up")
        data = _data_dir(log.read_text())
        os.killpg(proc.pid, signal.SIGINT)                   # Ctrl-C: schedd local and the filter
        code = _finish(proc)
        filt.wait(timeout=30)
        err = proc.stderr.read().decode()
    finally:
        for p in (proc, filt):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    assert code == 0, err
    assert "BrokenPipeError" not in err and "Traceback" not in err, err
    _assert_gone(tmp_path, data)
