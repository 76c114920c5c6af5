"""A certificate kind for a team member. Under `[tls] client_ca` every caller
needs a client certificate, and `schedd certs issue` made only node, worker and admin ones, so
teams were handed the admin certificate: the management identity whenever no token is sent. A
`user` certificate gets a caller past mTLS and grants nothing: with no token the caller is
anonymous (refused, with what to do, unless an anonymous policy says otherwise); with its team's
token, the token decides. No certificate grants more than its kind says."""

from __future__ import annotations

import types

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from schedd.api import auth
from schedd.core import acl as A
from schedd.core import commands as C
from schedd.runtime.cli import main
from schedd.security import certs
from schedd_proto import scheduler_pb2 as pb
from tests.support.cluster import schedctl
from tests.support.certs import principal_of_cert
from tests.unit.test_access import Log, _interceptor, _with_team_token

PUT = "/schedd.v1.Scheduler/PutJob"
LIST = "/schedd.v1.Scheduler/ListJobs"


def _peer(kind: str, name: str) -> types.SimpleNamespace:
    """A servicer context whose TLS peer presented `kind/name`'s certificate."""
    uri = certs.principal_uri(kind, name).encode()
    return types.SimpleNamespace(auth_context=lambda: {"transport_security_type": [b"ssl"], "peer_uri": [uri]})


def test_certs_issue_user_makes_a_client_only_certificate(tmp_path, capsys):
    d = tmp_path / "tls"
    assert main(["certs", "init", "--dir", str(d), "--nodes", "n1", "--users", "bob"]) == 0
    assert main(["certs", "issue", "--dir", str(d), "user", "alice"]) == 0
    assert main(["certs", "issue", "--dir", str(d), "--user", "carol"]) == 0
    for name in ("alice", "bob", "carol"):
        cert = x509.load_pem_x509_certificate((d / f"user-{name}.pem").read_bytes())
        assert principal_of_cert(cert) == f"user/{name}"
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    capsys.readouterr()
    assert main(["certs", "issue", "--dir", str(d), "user", "dave", "--hosts", "x.example"]) == 1
    assert "only node certificates carry host names" in capsys.readouterr().err
    assert main(["certs", "issue", "--dir", str(d), "root", "eve"]) == 1
    assert "kind must be one of node, worker, admin, user" in capsys.readouterr().err
    assert main(["certs", "issue", "--dir", str(d), "user"]) == 1
    assert "name the user" in capsys.readouterr().err
    assert main(["certs", "issue", "--dir", str(d), "user", "x", "--admin", "y"]) == 1
    assert "name one certificate" in capsys.readouterr().err
    assert not (d / "admin-y.pem").exists() and not (d / "user-x.pem").exists()


def test_a_user_certificate_holds_nothing_and_its_token_decides() -> None:
    log = Log()
    bearer = _with_team_token(log, "a")
    audited: list[dict[str, str]] = []
    ic = _interceptor(log, queue=types.SimpleNamespace(add=audited.append))
    put_a = pb.PutJobRequest(job=pb.JobSpec(name="j", team="a"))
    put_b = pb.PutJobRequest(job=pb.JobSpec(name="j", team="b"))
    alice = _peer("user", "alice")
    # no token: refused, saying what to do, and the login failure names the certificate
    with pytest.raises(auth.Denied) as e:
        ic.check(PUT, {}, None, put_a, "ipv4:127.0.0.1:9", alice)
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert "user certificate (user/alice) holds no rights" in e.value.message and "token" in e.value.message
    assert "user/alice without a token" in audited[-1]["detail"]
    # with the team's token: the token's rights, no more
    md = {"authorization": f"Bearer {bearer}"}
    assert ic.check(PUT, md, None, put_a, "p", alice).name == f"token:{bearer.partition('.')[0]}"
    with pytest.raises(auth.Denied) as e:
        ic.check(PUT, md, None, put_b, "p", alice)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    # a node forwarding a user certificate's call makes it no more than anonymous
    with pytest.raises(auth.Denied) as e:
        ic.check(PUT, {}, ("n2", "cert:user/alice", "p"), put_a, "p")
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    # with an anonymous policy, a user certificate without a token gets exactly that
    log.apply(C.ACL_POLICY_PUT, policy={"name": "anon", "rules": {"team:a": ["read"]}})
    log.apply(C.ACL_ANONYMOUS_SET, policy="anon")
    info = ic.check(LIST, {}, None, pb.ListJobsRequest(), "p", alice)
    assert info.name == A.ANONYMOUS and info.principal is not None
    assert A.allowed(info.principal, "read", "team:a") and not A.allowed(info.principal, "write", "team:a")
    with pytest.raises(auth.Denied) as e:
        ic.check(PUT, {}, None, put_a, "p", alice)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    # each kind grants what it says: admin the management policy, the others nothing
    assert A.allowed(ic.check(PUT, {}, None, put_b, "p", _peer("admin", "root")).principal, "acl", "cluster")
    for kind in ("node", "worker"):
        with pytest.raises(auth.Denied) as e:
            ic.check(PUT, {}, None, put_a, "p", _peer(kind, "x"))
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_team_onboarding_with_a_user_certificate_and_a_team_token(cluster_factory, tmp_path):
    """The onboarding of docs/security.md ("Access control") on a real mTLS cluster: the admin
    makes a team policy and token, `schedd certs issue user alice`; alice's context (her
    certificate, the team token) works on her team only, and her certificate alone does nothing."""
    c = cluster_factory(size=1)
    c.start()
    c.wait_leader(timeout=90)
    assert schedctl(c, "acl", "policy", "create", "payments", "--rule",
                    "team:payments=read,write,trigger").returncode == 0
    made = schedctl(c, "-o", "json", "acl", "token", "create", "--policy", "payments")
    token = __import__("json").loads(made.stdout)["secret"]
    assert main(["certs", "issue", "--dir", str(c.tls_dir), "user", "alice"]) == 0
    leaf = certs.leaf_paths(c.tls_dir, "user", "alice")
    ca = certs.ca_paths(c.tls_dir).cert

    def context(name: str, with_token: bool):
        path = tmp_path / name
        text = (f'cluster = ["{c.nodes["n1"].grpc}"]\nca = "{ca}"\ncert = "{leaf.cert}"\n'
                f'key = "{leaf.key}"\n') + (f'token = "{token}"\n' if with_token else "")
        path.write_text(text)
        path.chmod(0o600)
        return path

    team = context("alice.toml", True)
    ok = schedctl(team, "job", "create", "pay", "--team", "payments", "--schedule", "", "--command", "true")
    assert ok.returncode == 0, ok.stderr
    other = schedctl(team, "job", "create", "x", "--team", "ops", "--schedule", "", "--command", "true",
                     check=False)
    assert other.returncode != 0 and "missing capability 'write' on team:ops" in other.stderr
    bare = schedctl(context("bare.toml", False), "job", "list", check=False)
    assert bare.returncode != 0 and "holds no rights" in bare.stderr, bare.stderr
