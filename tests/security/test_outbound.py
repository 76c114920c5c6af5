"""SSRF: requests the cluster sends to user-given URLs obey an outbound
network policy (schedd_client.net.policy): SLA webhooks from the leader, HTTP jobs and http sensors from
a worker. Only 127.0.0.1 is used; the "internal" targets are loopback servers of this test (what
the default policy refuses) and the metadata address, which is never dialled."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading

import pytest

from schedd.leader import sla as L
from schedd_client.net import outbound
from schedd_client.net.policy import DEFAULT_DENY, NetPolicy, PolicyError, make_policy, parse_rule
from schedd.runtime import config as config_mod
from schedd_worker.executors import FAILED, SUCCEEDED, Assignment, HttpOptions, execute
from schedd_worker.handlers.sensor import NOT_READY

LOOPBACK_OK = make_policy(allow=["127.0.0.1"])
METADATA = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"


class _Server:
    """A loopback HTTP server: answers `status` with `headers` and `body`, counts requests."""

    def __init__(self, status: int = 200, headers: dict | None = None, body: bytes = b"ok") -> None:
        self.hits: list[str] = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                outer.hits.append(self.path)
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass                    # the client stopped reading: that is the point

            do_GET = do_POST = _any

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    made: list[_Server] = []

    def make(**kw) -> _Server:
        made.append(_Server(**kw))
        return made[-1]
    yield make
    for s in made:
        s.close()


def _job(handler: dict, timeout_s: float = 10.0) -> Assignment:
    return Assignment(execution_id="j@2026-11-29T02:00:00Z", job="j", scheduled_ms=1795917600000,
                      attempt=1, fencing_token=7, handler=handler, timeout_s=timeout_s)


def _node_config(extra: dict | None = None) -> config_mod.NodeConfig:
    return config_mod.from_dict({"node_id": "n1", "data_dir": "/tmp/unused", "raft_address": "127.0.0.1:1",
                                 "grpc_address": "127.0.0.1:2", **(extra or {})})


# ------------------------------------------------------------------ the pure policy, table-driven

@pytest.mark.parametrize("policy, host, ip, allowed, reason", [
    (NetPolicy(), "localhost", "127.0.0.1", False, "denied by 127.0.0.0/8"),
    (NetPolicy(), "x", "127.8.9.10", False, "denied by 127.0.0.0/8"),
    (NetPolicy(), "localhost", "::1", False, "denied by ::1/128"),
    (NetPolicy(), "x", "::ffff:127.0.0.1", False, "denied by 127.0.0.0/8"),     # v4-mapped
    (NetPolicy(), "x", "0.0.0.0", False, "denied by 0.0.0.0/8"),
    (NetPolicy(), "x", "169.254.169.254", False, "denied by 169.254.0.0/16"),
    (NetPolicy(), "x", "fe80::1%eth0", False, "denied by fe80::/10"),
    (NetPolicy(), "x", "fd00:ec2::254", False, "denied by fd00:ec2::254/128"),
    (NetPolicy(), "metadata.google.internal.", "10.1.2.3", False, "denied by metadata.google.internal"),
    (NetPolicy(), "hooks.example.com", "93.184.216.34", True, "not denied"),
    (NetPolicy(), "x", "10.0.0.7", True, "not denied"),                         # private: allowed
    (NetPolicy(), "x", "2001:db8::1", True, "not denied"),
    (LOOPBACK_OK, "x", "127.0.0.1", True, "allowed by 127.0.0.1"),
    (LOOPBACK_OK, "x", "127.0.0.2", False, "denied by 127.0.0.0/8"),
    (make_policy(allow=["*.corp"]), "Hooks.Corp", "127.0.0.1", True, "allowed by *.corp"),
    (make_policy(allow=["*.corp"]), "corp", "127.0.0.1", False, "denied by 127.0.0.0/8"),
    (make_policy(deny=["10.0.0.0/8"]), "x", "10.9.9.9", False, "denied by 10.0.0.0/8"),
    (make_policy(allow=["hooks.example.com"], deny=["*"]), "hooks.example.com", "1.2.3.4", True,
     "allowed by hooks.example.com"),
    (make_policy(allow=["hooks.example.com"], deny=["*"]), "other.example.com", "1.2.3.4", False,
     "denied by *"),
    (make_policy(defaults=False), "x", "127.0.0.1", True, "not denied"),
    (NetPolicy(), "x", "not-an-ip", False, "'not-an-ip' is not an IP address"),
])
def test_net_policy_decides(policy, host, ip, allowed, reason):
    d = policy.decide(host, ip)
    assert (d.allowed, d.reason) == (allowed, reason)


@pytest.mark.parametrize("text", ["", "10.0.0.0/33", "10.0.0.1/8", "300.1.1.1", "a b", "fe80::zz",
                                  "-bad-.com", "*.", "http://x"])
def test_bad_rules_are_refused_with_a_message(text):
    with pytest.raises(PolicyError):
        parse_rule(text)


def test_every_default_rule_parses():
    assert len(NetPolicy().deny) == len(DEFAULT_DENY)


def test_connection_dials_the_address_that_was_checked():
    """Resolved once: the connect uses the checked sockaddr, not a second lookup."""
    calls = []

    def resolver(host, port, family, type_):
        calls.append(host)
        if len(calls) == 1:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", port)),
                    (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]  # rebinding

    fam, addr = outbound.resolve_allowed(NetPolicy(), "rebind.example", 80, resolver)
    assert addr == ("93.184.216.34", 80) and calls == ["rebind.example"]
    only_metadata = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 80))]
    with pytest.raises(outbound.Refused, match=r"169.254.169.254 \(denied by 169.254.0.0/16\)"):
        outbound.resolve_allowed(NetPolicy(), "evil.example", 80, lambda *a: only_metadata)


# ------------------------------------------------------------------ the items

def test_webhook_to_loopback_is_refused_by_default(serve):
    hook = serve()
    payload = {"execution_id": "j@2026-11-29T02:00:00Z", "job": "j"}
    cfg = _node_config()
    with pytest.raises(outbound.Refused, match="denied by 127.0.0.0/8"):
        L.post_json(hook.url + "/sla", payload, 5.0, policy=cfg.webhooks)
    assert hook.hits == []
    # the operator opts in, in the node config: then it is posted
    cfg = _node_config({"webhooks": {"allow": ["127.0.0.1"]}})
    assert L.post_json(hook.url + "/sla", payload, 5.0, policy=cfg.webhooks) == 200
    assert hook.hits == ["/sla"]
    with pytest.raises(config_mod.ConfigError, match=r"\[webhooks\].allow: bad network"):
        _node_config({"webhooks": {"allow": ["10.0.0.0/33"]}})


def test_http_job_redirect_outside_allow_list_is_refused(serve):
    second = serve()                       # a redirect there would be allowed by the policy, too
    for target in (METADATA, second.url + "/inner"):
        hop = serve(status=302, headers={"Location": target})
        out = _job({"http": {"url": hop.url + "/start", "method": "GET"}})
        res = asyncio.run(execute(out, http=HttpOptions(policy=LOOPBACK_OK)))
        assert res.state == FAILED and res.http_status == 302, res
        assert "redirect" in res.error and "not followed" in res.error
        # the SLA webhook does not follow it either
        assert L.post_json(hop.url + "/sla", {"execution_id": "x"}, 5.0, policy=LOOPBACK_OK) == 302
        assert hop.hits == ["/start", "/sla"]
    assert second.hits == []
    # by default an HTTP job may not reach loopback at all, nor may an http sensor
    direct = serve()
    res = asyncio.run(execute(_job({"http": {"url": direct.url + "/x"}})))
    assert res.state == FAILED and "denied by 127.0.0.0/8" in res.error, res
    res = asyncio.run(execute(_job({"sensor": {"http_url": direct.url + "/s"}})))
    assert res.state == NOT_READY and "denied by 127.0.0.0/8" in res.error, res
    assert direct.hits == []


def test_response_kept_is_bounded(serve):
    limit = 64 << 10
    # read stops at `limit` bytes (the "B"s end there), and only the last 100 of them are kept
    big = serve(body=b"A" * (limit - 100) + b"B" * 100 + b"C" * (3 << 20))
    opts = HttpOptions(policy=LOOPBACK_OK, keep_bytes=100, read_limit=limit)
    res = asyncio.run(execute(_job({"http": {"url": big.url + "/big", "method": "GET"}}), http=opts))
    assert res.state == SUCCEEDED and res.output_tail == "B" * 100, res
    res = asyncio.run(execute(_job({"http": {"url": big.url + "/big", "method": "GET"}}),
                                            http=HttpOptions(policy=LOOPBACK_OK, keep_bytes=0)))
    assert res.state == SUCCEEDED and res.output_tail == "", res
    with pytest.raises(ValueError):
        HttpOptions(keep_bytes=10 << 20)
