"""`schedd certs init|issue`: the files a deployment needs, private keys 0600, node host names
as SANs, nothing overwritten without --force, and errors as one line with exit 1."""

from __future__ import annotations

import stat

from cryptography import x509

from schedd.runtime.cli import main
from tests.support.certs import principal_of_cert


def _cert(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sans(path) -> tuple[list[str], list[str]]:
    san = _cert(path).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return san.get_values_for_type(x509.DNSName), [str(i) for i in san.get_values_for_type(x509.IPAddress)]


def test_init_then_issue(tmp_path, capsys):
    d = tmp_path / "tls"
    assert main(["certs", "init", "--dir", str(d), "--nodes", "n1,n2", "--hosts", "n1=a.example,10.0.0.1",
                 "--hosts", "lb.example", "--workers", "w1", "--admins", "alice"]) == 0
    names = sorted(p.name for p in d.iterdir())
    assert names == sorted(["ca.pem", "ca-key.pem", "node-n1.pem", "node-n1-key.pem", "node-n2.pem",
                            "node-n2-key.pem", "worker-w1.pem", "worker-w1-key.pem",
                            "admin-alice.pem", "admin-alice-key.pem"])
    for p in d.iterdir():
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o600 if p.name.endswith("-key.pem") else 0o644), p.name
    assert _sans(d / "node-n1.pem") == (["a.example", "lb.example"], ["10.0.0.1"])
    assert _sans(d / "node-n2.pem") == (["lb.example"], [])
    assert principal_of_cert(_cert(d / "admin-alice.pem")) == "admin/alice"
    assert "move" in capsys.readouterr().err                       # ca-key.pem belongs offline

    before = (d / "node-n1.pem").read_bytes()
    assert main(["certs", "issue", "--dir", str(d), "--node", "n1"]) == 1
    assert "not overwriting" in capsys.readouterr().err and (d / "node-n1.pem").read_bytes() == before
    assert main(["certs", "issue", "--dir", str(d), "--node", "n1", "--force", "--days", "30"]) == 0
    assert (d / "node-n1.pem").read_bytes() != before
    assert _sans(d / "node-n1.pem") == (["localhost"], ["127.0.0.1", "::1"])   # no --hosts: local
    assert main(["certs", "issue", "--dir", str(d), "--worker", "w2"]) == 0
    assert principal_of_cert(_cert(d / "worker-w2.pem")) == "worker/w2"


def test_errors_are_one_line_and_write_nothing(tmp_path, capsys):
    d = tmp_path / "tls"
    assert main(["certs", "init", "--dir", str(d), "--nodes", "n1", "--hosts", "n9=x.example"]) == 1
    assert "names node 'n9', which --nodes does not list" in capsys.readouterr().err
    assert main(["certs", "init", "--dir", str(d), "--nodes", "n1", "--workers", "bad name"]) == 1
    assert "worker name must be" in capsys.readouterr().err
    assert not d.exists() or not any(d.iterdir())
    assert main(["certs", "issue", "--dir", str(d), "--admin", "bob"]) == 1
    assert "cannot load the CA from" in capsys.readouterr().err
