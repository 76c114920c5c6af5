"""`schedd restore` ran code from a crafted snapshot file. The pickled body's restricted
unpickler admitted `builtins.getattr` and public names under schedd.core, which reach `eval`
through `SchedulerState.__init__.__globals__`; the checksums were plain sha256 a forger recomputes.

Here the exact exploit is built and handed to `schedd restore` (its CLI entry point, in this
process, with this directory as the working directory the payload writes into): as an old
format-1 file with recomputed checksums, as a format-2 file whose MAC a forger could compute, and
signed with the right key (an insider: the body is still never unpickled). Then a truncated file
and one of another cluster. Every one is refused with one line, nothing runs, and the data dir
is left as it was."""

from __future__ import annotations

import hashlib
import json
import pickle
import struct
import zlib
from pathlib import Path

import pytest

from schedd.core.state import SchedulerState
from schedd.replication import backup
from schedd.runtime import cli
from schedd.security.backup_key import BackupKey
from schedd.versions import build_info
from schedd_client import snapshot_file as F
from tests.unit.test_backup import rich_state

SECRET = "Zt3kq9VxPw2LmN8rYb4HcJ6sFd1GaE5uTo7iKy0QeR-"
OTHER_SECRET = "Qm4Lr8TzWx1Nc6Vb3Hj9Ks5Df2Gp7Ay0Ue-Io3Pw8Rt"
PAYLOAD = "__import__('os').system('id > PWNED')"


class Call:
    """Pickles as `func(*args)` (a REDUCE); `func` may itself be a Call, so calls chain."""

    def __init__(self, func, *args) -> None:
        self.func, self.args = func, args

    def __call__(self):                  # pickle wants a callable; the file never calls this
        raise AssertionError

    def __reduce__(self):
        return (self.func, self.args)


def evil_pickle() -> bytes:
    """getattr(SchedulerState, '__init__') -> __globals__ -> get('__builtins__') -> get('eval')
    -> eval(PAYLOAD): every global it names (builtins.getattr, schedd.core.state.SchedulerState)
    was admitted by the old restricted unpickler."""
    init = Call(getattr, SchedulerState, "__init__")
    globals_ = Call(getattr, init, "__globals__")
    builtins = Call(Call(getattr, globals_, "get"), "__builtins__")
    eval_ = Call(Call(getattr, builtins, "get"), "eval")
    return pickle.dumps(Call(eval_, PAYLOAD), protocol=pickle.HIGHEST_PROTOCOL)


def meta_for(body: bytes) -> F.SnapshotMeta:
    b = build_info()
    return F.SnapshotMeta(index=7, term=1, digest="0" * 64, schedd_version=b.version,
                          snapshot_format=b.snapshot_format, tzdata=b.tzdb, croniter=b.croniter, created_ms=0,
                          body_encoding=backup.BODY_ENCODING, body_length=len(body),
                          body_sha256=hashlib.sha256(body).hexdigest())


def format_1_file(body: bytes) -> bytes:
    """What the old build wrote (and read): a sha256 where the MAC is, anyone can recompute it."""
    meta = F.SnapshotMeta(**{**json.loads(meta_for(body).to_json()), "body_encoding": "pickle5+zlib1"})
    raw = meta.to_json()
    head = struct.pack("<8sII", F.MAGIC, 1, len(raw)) + raw
    return head + hashlib.sha256(head).digest() + body


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new node's config, its empty data dir, and this directory as the working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "n1.toml").write_text(f'node_id = "n1"\ndata_dir = "{tmp_path / "data"}"\n'
                                      f'raft_address = "127.0.0.1:1"\ngrpc_address = "127.0.0.1:2"\n'
                                      f'secret = "{SECRET}"\n')
    return tmp_path


def restore(node: Path, data: bytes, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    (node / "evil.snap").write_bytes(data)
    code = cli.main(["restore", "--from", str(node / "evil.snap"), "--config", str(node / "n1.toml"), *extra])
    return code, capsys.readouterr().err


def assert_refused(node: Path, code: int, err: str, expect: str) -> None:
    assert code == 1 and expect in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (node / "PWNED").exists(), "the snapshot ran code"
    assert list((node / "data").iterdir()) == [], "a refused restore wrote to the data dir"


def test_the_old_exploit_file_is_refused_and_runs_nothing(node, capsys) -> None:
    body = zlib.compress(evil_pickle())
    code, err = restore(node, format_1_file(body), capsys)
    assert_refused(node, code, err, "written by an older build in a format that can run code")


def test_recomputed_checksums_do_not_make_a_file_authentic(node, capsys) -> None:
    body = zlib.compress(evil_pickle())
    forged = F.encode(meta_for(body), body, lambda head: hashlib.sha256(head).digest())
    code, err = restore(node, forged, capsys)
    assert_refused(node, code, err, "not signed with this cluster's backup key")


def test_a_file_signed_by_another_cluster_is_refused(node, capsys) -> None:
    st = rich_state()
    body = _body(st)
    theirs = F.encode(meta_for(body), body, BackupKey(OTHER_SECRET).sign)
    code, err = restore(node, theirs, capsys)
    assert_refused(node, code, err, "not signed with this cluster's backup key")


def test_an_insider_signed_pickle_is_still_never_unpickled(node, capsys) -> None:
    """The key holder can sign anything; the body is plain values, so a pickle is just bad JSON."""
    body = zlib.compress(evil_pickle())
    signed = F.encode(meta_for(body), body, BackupKey(SECRET).sign)
    code, err = restore(node, signed, capsys)
    assert_refused(node, code, err, "not a state image")


@pytest.mark.parametrize("cut", [10, 60, 200])
def test_a_truncated_file_is_refused_before_parsing(node, capsys, cut: int) -> None:
    body = _body(rich_state())
    data = F.encode(meta_for(body), body, BackupKey(SECRET).sign)
    code, err = restore(node, data[:cut] if cut < 100 else data[:-cut], capsys)
    assert_refused(node, code, err, "truncated at")


def test_a_flipped_byte_anywhere_is_refused(node, capsys) -> None:
    body = _body(rich_state())
    data = F.encode(meta_for(body), body, BackupKey(SECRET).sign)
    for where in (12, 40, len(data) - len(body) - 5, len(data) - len(body) // 2):
        bad = bytearray(data)
        bad[where] ^= 0x01
        code, err = restore(node, bytes(bad), capsys)
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        assert list((node / "data").iterdir()) == []


def test_a_genuine_file_restores_and_the_old_clusters_secret_can_be_named(node, capsys) -> None:
    """The same checks pass a file this cluster signed (the round trip the refusals are measured
    against), and `--secret-file` names the secret of the cluster that took it."""
    st = rich_state()
    body = _body(st)
    meta = F.SnapshotMeta(**{**json.loads(meta_for(body).to_json()), "index": st.last_index,
                             "digest": st.state_digest()})
    theirs = F.encode(meta, body, BackupKey(OTHER_SECRET).sign)
    (node / "old.secret").write_text(OTHER_SECRET + "\n")
    code, err = restore(node, theirs, capsys, "--secret-file", str(node / "old.secret"), "--force")
    assert code == 0, err
    assert (node / "data" / "raft.dump").exists()


def _body(st: SchedulerState) -> bytes:
    import io
    out = io.BytesIO()
    backup.encode_body(st, out)
    return out.getvalue()
