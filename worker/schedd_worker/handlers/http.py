"""The HTTP handler kind: one request to an address the outbound policy allows.

HTTP
    One request with the stdlib's http.client in a daemon thread, to an address the worker's
    outbound network policy allows (`HttpOptions.policy`, schedd_client.net: the host is resolved once
    and the checked address is dialled; by default loopback, link-local and cloud metadata
    addresses are refused). No proxy, no redirects followed (a 3xx is a failure with its status
    and "redirect to ... not followed": the safe choice for non-idempotent POSTs, and no hop can
    lead outside the policy). At most `read_limit` bytes of the body are read and its last
    `keep_bytes` kept as the output tail (0 keeps nothing).
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import socket
import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any

from schedd_client.net.outbound import checked_connection, request_path

from .base import (FAILED, SUCCEEDED, TIMED_OUT, Assignment, HttpOptions, Result, Stop, Tail,
                   fmt_seconds, format_rfc3339, in_daemon_thread, race, stopped, tail_text)

__all__ = ["HttpHandler"]

READ_CHUNK = 64 * 1024


class HttpHandler:
    """``{"url": ..., "method": ..., "headers": ..., "body": ..., "insecure_skip_verify": ...}``,
    within the worker's outbound policy (`HttpOptions`)."""

    def __init__(self, opts: HttpOptions = HttpOptions()) -> None:
        self.opts = opts

    async def run(self, a: Assignment, spec: Mapping[str, Any], stop: Stop) -> Result:
        return await _run(a, spec, stop.cancel, stop.deadline, self.opts)


def _contract_headers(a: Assignment) -> dict[str, str]:
    return {
        "Idempotency-Key": a.execution_id,
        "X-Schedd-Job": a.job,
        "X-Schedd-Execution-Id": a.execution_id,
        "X-Schedd-Attempt": str(a.attempt),
        "X-Schedd-Fencing-Token": str(a.fencing_token),
        "X-Schedd-Scheduled-Time": format_rfc3339(a.scheduled_ms),
    }


def _contract_body(a: Assignment) -> dict:
    body: dict[str, Any] = {
        "job": a.job,
        "execution_id": a.execution_id,
        "scheduled_time": format_rfc3339(a.scheduled_ms),
        "attempt": a.attempt,
        "fencing_token": a.fencing_token,
    }
    if a.params:
        body["params"] = dict(a.params)
    return body


def _with_params(a: Assignment, body_text: str) -> str:
    """A job's own body with the run's parameters: a JSON object gets a "params" key (unless it
    has one); any other body is sent as it is (its parameters are in the run, not the body)."""
    if not a.params:
        return body_text
    try:
        doc = json.loads(body_text)
    except ValueError:
        return body_text
    if not isinstance(doc, dict) or "params" in doc:
        return body_text
    return json.dumps({**doc, "params": dict(a.params)}, separators=(",", ":"))


class _HttpCall:
    """One blocking request, run in a thread; `abort()` (from any thread) unblocks it."""

    def __init__(self, method: str, url: str, headers: dict[str, str], body: bytes | None,
                 verify: bool, sock_timeout: float | None, opts: HttpOptions) -> None:
        self.method, self.url, self.headers, self.body = method, url, headers, body
        self.verify, self.sock_timeout, self.opts = verify, sock_timeout, opts
        self.aborted = False
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            conn = self._conn
        sock = getattr(conn, "sock", None) if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def run(self) -> tuple[int, str, bytes, str]:
        """(status, reason, kept tail of the body, Location header)."""
        try:
            conn = checked_connection(self.opts.policy, self.url, timeout=self.sock_timeout,
                                      verify=self.verify)
        except ValueError:
            raise ValueError(f"unsupported url {_safe_url(self.url)}") from None
        with self._lock:
            if self.aborted:
                raise ConnectionAbortedError("aborted")
            self._conn = conn
        try:
            conn.connect()
            if self.aborted:
                raise ConnectionAbortedError("aborted")
            conn.request(self.method, request_path(self.url), body=self.body,
                         headers=self.headers)
            resp = conn.getresponse()
            keep, limit = self.opts.keep_bytes, self.opts.read_limit
            tail = Tail(max(1, keep))
            got = 0
            while got < limit:
                chunk = resp.read(min(READ_CHUNK, limit - got))
                if not chunk:
                    break
                got += len(chunk)
                tail.feed(chunk)
            kept = bytes(tail.buf) if keep else b""
            return resp.status, resp.reason or "", kept, resp.getheader("Location") or ""
        finally:
            conn.close()


def _safe_url(url: str) -> str:
    """The URL without credentials, for error messages."""
    try:
        p = urllib.parse.urlsplit(url)
        if p.username is not None or p.password is not None:
            host = p.hostname or ""
            if p.port:
                host += f":{p.port}"
            p = p._replace(netloc=host)
        return urllib.parse.urlunsplit(p._replace(query="", fragment=""))
    except ValueError:
        return "<invalid url>"


def _status_text(status: int, reason: str) -> str:
    if not reason:
        try:
            reason = http.HTTPStatus(status).phrase
        except ValueError:
            reason = ""
    return f"HTTP {status} {reason}".rstrip()


async def _run(a: Assignment, spec: Mapping, cancel: asyncio.Event | None,
               deadline: float | None, opts: HttpOptions) -> Result:
    url = spec.get("url")
    if not isinstance(url, str) or not url:
        return Result(FAILED, error="an http handler needs a url")
    method = str(spec.get("method") or "POST").upper()

    contract = _contract_headers(a)
    ours = {k.lower() for k in contract}
    headers: dict[str, str] = {}
    user_headers = spec.get("headers") or {}
    if isinstance(user_headers, Mapping):
        for k, v in user_headers.items():
            if str(k).lower() not in ours:          # the contract headers win
                headers[str(k)] = str(v)
    lower = {k.lower() for k in headers}
    body_text = spec.get("body")
    body: bytes | None
    if body_text:
        body = _with_params(a, str(body_text)).encode("utf-8")
    elif method == "GET":
        body = None                                 # facts travel in the headers only
    else:
        body = json.dumps(_contract_body(a), separators=(",", ":")).encode()
        if "content-type" not in lower:
            headers["Content-Type"] = "application/json"
    parts = urllib.parse.urlsplit(url)
    if (parts.username or parts.password) and "authorization" not in lower:
        cred = f"{urllib.parse.unquote(parts.username or '')}:" \
               f"{urllib.parse.unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
    headers.update(contract)

    timeout = float(a.timeout_s or 0)
    call = _HttpCall(method, url, headers, body, verify=not spec.get("insecure_skip_verify"),
                     sock_timeout=timeout if timeout > 0 else None, opts=opts)
    fut = in_daemon_thread(call.run)
    try:
        how = await race(fut, cancel, deadline)
    except asyncio.CancelledError:
        call.abort()
        raise
    if how != "done":
        call.abort()
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # no "never retrieved"
        state, error = stopped(how, a)
        return Result(state, error=error)
    exc = fut.exception()
    if exc is not None:
        if isinstance(exc, (TimeoutError, socket.timeout)) and timeout > 0:
            return Result(TIMED_OUT, error=f"timed out after {fmt_seconds(timeout)}")
        return Result(FAILED, error=f"{method} {_safe_url(url)}: {type(exc).__name__}: {exc}")
    status, reason, tail, location = fut.result()
    text = tail_text(tail)
    if 200 <= status < 300:
        return Result(SUCCEEDED, http_status=status, output_tail=text)
    error = _status_text(status, reason)
    if 300 <= status < 400 and location:
        error += f": redirect to {_safe_url(location)} not followed"
    return Result(FAILED, http_status=status, error=error, output_tail=text)
