"""schedd_worker.executors: one attempt of a shell, HTTP or Python handler, run to its end.

No fixed sleeps for synchronisation: the tests wait on conditions (files, events, process state)
with deadlines. Only 127.0.0.1 is used (a local http.server in a thread).
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import json
import os
import re
import socket
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from schedd_worker.executors import (
    CANCELLED,
    FAILED,
    OUTPUT_TAIL_BYTES,
    SUCCEEDED,
    TIMED_OUT,
    Assignment,
    HandlerContext,
    Outcome,
    PythonHandlers,
    HttpOptions,
    contract_env,
    format_rfc3339,
)
from schedd_worker.executors import execute as _execute
from schedd_client.net.policy import make_policy

# These tests' HTTP handlers talk to their own 127.0.0.1 server, which the default outbound
# policy refuses: they opt in to loopback (tests/security/test_outbound.py tests the refusal).
LOOPBACK_OK = HttpOptions(policy=make_policy(allow=["127.0.0.1"]))


def execute(a, **kw):
    return _execute(a, **{"http": LOOPBACK_OK, **kw})

SCHED_MS = 1795917600000            # 2026-11-29T02:00:00Z
SCHED_TEXT = "2026-11-29T02:00:00Z"
EXEC_ID = f"nightly@{SCHED_TEXT}"


def assignment(handler: dict, *, timeout_s: float = 0.0, attempt: int = 2,
               token: int = 4242, scheduled_ms: int = SCHED_MS) -> Assignment:
    return Assignment(execution_id=f"nightly@{format_rfc3339(scheduled_ms)}", job="nightly",
                      scheduled_ms=scheduled_ms, attempt=attempt, fencing_token=token,
                      handler=handler, timeout_s=timeout_s)


def shell(command: str, **kw) -> dict:
    return {"shell": {"command": command, **kw}}


# ------------------------------------------------------------------------ process-state helpers

def _stat(pid: int) -> tuple[str, int] | None:
    """(state, pgrp) of a process, or None if it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    f = raw[raw.rfind(b")") + 2:].split()
    return f[0].decode(), int(f[2])


def _live_members(pgid: int) -> list[int]:
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            st = _stat(int(e))
            if st and st[1] == pgid and st[0] not in ("Z", "X"):
                out.append(int(e))
    return out


def group_gone(pgid: int) -> bool:
    """No process of group `pgid` is alive. killpg(pgid, 0) raising ProcessLookupError is the
    proof; where PID 1 does not reap orphans (some sandboxes, this one included) an orphaned
    member stays a zombie — dead, but counted by killpg — so fall back to /proc: only zombies."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return not _live_members(pgid)


def pid_dead(pid: int) -> bool:
    st = _stat(pid)
    return st is None or st[0] in ("Z", "X")


def wait_true(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


async def await_true(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


def pids_from(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", text)}


# A shell whose every process ignores SIGTERM: itself, a child shell and that shell's sleep.
STUBBORN = ('trap "" TERM; sh -c \'trap "" TERM; sleep 100\' & '
            'echo "pgid=$$ child=$!" > "{pidfile}"; echo "pgid=$$ child=$!"; sleep 100; wait')


# ------------------------------------------------------------------------ contract

def test_contract_env_and_rfc3339():
    a = assignment(shell("true"))
    assert contract_env(a) == {
        "SCHEDD_JOB_ID": "nightly", "SCHEDD_JOB_NAME": "nightly", "SCHEDD_EXECUTION_ID": EXEC_ID,
        "SCHEDD_SCHEDULED_TIME": SCHED_TEXT, "SCHEDD_ATTEMPT": "2", "SCHEDD_FENCING_TOKEN": "4242",
    }
    assert format_rfc3339(SCHED_MS + 7) == "2026-11-29T02:00:00.007Z"
    assert format_rfc3339(0) == "1970-01-01T00:00:00Z"
    from schedd.core.schedule import format_ms  # the format the rest of schedd writes
    for ms in (SCHED_MS, SCHED_MS + 123, 951782400000, 4102444799999):
        assert format_rfc3339(ms) == format_ms(ms)


def test_python_handlers_registry():
    h = PythonHandlers()

    @h.register("b")
    def b(ctx):
        return 1

    def a(ctx):
        return 2

    assert h.register("a", a) is a
    assert h.register("a", a) is a                  # same function again: fine
    assert h.get("b") is b and h.get("zzz") is None
    assert h.names() == ["a", "b"]
    with pytest.raises(ValueError):
        h.register("a", b)                          # a different function under a taken name
    with pytest.raises(ValueError):
        h.register("", a)


async def test_unsupported_handler_and_cancel_before_start(tmp_path):
    out = await execute(assignment({"ftp": {"url": "x"}}))
    assert out.state == FAILED and "unsupported handler" in out.error

    ev = asyncio.Event()
    ev.set()
    marker = tmp_path / "ran"
    out = await execute(assignment(shell(f"touch {marker}")), cancel=ev)
    assert out.state == CANCELLED and not marker.exists()


# ------------------------------------------------------------------------ shell

async def test_shell_success_sees_contract_env_job_env_and_workdir(tmp_path):
    ticks = iter(range(1000, 2000, 10))
    cmd = ('echo "J=$SCHEDD_JOB_ID N=$SCHEDD_JOB_NAME E=$SCHEDD_EXECUTION_ID '
           'T=$SCHEDD_SCHEDULED_TIME A=$SCHEDD_ATTEMPT F=$SCHEDD_FENCING_TOKEN"; '
           'echo "MY=$MY_VAR HOME_SET=${HOME:+yes}"; echo "cwd=$(pwd)"; echo err >&2')
    a = assignment(shell(cmd, workdir=str(tmp_path),
                         env={"MY_VAR": "hello world", "SCHEDD_ATTEMPT": "999"}))
    out = await execute(a, now_ms=lambda: next(ticks))
    assert isinstance(out, Outcome)
    assert out.state == SUCCEEDED, out
    assert out.exit_code == 0 and out.error == "" and out.http_status is None
    assert (out.started_ms, out.ended_ms) == (1000, 1010)
    lines = out.output_tail.splitlines()
    assert lines[0] == (f"J=nightly N=nightly E={EXEC_ID} T={SCHED_TEXT} A=2 F=4242")  # SCHEDD_* win
    assert lines[1] == "MY=hello world HOME_SET=yes" or "HOME" not in os.environ
    assert lines[2] == f"cwd={tmp_path.resolve()}"
    assert lines[3] == "err"                        # stderr merged into the same stream


async def test_shell_nonzero_exit_and_signal():
    out = await execute(assignment(shell("echo oops >&2; exit 3")))
    assert out.state == FAILED and out.exit_code == 3
    assert out.error == "exit status 3" and out.output_tail == "oops\n"

    out = await execute(assignment(shell("kill -KILL $$")))
    assert out.state == FAILED and out.error == "killed by signal SIGKILL"


async def test_shell_argv_mode_uses_no_shell():
    code = "import os, sys; print(sys.argv[1:], os.environ['SCHEDD_EXECUTION_ID'])"
    a = assignment({"shell": {"argv": [sys.executable, "-c", code, "a b", "$HOME"]}})
    out = await execute(a)
    assert out.state == SUCCEEDED, out
    assert out.output_tail.strip() == f"['a b', '$HOME'] {EXEC_ID}"


async def test_shell_missing_workdir_is_a_failed_outcome(tmp_path):
    missing = tmp_path / "nope"
    out = await execute(assignment(shell("true", workdir=str(missing))))
    assert out.state == FAILED and out.exit_code is None
    assert out.error == f"working directory {missing} does not exist"
    afile = tmp_path / "file"
    afile.write_text("x")
    out = await execute(assignment(shell("true", workdir=str(afile))))
    assert out.state == FAILED and "is not a directory" in out.error


async def test_shell_unknown_binary():
    out = await execute(assignment({"shell": {"argv": ["/nonexistent/schedd-no-such-binary", "x"]}}))
    assert out.state == FAILED and out.exit_code is None
    assert "cannot start /nonexistent/schedd-no-such-binary" in out.error
    assert "No such file or directory" in out.error


async def test_shell_output_tail_is_bounded_in_result_and_memory():
    # 16 MiB of output: the tail is the last 4 KiB, and memory never holds much more than a chunk.
    cmd = "head -c 16777216 /dev/zero | tr '\\0' 'a'; printf 'the end'"
    tracemalloc.start()
    try:
        out = await execute(assignment(shell(cmd)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.state == SUCCEEDED, out.error
    assert len(out.output_tail.encode()) == OUTPUT_TAIL_BYTES
    assert out.output_tail.endswith("a" * 100 + "the end")
    assert peak < 2 * 1024 * 1024, f"peak traced memory {peak} bytes"


async def test_shell_timeout_kills_whole_group_including_term_ignoring_grandchild(tmp_path):
    pidfile = tmp_path / "pids"
    t0 = time.monotonic()
    out = await execute(assignment(shell(STUBBORN.format(pidfile=pidfile)), timeout_s=1.0),
                        kill_grace_s=0.4)
    elapsed = time.monotonic() - t0
    assert out.state == TIMED_OUT, out
    assert out.error == "timed out after 1s"
    assert out.exit_code == -9                      # TERM was ignored: SIGKILL ended it
    assert elapsed >= 1.0 + 0.4 - 0.05              # it waited the grace before SIGKILL
    pids = pids_from(pidfile.read_text())
    assert "pgid=" in out.output_tail
    wait_true(lambda: group_gone(pids["pgid"]), 5, "the process group to be gone")
    assert pid_dead(pids["child"])


async def test_shell_timeout_sends_term_first():
    # A process that honours SIGTERM ends without waiting for the (long) grace.
    t0 = time.monotonic()
    out = await execute(assignment(shell("echo started; sleep 100"), timeout_s=0.3),
                        kill_grace_s=30)
    assert out.state == TIMED_OUT and out.output_tail == "started\n"
    assert out.exit_code == -15
    assert time.monotonic() - t0 < 10


async def test_shell_cancel_kills_group(tmp_path):
    pidfile = tmp_path / "pids"
    cancel = asyncio.Event()
    task = asyncio.ensure_future(execute(assignment(shell(STUBBORN.format(pidfile=pidfile))),
                                         cancel=cancel, kill_grace_s=0.3))
    await await_true(lambda: pidfile.exists() and "child=" in pidfile.read_text(), 10,
                     "the job to start")
    pids = pids_from(pidfile.read_text())
    assert not group_gone(pids["pgid"])
    cancel.set()
    out = await asyncio.wait_for(task, 10)
    assert out.state == CANCELLED and out.error == "cancelled"
    wait_true(lambda: group_gone(pids["pgid"]), 5, "the process group to be gone")
    assert pid_dead(pids["child"])


async def test_task_cancellation_still_kills_the_group(tmp_path):
    pidfile = tmp_path / "pids"
    task = asyncio.ensure_future(execute(assignment(shell(STUBBORN.format(pidfile=pidfile)))))
    await await_true(lambda: pidfile.exists() and "child=" in pidfile.read_text(), 10,
                     "the job to start")
    pids = pids_from(pidfile.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    wait_true(lambda: group_gone(pids["pgid"]), 5, "the process group to be gone")


def _procs_with_env(marker: bytes) -> list[int]:
    """Live processes whose environment contains `marker` (ours: we may read their environ)."""
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            env = Path(f"/proc/{e}/environ").read_bytes()
        except OSError:
            continue
        if marker in env and not pid_dead(int(e)):
            out.append(int(e))
    return out


async def test_task_cancelled_at_any_point_of_startup_leaves_no_process():
    # Cancel after 0, 1, 2, ... loop iterations: before the spawn, while asyncio connects the
    # pipes (where asyncio itself would kill only the main pid), and once running.
    for n in range(12):
        a = Assignment(execution_id=f"startup-{os.getpid()}-{n}", job="j", scheduled_ms=0,
                       attempt=1, fencing_token=1, handler=shell(STUBBORN.format(pidfile="/dev/null")))
        task = asyncio.ensure_future(execute(a))
        for _ in range(n):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        marker = f"SCHEDD_EXECUTION_ID={a.execution_id}\0".encode()
        wait_true(lambda: not _procs_with_env(marker), 5, f"no process left (cancel after {n})")


async def test_shell_leftover_background_process_is_stopped_after_exit():
    out = await execute(assignment(shell("sleep 100 & echo \"pgid=$$ bg=$!\"")),
                        kill_grace_s=2)
    assert out.state == SUCCEEDED, out
    pids = pids_from(out.output_tail)
    wait_true(lambda: group_gone(pids["pgid"]), 5, "the process group to be gone")
    assert pid_dead(pids["bg"])


# ------------------------------------------------------------------------ http

def _self_signed(tmp: Path) -> tuple[str, str]:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


class _Server:
    def __init__(self, tls: tuple[str, str] | None = None) -> None:
        self.requests: list[dict] = []
        self.status = 200
        self.reply = b"ok-body"
        self.hold = False
        self.release = threading.Event()
        self.arrived = threading.Event()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.requests.append({"method": self.command, "path": self.path,
                                       "headers": dict(self.headers.items()), "body": body})
                outer.arrived.set()
                if outer.hold:
                    outer.release.wait(30)
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(outer.reply)))
                self.end_headers()
                self.wfile.write(outer.reply)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        scheme = "http"
        if tls:
            import ssl
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.close()


async def test_http_success_sends_contract_headers_and_json_body(server):
    a = assignment({"http": {"url": server.url + "/hook?x=1", "method": "POST",
                             "headers": {"Authorization": "Bearer t",
                                         "idempotency-key": "user-tries-to-override"}}})
    out = await execute(a)
    assert out.state == SUCCEEDED, out
    assert out.http_status == 200 and out.output_tail == "ok-body" and out.error == ""
    (req,) = server.requests
    h = {k.lower(): v for k, v in req["headers"].items()}
    assert req["method"] == "POST" and req["path"] == "/hook?x=1"
    assert h["idempotency-key"] == EXEC_ID
    assert h["x-schedd-job"] == "nightly"
    assert h["x-schedd-execution-id"] == EXEC_ID
    assert h["x-schedd-attempt"] == "2"
    assert h["x-schedd-fencing-token"] == "4242"
    assert h["x-schedd-scheduled-time"] == SCHED_TEXT
    assert h["authorization"] == "Bearer t"
    assert h["content-type"] == "application/json"
    assert json.loads(req["body"]) == {"job": "nightly", "execution_id": EXEC_ID,
                                       "scheduled_time": SCHED_TEXT, "attempt": 2,
                                       "fencing_token": 4242}


async def test_http_default_method_custom_body_and_get(server):
    out = await execute(assignment({"http": {"url": server.url, "body": "raw payload",
                                             "headers": {"Content-Type": "text/plain"}}}))
    assert out.state == SUCCEEDED
    req = server.requests[-1]
    assert req["method"] == "POST" and req["body"] == b"raw payload"
    assert req["headers"]["Content-Type"] == "text/plain"

    out = await execute(assignment({"http": {"url": server.url + "/g", "method": "GET"}}))
    assert out.state == SUCCEEDED
    req = server.requests[-1]
    assert req["method"] == "GET" and req["body"] == b""
    assert req["headers"]["Idempotency-Key"] == EXEC_ID


async def test_https_verifies_certificates_unless_told_not_to(tmp_path):
    srv = _Server(tls=_self_signed(tmp_path))
    try:
        out = await execute(assignment({"http": {"url": srv.url + "/s"}}, timeout_s=10))
        assert out.state == FAILED and "CERTIFICATE_VERIFY_FAILED" in out.error, out
        assert srv.requests == []
        out = await execute(assignment({"http": {"url": srv.url + "/s",
                                                 "insecure_skip_verify": True}}, timeout_s=10))
        assert out.state == SUCCEEDED and out.http_status == 200, out
        assert srv.requests[-1]["headers"]["Idempotency-Key"] == EXEC_ID
    finally:
        srv.close()


async def test_http_500_is_failed_with_status(server):
    server.status, server.reply = 500, b"database on fire"
    out = await execute(assignment({"http": {"url": server.url}}))
    assert out.state == FAILED and out.http_status == 500
    assert out.error == "HTTP 500 Internal Server Error"
    assert out.output_tail == "database on fire"


async def test_http_connection_refused():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                       # nothing listens there now
    out = await execute(assignment({"http": {"url": f"http://127.0.0.1:{port}/x"}}))
    assert out.state == FAILED and out.http_status is None
    assert "ConnectionRefusedError" in out.error and f"127.0.0.1:{port}" in out.error


async def test_http_bad_url_does_not_leak_credentials():
    out = await execute(assignment({"http": {"url": "ftp://user:secret@example/x"}}))
    assert out.state == FAILED and "secret" not in out.error


async def test_http_timeout(server):
    server.hold = True
    t0 = time.monotonic()
    out = await execute(assignment({"http": {"url": server.url}}, timeout_s=0.3))
    assert out.state == TIMED_OUT and out.error == "timed out after 0.3s"
    assert time.monotonic() - t0 < 5
    assert server.arrived.is_set()


async def test_http_cancel(server):
    server.hold = True
    cancel = asyncio.Event()
    task = asyncio.ensure_future(execute(assignment({"http": {"url": server.url}}), cancel=cancel))
    await await_true(server.arrived.is_set, 10, "the request to arrive")
    cancel.set()
    out = await asyncio.wait_for(task, 5)
    assert out.state == CANCELLED


# ------------------------------------------------------------------------ python

def py(name: str, args_json: str | None = None) -> dict:
    return {"python": {"name": name, **({"args_json": args_json} if args_json else {})}}


async def test_python_sync_handler_in_a_thread_with_context_and_args():
    handlers = PythonHandlers()
    seen: dict = {}

    @handlers.register("report")
    def report(ctx: HandlerContext):
        seen["ctx"] = ctx
        seen["thread"] = threading.current_thread()
        return f"sent {ctx.args['to']}"

    out = await execute(assignment(py("report", '{"to": ["ops"], "n": 3}')),
                        python_handlers=handlers)
    assert out.state == SUCCEEDED, out
    assert out.output_tail == "sent ['ops']"
    ctx = seen["ctx"]
    assert seen["thread"] is not threading.main_thread()
    assert (ctx.execution_id, ctx.job, ctx.scheduled_ms, ctx.scheduled_time, ctx.attempt,
            ctx.fencing_token) == (EXEC_ID, "nightly", SCHED_MS, SCHED_TEXT, 2, 4242)
    assert ctx.args == {"to": ["ops"], "n": 3}
    assert isinstance(ctx.cancel, threading.Event) and not ctx.cancel.is_set()


async def test_python_async_handler_is_awaited():
    handlers = PythonHandlers()

    @handlers.register("a")
    async def a(ctx):
        await asyncio.sleep(0)
        assert isinstance(ctx.cancel, asyncio.Event)
        return {"attempt": ctx.attempt, "args": ctx.args}

    out = await execute(assignment(py("a")), python_handlers=handlers)
    assert out.state == SUCCEEDED, out
    assert out.output_tail == "{'attempt': 2, 'args': None}"


async def test_python_exception_unknown_name_and_bad_args():
    handlers = PythonHandlers()

    @handlers.register("boom")
    def boom(ctx):
        raise ValueError("boom: disk full")

    out = await execute(assignment(py("boom")), python_handlers=handlers)
    assert out.state == FAILED and out.error == "ValueError: boom: disk full"
    assert "Traceback" in out.output_tail and "in boom" in out.output_tail

    out = await execute(assignment(py("nope")), python_handlers=handlers)
    assert out.state == FAILED and out.error == "no python handler named nope on this worker"
    out = await execute(assignment(py("nope")))
    assert out.state == FAILED and "no python handler named nope" in out.error

    out = await execute(assignment(py("boom", "{not json")), python_handlers=handlers)
    assert out.state == FAILED and out.error.startswith("invalid args_json")


async def test_python_return_value_is_bounded():
    handlers = PythonHandlers()
    handlers.register("big", lambda ctx: "x" * 100_000 + "END")
    out = await execute(assignment(py("big")), python_handlers=handlers)
    assert out.state == SUCCEEDED and len(out.output_tail) == OUTPUT_TAIL_BYTES
    assert out.output_tail.endswith("END")


async def test_python_async_timeout_cancels_the_task():
    handlers = PythonHandlers()
    got = {}

    @handlers.register("slow")
    async def slow(ctx):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            got["cancelled"] = ctx.cancel.is_set()
            raise

    out = await execute(assignment(py("slow"), timeout_s=0.2), python_handlers=handlers,
                        kill_grace_s=1)
    assert out.state == TIMED_OUT and out.error == "timed out after 0.2s"
    assert got == {"cancelled": True}


async def test_python_sync_timeout_sets_cancel_and_cooperative_thread_stops():
    handlers = PythonHandlers()
    done = threading.Event()

    @handlers.register("loop")
    def loop(ctx):
        ctx.cancel.wait(30)                         # a cooperative handler watches ctx.cancel
        done.set()

    out = await execute(assignment(py("loop"), timeout_s=0.2), python_handlers=handlers,
                        kill_grace_s=5)
    assert out.state == TIMED_OUT and out.error == "timed out after 0.2s"
    assert done.is_set()                            # it was waited for within the grace


async def test_python_sync_timeout_with_stuck_thread_is_reported():
    handlers = PythonHandlers()
    release = threading.Event()
    handlers.register("stuck", lambda ctx: release.wait(30))
    try:
        out = await execute(assignment(py("stuck"), timeout_s=0.2), python_handlers=handlers,
                            kill_grace_s=0.1)
        assert out.state == TIMED_OUT
        assert "may still be running" in out.error
    finally:
        release.set()


async def test_python_cancel():
    handlers = PythonHandlers()
    started = threading.Event()

    @handlers.register("wait")
    def wait(ctx):
        started.set()
        ctx.cancel.wait(30)
        return "stopped"

    cancel = asyncio.Event()
    task = asyncio.ensure_future(execute(assignment(py("wait")), cancel=cancel,
                                         python_handlers=handlers))
    await await_true(started.is_set, 10, "the handler to start")
    cancel.set()
    out = await asyncio.wait_for(task, 5)
    assert out.state == CANCELLED and out.error == "cancelled"


# ------------------------------------------------------------------ start_eagerly (3.11's eager task)

async def test_start_eagerly_runs_the_first_step_at_the_call_and_never_awaiting_costs_no_task():
    from schedd_worker.handlers.base import start_eagerly
    seen: list[str] = []

    async def quick() -> str:
        seen.append("first statement")
        return "value"

    fut = start_eagerly(quick())
    assert seen == ["first statement"]               # before the loop ran anything
    assert fut.done() and fut.result() == "value" and not isinstance(fut, asyncio.Task)


async def test_start_eagerly_resumes_after_the_first_await_with_its_results_and_errors():
    from schedd_worker.handlers.base import start_eagerly
    gate: asyncio.Future = asyncio.get_running_loop().create_future()
    steps: list[object] = []

    async def two_steps() -> int:
        steps.append("before")
        steps.append(await gate)                     # resumed with the awaited value
        await asyncio.sleep(0)                       # a bare yield, then a timer
        await asyncio.sleep(0.01)
        raise ValueError("after the awaits")

    fut = start_eagerly(two_steps())
    assert steps == ["before"] and not fut.done()
    gate.set_result(41)
    with pytest.raises(ValueError, match="after the awaits"):
        await asyncio.wait_for(fut, 5)
    assert steps == ["before", 41]


async def test_start_eagerly_cancelling_mid_await_raises_in_the_coroutine():
    from schedd_worker.handlers.base import start_eagerly
    cleaned: list[str] = []

    async def waits() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("finally ran")

    fut = start_eagerly(waits())
    await asyncio.sleep(0)
    fut.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fut
    assert cleaned == ["finally ran"]


async def test_start_eagerly_keeps_the_callers_context_and_raises_into_the_future():
    import contextvars

    from schedd_worker.handlers.base import start_eagerly
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="caller")

    async def sets() -> str:
        var.set("handler")
        await asyncio.sleep(0)
        return var.get()                             # its own context on every step

    async def raises() -> None:
        raise KeyError("at once")

    fut = start_eagerly(sets())
    assert var.get() == "caller"
    assert await fut == "handler"
    failed = start_eagerly(raises())
    assert failed.done() and isinstance(failed.exception(), KeyError)


# ------------------------------------------------------------------------ run parameters


def _with_params(a: Assignment, params: dict) -> Assignment:
    return dataclasses.replace(a, params=params)


async def test_run_params_reach_shell_http_and_python_handlers(server):
    params = {"day": "monday", "Mode": "full run"}
    out = await execute(_with_params(assignment(shell('echo "$SCHEDD_PARAM_DAY/$SCHEDD_PARAM_MODE"')), params))
    assert out.state == SUCCEEDED and out.output_tail.strip() == "monday/full run", out
    # HTTP: in the facts body, and added to a job's own JSON object body; any other body as it is
    await execute(_with_params(assignment({"http": {"url": server.url}}), params))
    assert json.loads(server.requests[-1]["body"])["params"] == params
    await execute(_with_params(assignment({"http": {"url": server.url, "body": '{"kind": "x"}'}}), params))
    assert json.loads(server.requests[-1]["body"]) == {"kind": "x", "params": params}
    await execute(_with_params(assignment({"http": {"url": server.url, "body": "raw"}}), params))
    assert server.requests[-1]["body"] == b"raw"
    handlers = PythonHandlers()
    seen: dict = {}

    @handlers.register("p")
    def p(ctx: HandlerContext):
        seen["params"] = dict(ctx.params)

    assert (await execute(_with_params(assignment(py("p")), params), python_handlers=handlers)).state == SUCCEEDED
    assert seen["params"] == params
    assert (await execute(assignment(py("p")), python_handlers=handlers)).state == SUCCEEDED
    assert seen["params"] == {}


def test_container_env_file_carries_the_params():
    from schedd_worker.handlers.container import env_file
    text = env_file(_with_params(assignment({"container": {"image": "x"}}), {"day": "monday"}), {"image": "x"})
    assert isinstance(text, bytes) and b"SCHEDD_PARAM_DAY=monday\n" in text
