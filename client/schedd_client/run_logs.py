"""Run logs: ``Client.logs(run_id)`` / ``AsyncClient.logs(run_id)`` and ``schedctl run logs RUN``.

A run's full output is kept by the worker that ran it and served through the cluster (the
daemon's Logs.ReadRunLogs): any node will do, a follower relays the leader's stream. The
stream is chunks (``RunLogChunk``): ``output`` (bytes of stdout or stderr, in the order the job
wrote them), ``dropped`` (the worker's per-attempt bound cut bytes there), ``notice`` (why
what is shown is not the whole log, e.g. the worker is gone and the tail kept in the Raft log
is shown) and one ``end`` last, with the attempt's state. ``follow=True`` keeps the stream open
while the attempt runs and ends when it ends, with its outcome.

Failover: until the first chunk arrives, an unavailable node is skipped as for any call; once
chunks have been yielded a broken stream raises (the caller has part of the log).
"""

from __future__ import annotations

import asyncio
import codecs
import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc

from schedd_proto import logs_pb2 as lpb

from ._failover import Router
from ._plans import Call
from ._transport import AsyncTransport, BlockingTransport
from .convert import printable

__all__ = ["read_logs", "read_logs_async", "request", "add_commands", "run_logs"]

READ_TIMEOUT_S = 300.0          # a whole log without follow (up to the worker's per-attempt bound)


def request(run_id: str, *, attempt: int = 0, follow: bool = False, stream: str = "",
            tail: int = 0) -> lpb.ReadRunLogsRequest:
    """The request, checked here as the server checks it (a clear error before any call)."""
    if stream not in ("", "stdout", "stderr"):
        raise ValueError(f"stream must be 'stdout', 'stderr' or '' (both), got {stream!r}")
    if attempt < 0 or tail < 0:
        raise ValueError("attempt and tail must be 0 or more")
    return lpb.ReadRunLogsRequest(id=run_id, attempt=attempt, follow=follow, stream=stream, tail_lines=tail)


def _timeout(client: Any, follow: bool) -> float | None:
    return None if follow else max(client.timeout, READ_TIMEOUT_S)


def read_logs(client: BlockingTransport, req: lpb.ReadRunLogsRequest) -> Iterator[lpb.RunLogChunk]:
    """The chunks of a run's log (module doc)."""
    call = Call("logs", "ReadRunLogs", req)
    attempts = Router(client.addresses, client.timeout).attempts(call)
    for address, pause, _share in attempts:
        if pause:
            time.sleep(pause)
        stream = client._method(address, call)(req, timeout=_timeout(client, req.follow),
                                               metadata=(*call.metadata, *client._auth))
        started = False
        try:
            for chunk in stream:
                started = True
                yield chunk
        except grpc.RpcError as err:
            if started:
                raise attempts.failed(address, err) or attempts.exhausted() from None
            if (final := attempts.failed(address, err)) is not None:
                raise final from None
        else:
            attempts.succeeded(address)
            return
        finally:
            stream.cancel()
    raise attempts.exhausted()


async def read_logs_async(client: AsyncTransport, req: lpb.ReadRunLogsRequest) -> AsyncIterator[lpb.RunLogChunk]:
    """``read_logs`` for the AsyncClient."""
    call = Call("logs", "ReadRunLogs", req)
    attempts = Router(client.addresses, client.timeout).attempts(call)
    for address, pause, _share in attempts:
        if pause:
            await asyncio.sleep(pause)
        stream = client._method(address, call)(req, timeout=_timeout(client, req.follow),
                                               metadata=(*call.metadata, *client._auth))
        started = False
        try:
            async for chunk in stream:
                started = True
                yield chunk
        except grpc.RpcError as err:
            if started:
                raise attempts.failed(address, err) or attempts.exhausted() from None
            if (final := attempts.failed(address, err)) is not None:
                raise final from None
        else:
            attempts.succeeded(address)
            return
        finally:
            stream.cancel()
    raise attempts.exhausted()


# ---------------------------------------------------------------- schedctl


def add_commands(runs: Any, command: Any) -> None:
    """``schedctl run logs RUN [--attempt N] [-f] [--stdout|--stderr] [--tail N]``."""
    logs = command(runs, "logs", run_logs,
                   "print a run's full output, kept by the worker that ran it (-f: follow it live)")
    logs.add_argument("id", metavar="RUN")
    logs.add_argument("--attempt", type=int, default=0, metavar="N", help="attempt N (default: the latest)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing while the attempt runs; ends with its outcome")
    which = logs.add_mutually_exclusive_group()
    which.add_argument("--stdout", dest="stream", action="store_const", const="stdout", default="",
                       help="only what it wrote to stdout")
    which.add_argument("--stderr", dest="stream", action="store_const", const="stderr",
                       help="only what it wrote to stderr")
    logs.add_argument("--tail", type=int, default=0, metavar="N", help="only the last N lines")


def _chunk_doc(c: lpb.RunLogChunk) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": c.kind, "attempt": c.attempt, "worker": c.worker}
    if c.kind == "output":
        doc |= {"stream": c.stream, "time_ms": c.time_ms, "text": c.data.decode("utf-8", errors="replace")}
        if c.from_raft:
            doc["from_raft"] = True
    elif c.kind == "dropped":
        doc["dropped_bytes"] = c.dropped_bytes
    elif c.kind == "end":
        doc |= {"state": c.state, "exit_code": c.exit_code, "message": c.message}
    else:
        doc["message"] = c.message
    return doc


def run_logs(cmd: Any) -> None:
    args = cmd.args
    try:
        req = request(args.id, attempt=args.attempt, follow=args.follow, stream=args.stream, tail=args.tail)
    except ValueError as e:
        from ._cli import UsageError
        raise UsageError(str(e)) from None
    as_lines = getattr(args, "output", "table") in ("json", "yaml")
    # Piped or redirected, the bytes go out exactly as the job wrote them; on a terminal (or a
    # text stream) they are decoded and shown as every human output is (`printable`): a job's
    # output cannot send the terminal escape sequences.
    raw = None if sys.stdout.isatty() else getattr(sys.stdout, "buffer", None)
    decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
    try:
        for c in cmd.client.logs(args.id, attempt=req.attempt, follow=req.follow, stream=req.stream,
                                 tail=int(req.tail_lines)):
            if as_lines:
                print(json.dumps(_chunk_doc(c)), flush=True)
            elif c.kind == "output":
                if raw is not None:
                    raw.write(c.data)
                    raw.flush()
                else:
                    sys.stdout.write(printable(decoders.get(c.stream, decoders["stdout"]).decode(c.data)))
                    sys.stdout.flush()
            elif c.kind == "dropped":
                print(f"… {c.dropped_bytes:,} bytes dropped here (the worker's bound per attempt)",
                      file=sys.stderr, flush=True)
            elif c.kind == "notice":
                print(printable(f"schedctl: {c.message}"), file=sys.stderr, flush=True)
            elif c.kind == "end":
                print(printable(f"schedctl: attempt {c.attempt} on {c.worker or '-'}: {c.message or c.state}"),
                      file=sys.stderr, flush=True)
    except BrokenPipeError:
        return
