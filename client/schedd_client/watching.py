"""The SDK's watches: a server stream opened on the first node that answers (the failover of
every call, for the opening only), then read for as long as the caller iterates. Leaving the
loop (or closing the iterator) cancels the stream, which frees the server's watch slot.

Each watch is first the listing, as "added" events, then one "synced" event, then the changes
(schedd_proto.scheduler_pb2.WatchEvent); ``watch_dag_run`` gives the whole run at each change.
Jobs and executions are asked for in batches (the changes of one server read in one message: far
cheaper for the node when hundreds of rows change a second) and handed out one event at a time,
so a caller never sees a batch; a node that does not batch sends them one by one anyway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from google.protobuf.message import Message

from schedd_proto import dags_pb2 as dpb
from schedd_proto import scheduler_pb2 as pb

from ._failover import Router
from ._plans import Call
from .errors import error_from_rpc


def jobs_call(team: str, state: str, limit: int) -> Call:
    return Call("scheduler", "WatchJobs", pb.ListJobsRequest(team=team, state=state, page_size=limit, batch=True))


def executions_call(job: str, state: str, limit: int) -> Call:
    return Call("scheduler", "WatchExecutions",
                pb.ListExecutionsRequest(job=job, state=state, page_size=limit, batch=True))


def workers_call() -> Call:
    return Call("scheduler", "WatchWorkers", pb.ListWorkersRequest())


def dag_run_call(name: str, run_id: str) -> Call:
    return Call("dags", "WatchDagRun", dpb.GetDagRunRequest(name=name, run_id=run_id))


def unbatched(msg: Message) -> Iterator[Message]:
    """The events a message carries: those of a "batch", else the message itself."""
    if isinstance(msg, pb.WatchEvent) and msg.type == "batch":
        yield from msg.events
    else:
        yield msg


def _ended(err: grpc.RpcError) -> bool:
    """The stream was cancelled by this side (the caller stopped reading)."""
    return err.code() == grpc.StatusCode.CANCELLED


def stream(client: Any, call: Call) -> Iterator[Message]:
    """The messages of a server stream (blocking client)."""
    attempts = Router(client.addresses, client.timeout).attempts(call)
    for address, pause, _share in attempts:
        if pause:
            time.sleep(pause)
        responses = client._method(address, call)(call.request, metadata=(*call.metadata, *client._auth))
        try:
            first = next(responses)
        except StopIteration:
            return
        except grpc.RpcError as err:
            if (final := attempts.failed(address, err)) is not None:
                raise final from None
            continue
        attempts.succeeded(address)
        try:
            yield from unbatched(first)
            for msg in responses:
                yield from unbatched(msg)
        except grpc.RpcError as err:
            if not _ended(err):
                raise error_from_rpc(err) from None
        finally:
            responses.cancel()
        return
    raise attempts.exhausted()


async def stream_async(client: Any, call: Call) -> AsyncIterator[Message]:
    """`stream`, for the AsyncClient."""
    attempts = Router(client.addresses, client.timeout).attempts(call)
    for address, pause, _share in attempts:
        if pause:
            await asyncio.sleep(pause)
        responses = client._method(address, call)(call.request, metadata=(*call.metadata, *client._auth))
        try:
            first = await responses.read()
        except grpc.RpcError as err:
            if (final := attempts.failed(address, err)) is not None:
                raise final from None
            continue
        if first is grpc.aio.EOF:
            return
        attempts.succeeded(address)
        try:
            for event in unbatched(first):
                yield event
            while (msg := await responses.read()) is not grpc.aio.EOF:
                for event in unbatched(msg):
                    yield event
        except grpc.RpcError as err:
            if not _ended(err):
                raise error_from_rpc(err) from None
        finally:
            responses.cancel()
        return
    raise attempts.exhausted()
