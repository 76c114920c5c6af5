"""The cluster secret: weak secrets are refused with a message that says how to
make a good one, `schedd gen-secret` makes one that is accepted (and can write it to a 0600 file),
and the rotation docs/security.md documents (a rolling restart) works."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from schedd.runtime import config
from schedd.runtime.cluster import LocalCluster
from schedd.ports.fakes import wait_until

PEERS = [{"id": "n2", "raft_address": "127.0.0.1:7002", "grpc_address": "127.0.0.1:7071"},
         {"id": "n3", "raft_address": "127.0.0.1:7003", "grpc_address": "127.0.0.1:7072"}]


def node(secret: str, peers: bool = True) -> dict:
    return {"node_id": "n1", "data_dir": "/tmp/never-created", "raft_address": "127.0.0.1:7001",
            "grpc_address": "127.0.0.1:7070", "secret": secret, "peers": PEERS if peers else []}


def schedd(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "schedd", *args], capture_output=True, text=True,
                          timeout=60, **kw)


WEAK = ["a" * 16, "a" * 64, "0123456789abcdef0123", "abcdefghijklmnopqrstuvwxyz0123456789",
        "abcdefgh" * 6, "Passw0rd!" * 4, "passwordpasswordpassword", "1212121212121212121212121212"]


@pytest.mark.parametrize("weak", WEAK)
def test_low_entropy_secret_is_refused(weak, tmp_path):
    for peers in (True, False):                         # a single node's secret is checked too
        with pytest.raises(config.ConfigError) as e:
            config.from_dict(node(weak, peers))
        assert "schedd gen-secret" in str(e.value)
    # ...and `schedd serve` says so and exits 2, before anything starts.
    (tmp_path / "weak.secret").write_text(weak + "\n")
    (tmp_path / "n1.toml").write_text(
        'node_id = "n1"\ndata_dir = "data"\nraft_address = "127.0.0.1:7001"\n'
        'grpc_address = "127.0.0.1:7070"\nsecret_file = "weak.secret"\n')
    r = schedd("serve", "--config", str(tmp_path / "n1.toml"))
    assert r.returncode == 2 and "schedd gen-secret" in r.stderr, r.stderr
    assert not (tmp_path / "data").exists()


def test_gen_secret_makes_an_accepted_secret(tmp_path):
    r = schedd("gen-secret")
    assert r.returncode == 0, r.stderr
    printed = r.stdout.strip()
    assert config.from_dict(node(printed)).secret == printed
    # Every secret it makes is accepted (the check has no false alarms on its own output).
    made = {config.generate_secret() for _ in range(2000)}
    assert len(made) == 2000
    for s in made:
        config.from_dict(node(s))
    # --out writes a 0600 file whatever the umask, and never overwrites one.
    out = tmp_path / "cluster.secret"
    old = os.umask(0o022)
    try:
        r = schedd("gen-secret", "--out", str(out))
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    first = out.read_text()
    (tmp_path / "n1.toml").write_text(
        'node_id = "n1"\ndata_dir = "data"\nraft_address = "127.0.0.1:7001"\n'
        'grpc_address = "127.0.0.1:7070"\nsecret_file = "cluster.secret"\n')
    assert config.load(tmp_path / "n1.toml").secret == first.strip()
    r = schedd("gen-secret", "--out", str(out))
    assert r.returncode != 0 and "exists" in r.stderr and out.read_text() == first


@pytest.mark.integration
def test_secret_rotation_by_rolling_restart(cluster_factory):
    """The procedure of docs/security.md ("Rotating the secret"): give each node the new secret
    and restart it, one at a time."""
    from schedd_client import job_spec

    c: LocalCluster = cluster_factory(size=3)
    c.start()
    c.wait_leader(timeout=90)
    new = c.root / "new.secret"
    new.write_text(config.generate_secret() + "\n")
    new.chmod(0o600)
    with c.client(timeout=30) as client:
        client.put_job(job_spec("before-rotation", command="true"))
        for nid in c.nodes:
            cfg = c.nodes[nid].config
            cfg.write_text(cfg.read_text().replace(str(c.root / "cluster.secret"), str(new)))
            c.stop_node(nid)
            c.start_node(nid)
            c.wait_leader(timeout=90)
        client.put_job(job_spec("after-rotation", command="true"))

    def converged():
        infos = [c.node_info(n) for n in c.nodes]
        return (all(i is not None for i in infos) and len({i.applied_index for i in infos}) == 1
                and len({i.state_hash for i in infos}) == 1)
    wait_until(converged, timeout=60, what="all three nodes at the same index with the new secret")
