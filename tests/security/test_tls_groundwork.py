"""The deployment CA and certificates, gRPC TLS with mTLS and reload on
SIGHUP, the peer principal, and the rule for when plaintext is allowed.

The gRPC tests run a real grpc.aio server on 127.0.0.1 (port 0: the kernel picks a free one)
with a tiny generic service (Whoami answers the caller's principal) and the standard health
service, so they do not depend on the schedd proto. The server certificate a NEW connection sees
is read with a plain TLS handshake (`served_serial`); an old connection is an open gRPC channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import logging
import os
import signal
import ssl
import stat
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.x509 import verification as xv
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from schedd.security import certs, tls
from schedd.security.startup import is_loopback_bind, plaintext_refusal
from tests.support.certs import principal_of_cert

WHOAMI = "/schedd.test.Whoami/Get"


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(Path(path).read_bytes())


@pytest.fixture
def dep(tmp_path) -> certs.Deployment:
    return certs.create_deployment(tmp_path / "dep", nodes=["n1"], workers=["w1"], admins=["alice"])


@pytest.fixture
def other(tmp_path) -> certs.Deployment:
    """A second deployment: its CA signs a worker named like ours."""
    return certs.create_deployment(tmp_path / "other", workers=["w1"])


def node_files(dep: certs.Deployment, *, mtls: bool = True) -> tls.ServerTlsFiles:
    n1 = dep.leaves["node/n1"]
    return tls.ServerTlsFiles(cert=n1.cert, key=n1.key, client_ca=dep.ca.cert if mtls else None)


# --------------------------------------------------------------------------- certificates

def test_deployment_files_and_modes_whatever_the_umask(tmp_path):
    old = os.umask(0o077)                      # would make certs 0600 if the mode were left to it
    try:
        d = certs.create_deployment(tmp_path / "a", nodes=["n1"], workers=["w1"], admins=["alice"])
    finally:
        os.umask(old)
    old = os.umask(0)                          # would make keys 0666
    try:
        e = certs.create_deployment(tmp_path / "b", nodes=["n1"])
    finally:
        os.umask(old)
    names = sorted(p.name for p in d.root.iterdir())
    assert names == ["admin-alice-key.pem", "admin-alice.pem", "ca-key.pem", "ca.pem",
                     "node-n1-key.pem", "node-n1.pem", "worker-w1-key.pem", "worker-w1.pem"]
    for root in (d.root, e.root):
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        for p in root.iterdir():
            want = 0o600 if p.name.endswith("-key.pem") else 0o644
            assert stat.S_IMODE(p.stat().st_mode) == want, p
    assert set(d.leaves) == {"node/n1", "worker/w1", "admin/alice"}
    assert d.leaves["worker/w1"] == certs.Issued(d.root / "worker-w1.pem", d.root / "worker-w1-key.pem")


def test_leaves_chain_to_the_ca_with_the_right_names_and_usages(tmp_path):
    d = certs.create_deployment(tmp_path, nodes=[certs.NodeSpec("n2", ("sched.example.com", "10.0.0.5", "[::1]"))],
                                workers=["w1"], admins=["alice"])
    ca = load(d.ca.cert)
    store = xv.Store([ca])
    node = load(d.leaves["node/n2"].cert)
    # cryptography's verifier is strict (RFC 5280 / CABF profile): it proves the chain and the
    # extensions are well-formed, not only the signature.
    for name in (x509.DNSName("sched.example.com"),
                 x509.IPAddress(ipaddress.ip_address("10.0.0.5"))):
        chain = xv.PolicyBuilder().store(store).build_server_verifier(name).verify(node, [])
        assert chain[-1] == ca
    with pytest.raises(xv.VerificationError):
        xv.PolicyBuilder().store(store).build_server_verifier(x509.DNSName("evil.example.com")).verify(node, [])
    for p in ("worker/w1", "admin/alice", "node/n2"):
        leaf = load(d.leaves[p].cert)
        leaf.verify_directly_issued_by(ca)
        verified = xv.PolicyBuilder().store(store).build_client_verifier().verify(leaf, [])
        assert x509.UniformResourceIdentifier(f"spiffe://schedd/{p}") in verified.subjects
        assert principal_of_cert(leaf) == p
        assert leaf.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == p
    usages = lambda c: set(c.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)  # noqa: E731
    srv, cli = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
    assert usages(node) == {srv, cli}
    assert usages(load(d.leaves["worker/w1"].cert)) == {cli}
    with pytest.raises(xv.VerificationError):                   # a worker cannot serve
        xv.PolicyBuilder().store(store).build_server_verifier(x509.DNSName("localhost")).verify(
            load(d.leaves["worker/w1"].cert), [])
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0


def test_refuses_to_overwrite_and_a_refused_call_writes_nothing(tmp_path):
    d = certs.create_deployment(tmp_path, nodes=["n1"])
    first_ca = load(d.ca.cert).serial_number
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(FileExistsError, match="ca.pem"):
        certs.create_deployment(tmp_path, nodes=["n1"], workers=["w9"])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before    # no w9, nothing new
    ca = certs.load_ca(tmp_path)
    with pytest.raises(FileExistsError, match="node-n1.pem"):
        certs.issue(ca, tmp_path, "node", "n1")
    again = certs.create_deployment(tmp_path, nodes=["n1"], overwrite=True)
    assert load(again.ca.cert).serial_number != first_ca
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_only_an_existing_leaf_blocks_a_new_deployment(tmp_path):
    (tmp_path / "worker-w1.pem").write_text("someone's cert")
    with pytest.raises(FileExistsError, match="worker-w1.pem"):
        certs.create_deployment(tmp_path, nodes=["n1"], workers=["w1"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["worker-w1.pem"]    # no CA made


@pytest.mark.parametrize("call, match", [
    (lambda d: certs.create_deployment(d, workers=["a/b"]), "name must be"),
    (lambda d: certs.create_deployment(d, workers=["w1", "w1"]), "listed twice"),
    (lambda d: certs.create_deployment(d, nodes=[certs.NodeSpec("n1", ("bad host!",))]), "not a DNS name"),
    (lambda d: certs.principal_uri("root", "x"), "kind must be"),
])
def test_bad_names_are_refused_before_anything_is_written(tmp_path, call, match):
    with pytest.raises(certs.CertError, match=match):
        call(tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_only_nodes_carry_host_names(dep):
    ca = certs.load_ca(dep.root)
    with pytest.raises(certs.CertError, match="only node certificates"):
        certs.build_leaf(ca, "worker", "w2", hosts=["localhost"])


@pytest.mark.parametrize("uri, principal", [
    ("spiffe://schedd/worker/w1", "worker/w1"),
    ("spiffe://schedd/admin/alice.b-c_d", "admin/alice.b-c_d"),
    ("spiffe://other/worker/w1", None),
    ("spiffe://schedd/root/w1", None),
    ("spiffe://schedd/worker/w1/extra", None),
    ("spiffe://schedd/worker/", None),
    ("https://schedd/worker/w1", None),
])
def test_principal_of_uri(uri, principal):
    assert certs.principal_of_uri(uri) == principal


def test_two_principals_in_one_certificate_name_nobody():
    assert certs.principal_of_uris(["spiffe://schedd/worker/w1", "spiffe://schedd/admin/a"]) is None
    assert certs.principal_of_uris(["spiffe://schedd/worker/w1", "spiffe://schedd/worker/w1",
                                    "https://example.com"]) == "worker/w1"


# --------------------------------------------------------------------------- loading TLS files

def test_server_material_refuses_files_that_cannot_serve(dep, tmp_path):
    good = node_files(dep)
    assert tls.load_server_material(good).serial == load(good.cert).serial_number
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    other_key = dep.leaves["worker/w1"].key
    ca = certs.load_ca(dep.root)
    old_cert, old_key = certs.build_leaf(ca, "node", "n1", hosts=["localhost"], days=1,
                                         now=dt.datetime.now(dt.UTC) - dt.timedelta(days=3))
    expired, expired_key = tmp_path / "expired.pem", tmp_path / "expired-key.pem"
    expired.write_bytes(certs.cert_pem(old_cert))
    expired_key.write_bytes(certs.key_pem(old_key))
    cases = {
        "is not a PEM certificate": tls.ServerTlsFiles(garbage, good.key),
        "is not the private key of": tls.ServerTlsFiles(good.cert, other_key),
        "cannot read the key": tls.ServerTlsFiles(good.cert, tmp_path / "missing.pem"),
        "cannot read the client CA": tls.ServerTlsFiles(good.cert, good.key, tmp_path / "nope.pem"),
        "not now": tls.ServerTlsFiles(expired, expired_key),
    }
    for match, files in cases.items():
        with pytest.raises(tls.TlsError, match=match):
            tls.load_server_material(files)
    with pytest.raises(tls.TlsError, match="needs its key"):
        tls.channel_credentials(dep.ca.cert, cert=dep.leaves["worker/w1"].cert)
    with pytest.raises(tls.TlsError, match="is not the private key of"):
        tls.channel_credentials(dep.ca.cert, dep.leaves["worker/w1"].cert, dep.leaves["admin/alice"].key)
    with pytest.raises(tls.TlsError, match="CA .* is not a PEM certificate"):
        tls.channel_credentials(garbage)


@pytest.mark.parametrize("auth, principal", [
    ({}, None),                                                            # plaintext
    ({"transport_security_type": [b"ssl"]}, None),                         # TLS, no client cert
    ({"transport_security_type": [b"ssl"], "peer_uri": [b"spiffe://schedd/worker/w1"]}, "worker/w1"),
    ({"transport_security_type": [b"ssl"],
      "x509_subject_alternative_name": [b"localhost", b"spiffe://schedd/node/n1"]}, "node/n1"),
    ({"transport_security_type": [b"ssl"], "peer_uri": [b"spiffe://schedd/worker/w1",
                                                        b"spiffe://schedd/admin/a"]}, None),
    ({"transport_security_type": [b"insecure"], "peer_uri": [b"spiffe://schedd/admin/a"]}, None),
])
def test_principal_from_auth_context(auth, principal):
    assert tls.principal_from_auth_context(auth) == principal


# --------------------------------------------------------------------------- real gRPC

@contextlib.asynccontextmanager
async def serving(reloader: tls.CertReloader):
    """A grpc.aio server on 127.0.0.1 with Whoami and health, TLS from `reloader`; yields the port."""
    async def whoami(request: bytes, context) -> bytes:
        return (tls.peer_principal(context) or "-").encode()

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "schedd.test.Whoami", {"Get": grpc.unary_unary_rpc_method_handler(whoami)}),))
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_secure_port("127.0.0.1:0", reloader.credentials())
    await server.start()
    try:
        yield port
    finally:
        await server.stop(None)


def client_creds(dep: certs.Deployment, who: str | None, *, ca: Path | None = None):
    if who is None:
        return tls.channel_credentials(ca or dep.ca.cert)
    leaf = dep.leaves[who]
    return tls.channel_credentials(ca or dep.ca.cert, leaf.cert, leaf.key)


async def whoami(channel: grpc.aio.Channel) -> str:
    return (await channel.unary_unary(WHOAMI)(b"", timeout=30)).decode()


async def served_serial(port: int, dep: certs.Deployment, who: str = "worker/w1") -> int:
    """The serial of the certificate the server presents to a NEW connection."""
    ctx = ssl.create_default_context(cafile=str(dep.ca.cert))
    ctx.load_cert_chain(str(dep.leaves[who].cert), str(dep.leaves[who].key))
    ctx.set_alpn_protocols(["h2"])
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost"), 30)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.transport.abort()     # no TLS close_notify exchange: asyncio waits 30 s for one


async def refused(channel: grpc.aio.Channel) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await whoami(channel)
    return err.value.code()


async def test_mtls_accepts_a_ca_signed_client_and_names_its_principal(dep):
    async with serving(tls.CertReloader(node_files(dep))) as port:
        for who in ("worker/w1", "admin/alice", "node/n1"):
            async with grpc.aio.secure_channel(f"127.0.0.1:{port}", client_creds(dep, who)) as ch:
                assert await whoami(ch) == who
                reply = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=30)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_mtls_refuses_a_client_without_a_certificate(dep):
    async with serving(tls.CertReloader(node_files(dep))) as port:
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", client_creds(dep, None)) as ch:
            assert await refused(ch) == grpc.StatusCode.UNAVAILABLE
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", client_creds(dep, "worker/w1")) as ch:
            assert await whoami(ch) == "worker/w1"               # the server is up: control


async def test_mtls_refuses_a_client_signed_by_another_ca(dep, other):
    async with serving(tls.CertReloader(node_files(dep))) as port:
        foreign = tls.channel_credentials(dep.ca.cert, other.leaves["worker/w1"].cert,
                                          other.leaves["worker/w1"].key)
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", foreign) as ch:
            assert await refused(ch) == grpc.StatusCode.UNAVAILABLE


async def test_a_client_that_does_not_trust_the_server_ca_refuses_it(dep, other):
    async with serving(tls.CertReloader(node_files(dep))) as port:
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}",
                                           client_creds(dep, "worker/w1", ca=other.ca.cert)) as ch:
            assert await refused(ch) == grpc.StatusCode.UNAVAILABLE


async def test_without_a_client_ca_the_server_asks_no_certificate_and_names_nobody(dep):
    async with serving(tls.CertReloader(node_files(dep, mtls=False))) as port:
        for who in (None, "worker/w1"):
            async with grpc.aio.secure_channel(f"127.0.0.1:{port}", client_creds(dep, who)) as ch:
                assert await whoami(ch) == "-"


async def test_reload_serves_the_new_certificate_to_new_connections_only_after_request(dep):
    reloader = tls.CertReloader(node_files(dep))
    first = load(dep.leaves["node/n1"].cert).serial_number
    async with serving(reloader) as port:
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", client_creds(dep, "worker/w1")) as old:
            assert await whoami(old) == "worker/w1"
            assert await served_serial(port, dep) == first
            ca = certs.load_ca(dep.root)
            certs.issue(ca, dep.root, "node", "n1", hosts=certs.LOCAL_HOSTS, overwrite=True)
            second = load(dep.leaves["node/n1"].cert).serial_number
            assert second != first
            assert await served_serial(port, dep) == first        # files alone change nothing
            reloader.request()
            assert await served_serial(port, dep) == second
            assert reloader.material.serial == second and reloader.last_error is None
            assert await whoami(old) == "worker/w1"               # the old connection still works
            async with grpc.aio.secure_channel(f"127.0.0.1:{port}", client_creds(dep, "admin/alice")) as new:
                assert await whoami(new) == "admin/alice"


async def test_a_broken_file_on_reload_keeps_the_old_certificate(dep, caplog):
    files = node_files(dep)
    reloader = tls.CertReloader(files)
    first = load(files.cert).serial_number
    async with serving(reloader) as port:
        good_cert = files.cert.read_bytes()
        certs.write_atomic(files.cert, b"half a certificate", certs.CERT_MODE, overwrite=True)
        with caplog.at_level(logging.WARNING, logger="schedd.security.tls"):
            reloader.request()
            assert await served_serial(port, dep) == first
        assert str(files.cert) in (reloader.last_error or "")
        assert any("TLS reload failed" in r.message and str(files.cert) in r.message for r in caplog.records)
        # A key that is not the certificate's: also kept out.
        certs.write_atomic(files.cert, good_cert, certs.CERT_MODE, overwrite=True)
        certs.write_atomic(files.key, dep.leaves["worker/w1"].key.read_bytes(), certs.KEY_MODE, overwrite=True)
        assert reloader.reload_now() is not None and "is not the private key" in reloader.last_error
        assert await served_serial(port, dep) == first
        # Fixed files: the next request serves them (the failure did not wedge the reloader).
        certs.issue(certs.load_ca(dep.root), dep.root, "node", "n1", hosts=certs.LOCAL_HOSTS, overwrite=True)
        reloader.request()
        assert await served_serial(port, dep) == load(files.cert).serial_number != first
        assert reloader.last_error is None
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", client_creds(dep, "worker/w1")) as ch:
            assert await whoami(ch) == "worker/w1"


async def test_one_reload_reaches_every_port_sharing_the_reloader(dep):
    reloader = tls.CertReloader(node_files(dep))
    async with serving(reloader) as a, serving(reloader) as b:
        certs.issue(certs.load_ca(dep.root), dep.root, "node", "n1", hosts=certs.LOCAL_HOSTS, overwrite=True)
        new = load(dep.leaves["node/n1"].cert).serial_number
        reloader.request()
        assert await served_serial(a, dep) == new
        assert await served_serial(b, dep) == new


async def test_a_real_sighup_through_the_loop_handler_reloads(dep):
    """The daemon's hook as docs/security-tls.md proposes it: SIGHUP -> reloader.request."""
    reloader = tls.CertReloader(node_files(dep))
    loop = asyncio.get_running_loop()
    hup = asyncio.Event()

    def on_hup() -> None:
        reloader.request()
        hup.set()

    loop.add_signal_handler(signal.SIGHUP, on_hup)
    try:
        async with serving(reloader) as port:
            certs.issue(certs.load_ca(dep.root), dep.root, "node", "n1", hosts=certs.LOCAL_HOSTS,
                        overwrite=True)
            new = load(dep.leaves["node/n1"].cert).serial_number
            os.kill(os.getpid(), signal.SIGHUP)
            await asyncio.wait_for(hup.wait(), 30)
            assert await served_serial(port, dep) == new
    finally:
        loop.remove_signal_handler(signal.SIGHUP)


# --------------------------------------------------------------------------- start-up rule

@pytest.mark.parametrize("address, loopback", [
    ("127.0.0.1:7070", True), ("127.8.9.1:7070", True), ("[::1]:7070", True),
    ("localhost:7070", True), ("[::ffff:127.0.0.1]:7070", True), ("unix:/run/schedd.sock", True),
    ("0.0.0.0:7070", False), ("[::]:7070", False), ("10.0.0.5:7070", False),
    ("sched.example.com:7070", False), ("127.0.0.1", False), ("", False),
])
def test_is_loopback_bind(address, loopback):
    assert is_loopback_bind(address) is loopback


@pytest.mark.parametrize("address, tls_on, insecure, allowed", [
    ("127.0.0.1:7070", True, False, True),
    ("127.0.0.1:7070", False, True, True),
    ("127.0.0.1:7070", False, False, False),
    ("[::1]:7070", False, True, True),
    ("[::1]:7070", False, False, False),
    ("0.0.0.0:7070", True, False, True),
    ("0.0.0.0:7070", False, True, False),
    ("0.0.0.0:7070", False, False, False),
    ("sched.example.com:7070", True, True, True),
    ("sched.example.com:7070", False, True, False),
    ("sched.example.com:7070", False, False, False),
])
def test_plaintext_rule(address, tls_on, insecure, allowed):
    why = plaintext_refusal({"grpc_address": address}, tls=tls_on, insecure=insecure)
    assert (why is None) is allowed, why
    if why is not None:
        assert f"grpc_address = {address!r}" in why
        assert "[tls] cert and key" in why
        if is_loopback_bind(address):
            assert "[tls] insecure = true" in why                 # the other way out on loopback


def test_plaintext_rule_names_the_exposed_address_among_several():
    why = plaintext_refusal({"grpc_address": "127.0.0.1:7070", "worker_address": "0.0.0.0:7071"},
                            tls=False, insecure=True)
    assert why is not None and "worker_address = '0.0.0.0:7071'" in why and "loopback" in why
    assert "127.0.0.1:7070" not in why
    assert plaintext_refusal(["127.0.0.1:1", "[::1]:2"], tls=False, insecure=True) is None
    assert "bind address = '10.1.1.1:3'" in plaintext_refusal(["10.1.1.1:3"], tls=False, insecure=False)
