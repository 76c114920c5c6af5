"""Client request ids live in a namespace of their own.

The leader proposes its own entries under ids a client can guess from `Cluster.Status`
(`epoch-<node>-<term>`, `finish-<token>` with tokens being log indexes, ...). A client write
sent under such an id used to take its place in the dedup table, so the real entry was answered
from it instead of applying: a new leader whose epoch never applied fired nothing, a finished run
stayed RUNNING. The API now prefixes every client id, so no client can write an internal one.
"""

from __future__ import annotations

import pytest

from schedd.core.attempts import TOKENS_PER_INDEX
from schedd.core.commands import client_rid
from schedd_proto import scheduler_pb2 as pb
from schedd_proto import scheduler_pb2_grpc as pb_grpc
from schedd_client import job_spec
from schedd.ports.fakes import wait_until
from tests.support.cluster import workers_of

pytestmark = pytest.mark.integration

TERMS_AHEAD = 10              # epoch ids for the next terms of every node
TOKENS = range(60, 140)       # finish ids for these log indexes past the current commit index


def test_client_request_ids_never_look_internal():
    for rid in ("epoch-n1-7", "finish-12", "expire-12", "start-j@2027-01-01T00:00:00Z#1", "sla-x", ""):
        assert not client_rid(rid or "x").startswith(("epoch-", "finish-", "expire-", "start-", "sla-"))
    assert client_rid("a") == client_rid("a") != client_rid("b")    # a client's retries still dedupe
    with pytest.raises(ValueError, match="request_id"):
        client_rid("x" * 1000)


def test_client_request_id_cannot_stall_a_new_leader(cluster_factory):
    c = cluster_factory(size=3, scheduler={"lease_ms": 4000})
    c.start()
    lead = c.wait_leader(timeout=60)
    c.start_worker("w1", slots=2, drain_grace_s=5)
    client = c.client(timeout=30)
    wait_until(lambda: workers_of(c) == ["w1"], timeout=30, what="the worker to connect")
    client.put_job(job_spec("target", command="echo ok"))
    st = c.status(lead)
    term, base = st.term, st.commit_index
    seeds = [f"epoch-{n}-{term + k}" for n in c.nodes for k in range(1, TERMS_AHEAD + 1)]
    seeds += [f"finish-{base + i}" for i in TOKENS]
    seed = pb.JobSpec(name="seed", handler=pb.Handler(shell=pb.ShellHandler(command="true")))
    with c.channel(lead) as ch:
        stub = pb_grpc.SchedulerStub(ch)
        for rid in seeds:                      # each a write the server accepts
            stub.PutJob(pb.PutJobRequest(job=seed, request_id=rid), timeout=30)

    # a finished run finishes (its finish-<token> was sent by the client above)
    eid = client.trigger_job("target").id
    ex = wait_until(lambda: (e := client.get_execution(eid)).state not in ("SCHEDULED", "RUNNING") and e,
                    timeout=60, what="the run to end")
    token = ex.attempts[0].fencing_token
    # A `start` claim's token is its log index; a `start_many` claim's is index * TOKENS_PER_INDEX
    # + k, and its result goes in a `finish_many` entry, which has no request id to take.
    index = token if token < TOKENS_PER_INDEX else token // TOKENS_PER_INDEX
    assert base + TOKENS.start <= index < base + TOKENS.stop, f"token {token} outside the seeded ids"
    assert ex.state == "SUCCEEDED" and [a.state for a in ex.attempts] == ["SUCCEEDED"], \
        f"the result was swallowed: {[(a.state, a.error) for a in ex.attempts]}"

    # after a failover the new leader's epoch applies, so it fires and claims
    c.kill_node(lead)
    new = c.wait_leader(timeout=60, exclude=lead)
    assert c.status(new).term <= term + TERMS_AHEAD
    wait_until(lambda: workers_of(c) == ["w1"], timeout=30, what="the worker to reconnect")
    eid = client.trigger_job("target").id
    ex = wait_until(lambda: (e := client.get_execution(eid)).state == "SUCCEEDED" and e,
                    timeout=60, what="a run under the new leader")
    assert ex.attempts[-1].worker == "w1"
