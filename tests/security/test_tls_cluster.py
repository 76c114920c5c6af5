"""TLS end to end on a real 3-node cluster with mTLS (LocalCluster(tls=True)): schedctl and the
SDK with their certificates, refusals without one or against another CA, a follower forwarding
a write to the leader over TLS, a worker over TLS running a job, the context file, and SIGHUP
serving a new certificate to new connections. Plus the start-up rule on a real `schedd serve`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from schedd.ports.fakes import wait_until
from schedd.security import certs
from schedd_client import AsyncClient, Client, job_spec
from schedd_client.errors import Unavailable
from tests.support.cluster import finished, workers_of

pytestmark = pytest.mark.integration

SCHEDCTL = [sys.executable, "-c", "import sys; from schedd_client.schedctl import main; sys.exit(main())"]


def schedctl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")} | (env or {})
    return subprocess.run([*SCHEDCTL, *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=env)


def served_serial(address: str, ca: Path, cert: Path, key: Path) -> int:
    """The serial of the certificate a NEW TLS connection to `address` is served."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    ctx.set_alpn_protocols(["h2"])
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def test_tls_cluster_end_to_end(cluster_factory, tmp_path):
    c = cluster_factory(size=3)
    c.start()
    leader = c.wait_leader(timeout=90)
    follower = next(n for n in c.nodes if n != leader)
    faddr = c.nodes[follower].grpc
    admin = c.security()
    ca, cert, key = str(admin.ca), str(admin.cert), str(admin.key)

    # schedctl with --ca/--cert/--key, talking to a follower only: the write is forwarded to
    # the leader over the nodes' own mTLS channels
    p = schedctl("--cluster", faddr, "--ca", ca, "--cert", cert, "--key", key,
                 "job", "create", "hello", "--schedule", "", "--command", "echo hello-over-tls")
    assert p.returncode == 0, p.stderr
    p = schedctl("--cluster", faddr, "--ca", ca, "--cert", cert, "--key", key, "-o", "json",
                 "job", "get", "hello")
    assert p.returncode == 0 and json.loads(p.stdout)["spec"]["name"] == "hello", p.stderr
    # ...and the same through SCHEDD_CA/SCHEDD_CERT/SCHEDD_KEY
    p = schedctl("--cluster", faddr, "job", "get", "hello",
                 env={"SCHEDD_CA": ca, "SCHEDD_CERT": cert, "SCHEDD_KEY": key})
    assert p.returncode == 0 and "hello" in p.stdout, p.stderr

    # refused: no client certificate (mTLS), another deployment's CA, plaintext
    p = schedctl("--cluster", faddr, "--ca", ca, "--timeout", "3", "job", "get", "hello")
    assert p.returncode == 1 and "hello-over-tls" not in p.stdout
    assert "may require a client certificate (mTLS)" in p.stderr
    other = certs.create_deployment(tmp_path / "other", admins=["mallory"]).leaves["admin/mallory"]
    p = schedctl("--cluster", faddr, "--ca", str(tmp_path / "other" / "ca.pem"), "--cert",
                 str(other.cert), "--key", str(other.key), "--timeout", "3", "job", "get", "hello")
    assert p.returncode == 1 and "hello-over-tls" not in p.stdout
    assert "CERTIFICATE_VERIFY_FAILED" in p.stderr and "the TLS handshake failed" in p.stderr
    p = schedctl("--cluster", faddr, "--timeout", "3", "job", "get", "hello")
    assert p.returncode == 1 and f"node {faddr} requires TLS" in p.stderr    # at once, not after the timeout
    # the node accepts the other CA's client certificate only with our CA as well: still refused
    with pytest.raises(Unavailable):
        with Client(faddr, ca=ca, cert=other.cert, key=other.key, timeout=3) as cl:
            cl.get_job("hello")

    # the SDK with tls options, through a follower
    with Client(faddr, ca=ca, cert=cert, key=key) as cl:
        cl.put_job(job_spec("sdk-made", command="true"))
    with c.client() as cl:
        assert cl.get_job("sdk-made").spec.name == "sdk-made"

    # a context file drives schedctl (SCHEDD_CONTEXT), Client.from_context and AsyncClient
    ctx_file = tmp_path / "ctx" / "prod.toml"
    ctx_file.parent.mkdir()
    (ctx_file.parent / "tok").write_text(c.admin_token + "\n")   # the token is passed through
    ctx_file.write_text(f'cluster = ["{faddr}"]\nca = "{ca}"\ncert = "{cert}"\nkey = "{key}"\n'
                        'token_file = "tok"\n')
    p = schedctl("-o", "json", "job", "get", "hello", env={"SCHEDD_CONTEXT": str(ctx_file)})
    assert p.returncode == 0 and json.loads(p.stdout)["spec"]["name"] == "hello", p.stderr
    with Client.from_context(ctx_file) as cl:
        assert cl.get_job("sdk-made").spec.name == "sdk-made"
        assert cl.security.token == c.admin_token
    yaml_ctx = tmp_path / "ctx" / "prod.yaml"
    yaml_ctx.write_text(f"cluster: {c.cluster_arg}\nca: {ca}\ncert: {cert}\nkey: {key}\n")

    async def async_get() -> str:
        async with AsyncClient.from_context(yaml_ctx) as acl:
            return (await acl.get_job("hello")).spec.name
    assert asyncio.run(async_get()) == "hello"

    # a worker over mTLS (flags) runs a job; another finds the cluster through a context file
    c.start_worker("w1", slots=1)
    c.start_worker("w2", slots=1, context=True)          # no flags: SCHEDD_CONTEXT only
    wctx = c.root / "context-worker-w2.toml"
    assert oct(wctx.stat().st_mode & 0o777) == "0o600" and "worker-w2.pem" in wctx.read_text()
    wait_until(lambda: {"w1", "w2"} <= set(workers_of(c)), timeout=60, what="both workers over TLS")
    with c.client() as cl:
        eid = cl.trigger_job("hello").id
        ex = wait_until(lambda: finished(cl, eid), timeout=60, what="hello to finish")
    assert ex.state == "SUCCEEDED" and "hello-over-tls" in ex.attempts[-1].output_tail

    # SIGHUP with new files: new connections get the new certificate, the node keeps serving
    # and forwarding (its peer channels were rebuilt with the new client certificate)
    node_files = certs.leaf_paths(c.tls_dir, "node", follower)
    old = served_serial(faddr, admin.ca, admin.cert, admin.key)
    # a half-copied file first: the reload fails, says why, and the old certificate stays
    node_files.cert.write_text("-----BEGIN CERTIFICATE-----\ntruncated")
    c.signal_node(follower, signal.SIGHUP)
    wait_until(lambda: "TLS reload failed" in c.nodes[follower].log.read_text(), timeout=30,
               what="the failed reload in the log")
    assert served_serial(faddr, admin.ca, admin.cert, admin.key) == old
    new = certs.issue(certs.load_ca(c.tls_dir), c.tls_dir, "node", follower,
                      hosts=certs.LOCAL_HOSTS, overwrite=True)
    assert new.cert == node_files.cert
    new_serial = x509.load_pem_x509_certificate(new.cert.read_bytes()).serial_number
    assert new_serial != old
    c.signal_node(follower, signal.SIGHUP)
    wait_until(lambda: served_serial(faddr, admin.ca, admin.cert, admin.key) == new_serial,
               timeout=30, what="the new certificate on new connections")
    wait_until(lambda: http_serial(c.nodes[follower].metrics) == new_serial, timeout=30,
               what="the new certificate on the HTTP port (dashboard, /metrics) too")
    assert c.nodes[follower].alive()
    with Client(faddr, security=admin) as cl:
        cl.put_job(job_spec("after-reload", command="true"))        # forwarded again
        assert cl.cluster_status().leader_id == leader
    wait_until(lambda: "forwarding channels rebuilt with the new files" in c.nodes[follower].log.read_text(),
               timeout=30, what="the forwarding channels rebuilt")
    assert "TLS reloaded" in c.nodes[follower].log.read_text()


def http_serial(address: str) -> int:
    """The serial of the certificate the node's HTTP port presents (not verified: only read)."""
    host, _, port = address.rpartition(":")
    pem = ssl.get_server_certificate((host, int(port)), timeout=10)
    return x509.load_pem_x509_certificate(pem.encode()).serial_number


def _serve(tmp_path: Path, grpc_address: str, tls: str, more: str = "") -> subprocess.CompletedProcess:
    cfg = tmp_path / "n1.toml"
    cfg.write_text(f'node_id = "n1"\ndata_dir = "{tmp_path / "data"}"\nraft_address = "127.0.0.1:1"\n'
                   f'grpc_address = "{grpc_address}"\n{more}{tls}')
    return subprocess.run([sys.executable, "-m", "schedd", "serve", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_plain_http_on_a_non_loopback_metrics_address_refuses_to_start(tmp_path):
    p = _serve(tmp_path, "127.0.0.1:7070", "[tls]\ninsecure = true\n", more='metrics_address = "0.0.0.0:9101"\n')
    assert p.returncode == 1
    assert "refusing to serve the dashboard and /metrics over plain HTTP on metrics_address = '0.0.0.0:9101'" \
        in p.stderr and "[tls] cert and key" in p.stderr


@pytest.mark.parametrize("tls, says", [
    ("[tls]\ninsecure = true\n", "[tls] insecure = true allows plaintext on loopback addresses only"),
    ("", "no TLS is configured"),
])
def test_a_node_binding_everywhere_without_tls_refuses_to_start(tmp_path, tls, says):
    p = _serve(tmp_path, "0.0.0.0:7070", tls)
    assert p.returncode == 1
    assert "refusing to serve plaintext gRPC on grpc_address = '0.0.0.0:7070'" in p.stderr
    assert says in p.stderr and "[tls] cert and key" in p.stderr
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


def test_a_loopback_node_without_tls_needs_insecure_and_a_bad_cert_is_named(tmp_path):
    p = _serve(tmp_path, "127.0.0.1:7070", "")
    assert p.returncode == 1 and "set [tls] insecure = true" in p.stderr
    (tmp_path / "bad.pem").write_text("not a certificate")
    (tmp_path / "bad-key.pem").write_text("not a key")
    p = _serve(tmp_path, "0.0.0.0:7070", '[tls]\ncert = "bad.pem"\nkey = "bad-key.pem"\n')
    assert p.returncode == 1 and "bad.pem is not a PEM certificate" in p.stderr
