"""Backup and restore, below the processes: the snapshot file format and every way it
is refused (a MAC under the cluster's backup key), the image body (round trip, a pickle
refused), the forked image being one applied index, the seeded data dir, and the restore checks
(versions, cluster secret). The forged-snapshot exploit end to end: tests/security/test_backup_forgery.py."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import pickle
import stat
import threading

import pytest

from schedd.core import acl as A
from schedd.core import commands as C
from schedd.core.snapshot import SnapshotImage
from schedd.replication import backup
from schedd.replication import journal as J
from schedd.runtime import restore as R
from schedd.security.backup_key import BackupKey
from schedd.security.secrets import EnvSealer
from schedd.versions import build_info
from schedd_client import snapshot_file as F
from tests.support.state import DagHarness, dag

SECRET = "Zt3kq9VxPw2LmN8rYb4HcJ6sFd1GaE5uTo7iKy0QeR-"
KEY = BackupKey(SECRET)


def rich_state():
    """Jobs, executions, a DAG run, a quota, an ACL token and audited entries."""
    h = DagHarness()
    h.put(dag())
    run = h.run()
    h.finish(run, "extract")
    sealer = EnvSealer(SECRET)
    spec = {"name": "sec", "schedule": "@every 10s", "handler": {"shell": {"command": "true"}},
            "env_secret": {"TOKEN": {"v": 1, "ct": sealer.seal("sec", "TOKEN", "hush")}}}
    from schedd.core.model import validate_spec
    assert h.apply(C.PUT, spec=validate_spec(spec).text(), audit={"principal": "alice"}).ok
    assert h.apply(C.QUOTA, key="team:ops", limit=3).ok
    minted = A.mint_token(os.urandom(A.TOKEN_RANDOM_BYTES))
    assert h.apply(C.ACL_BOOTSTRAP, token={"accessor": minted.accessor, "secret_hash": minted.secret_hash,
                                           "policies": ["management"]}).ok
    return h.state


def meta_for(body: bytes, **kw) -> F.SnapshotMeta:
    import hashlib
    base = dict(index=42, term=3, digest="d" * 64, schedd_version="1.0", snapshot_format=4, tzdata="2025a",
                croniter="2.0", created_ms=1_800_000_000_000, body_encoding=backup.BODY_ENCODING,
                body_length=len(body), body_sha256=hashlib.sha256(body).hexdigest())
    return F.SnapshotMeta(**{**base, **kw})


BODY = bytes(range(256)) * 40


def test_file_round_trip() -> None:
    meta = meta_for(BODY)
    assert F.decode(F.encode(meta, BODY, KEY.sign), KEY.verify) == (meta, BODY)


@pytest.mark.parametrize("where,expect", [
    (0, "bad magic"), (8, "unknown snapshot file format"), (20, "not signed with this cluster's backup key"),
    (-len(BODY) - 1, "not signed with this cluster's backup key"), (-1, "body checksum mismatch"),
    (-len(BODY) // 2, "body checksum mismatch")])
def test_every_flipped_byte_is_refused(where: int, expect: str) -> None:
    data = bytearray(F.encode(meta_for(BODY), BODY, KEY.sign))
    data[where] ^= 0x40
    with pytest.raises(F.SnapshotFileError, match=expect):
        F.decode(bytes(data), KEY.verify)


def test_any_single_flipped_byte_is_refused() -> None:
    data = F.encode(meta_for(BODY[:64]), BODY[:64], KEY.sign)
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x01
        with pytest.raises(F.SnapshotFileError):
            F.decode(bytes(bad), KEY.verify)


def test_truncated_file_names_where() -> None:
    data = F.encode(meta_for(BODY), BODY, KEY.sign)
    with pytest.raises(F.SnapshotFileError, match=f"truncated at {len(data) - 10} of {len(data)} bytes"):
        F.decode(data[:-10], KEY.verify)
    with pytest.raises(F.SnapshotFileError, match="truncated at 5 of 16 bytes"):
        F.decode(data[:5], KEY.verify)
    with pytest.raises(F.SnapshotFileError, match="truncated at 30 of"):
        F.decode(data[:30], KEY.verify)
    with pytest.raises(F.SnapshotFileError, match="trailing bytes"):
        F.decode(data + b"x", KEY.verify)


def test_foreign_file_and_unknown_version() -> None:
    with pytest.raises(F.SnapshotFileError, match="not a schedd snapshot file"):
        F.decode(b"\x1f\x8b\x08\x00 a gzip file, say" * 3, KEY.verify)
    data = bytearray(F.encode(meta_for(BODY), BODY, KEY.sign))
    data[8:12] = (F.FILE_FORMAT + 1).to_bytes(4, "little")
    with pytest.raises(F.SnapshotFileError, match=f"unknown snapshot file format {F.FILE_FORMAT + 1}"):
        F.decode(bytes(data), KEY.verify)


def test_a_file_of_another_cluster_or_a_recomputed_checksum_is_refused() -> None:
    data = F.encode(meta_for(BODY), BODY, BackupKey(SECRET[::-1]).sign)      # another cluster's secret
    with pytest.raises(F.SnapshotFileError, match="not signed with this cluster's backup key.*--secret-file"):
        F.decode(data, KEY.verify)
    assert F.decode(data, BackupKey(SECRET[::-1]).verify)[1] == BODY       # ... which its own key opens
    forged = F.encode(meta_for(b"other body"), b"other body", lambda head: hashlib.sha256(head).digest())
    with pytest.raises(F.SnapshotFileError, match="not signed"):
        F.decode(forged, KEY.verify)


def test_a_format_1_file_is_refused_as_one_that_can_run_code() -> None:
    """Format 1: a sha256 where the MAC is, and a pickled body. Never parsed, whatever it holds."""
    data = bytearray(F.encode(meta_for(BODY), BODY, KEY.sign))
    data[8:12] = (1).to_bytes(4, "little")
    with pytest.raises(F.SnapshotFileError, match="written by an older build in a format that can run code") as e:
        F.decode(bytes(data), KEY.verify)
    assert "\n" not in str(e.value)


def test_body_round_trip_keeps_every_table_and_the_digest() -> None:
    st = rich_state()
    out = io.BytesIO()
    info = backup.encode_body(st, out)
    assert info.length == len(out.getvalue()) and info.index == st.last_index
    back = backup.state_from_body(out.getvalue())
    assert back.state_digest() == st.state_digest() == info.digest
    for table in ("jobs", "execs", "dags", "dag_runs", "quotas"):
        assert getattr(back, table) == getattr(st, table), table
    assert back.acl.tokens.keys() == st.acl.tokens.keys() and len(back.audit.records) == len(st.audit.records) > 0
    assert (back.clock_ms, back.epoch, back.log_hash) == (st.clock_ms, st.epoch, st.log_hash)


class _Evil:
    def __init__(self, path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_pickled_body_is_refused_never_run(tmp_path) -> None:
    import zlib
    body = zlib.compress(pickle.dumps(_Evil(tmp_path / "PWNED")))
    with pytest.raises(backup.BodyError, match="not a state image: not a plain state image"):
        backup.decode_body(body)
    assert not (tmp_path / "PWNED").exists()
    with pytest.raises(backup.BodyError, match="does not decompress"):
        backup.decode_body(b"not zlib")


def test_forked_image_is_one_applied_index_and_private(tmp_path) -> None:
    st = rich_state()
    lock = threading.RLock()
    want = (st.last_index, st.state_digest())
    pending = backup.fork_image(st, lock, str(tmp_path / "img.tmp"))
    # The parent moves on at once (an entry applied after the fork is not in the image).
    with lock:
        st.apply(C.encode(C.QUOTA, rid="", now=st.clock_ms, term=1, key="team:x", limit=1), st.last_index + 1)
    info = pending.wait()
    assert (info.index, info.digest) == want
    body = (tmp_path / "img.tmp").read_bytes()
    assert stat.S_IMODE(os.stat(tmp_path / "img.tmp").st_mode) == 0o600
    assert backup.state_from_body(body).state_digest() == want[1]
    pending.discard()
    assert not (tmp_path / "img.tmp").exists()


def test_seeded_data_dir_is_a_compacted_node(tmp_path) -> None:
    st = rich_state()
    d = tmp_path / "n1"
    J.seed_data_dir(str(d), SnapshotImage(st), index=st.last_index, term=7, cluster=["127.0.0.1:1", "127.0.0.1:2"])
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    j = J.DurableJournal(str(d / "raft.journal"), dump_path=str(d / "raft.dump"))
    assert [(e[1], e[2]) for e in j[:]] == [(st.last_index - 1, 7), (st.last_index, 7)]
    assert (j.getCurrentTerm(), j.getVotedForNodeId(), j.getRaftCommitIndex()) == (7, None, st.last_index)
    j._destroy()
    import gzip
    with gzip.open(d / "raft.dump") as g:
        data, last, prev, nodes = pickle.load(g)
    assert (last[1:], prev[1:]) == ((st.last_index, 7), (st.last_index - 1, 7))
    assert {n.id for n in nodes} == {"127.0.0.1:1", "127.0.0.1:2"}
    from schedd.core.state import SchedulerState
    back = SchedulerState()
    back.restore(data[1])
    assert back.state_digest() == st.state_digest()
    with pytest.raises(J.SeedError, match="not empty"):
        J.seed_data_dir(str(d), SnapshotImage(st), index=st.last_index, term=7, cluster=["127.0.0.1:1"])


def test_restore_refuses_other_zone_data_unless_forced() -> None:
    ours = build_info()
    meta = meta_for(BODY, tzdata=ours.tzdb, croniter=ours.croniter, snapshot_format=ours.snapshot_format)
    assert R.check_versions(meta, force=False) == []
    other = dataclasses.replace(meta, tzdata="1999z")
    with pytest.raises(R.RestoreError, match="tzdata 1999z.*could be computed differently.*--force"):
        R.check_versions(other, force=False)
    assert "1999z" in R.check_versions(other, force=True)[0]
    with pytest.raises(R.RestoreError, match="snapshot format 99 is not readable"):
        R.check_versions(dataclasses.replace(meta, snapshot_format=99), force=True)


def test_restore_checks_the_cluster_secret_opens_stored_secrets() -> None:
    st = rich_state()
    assert R.check_secret(st, SECRET, force=False) == []
    with pytest.raises(R.RestoreError, match="job 'sec'.*do not open with the new cluster's secret"):
        R.check_secret(st, SECRET[::-1], force=False)
    with pytest.raises(R.RestoreError, match="do not open"):
        R.check_secret(st, "", force=False)
    assert R.check_secret(st, SECRET[::-1], force=True)


def _stream(meta: F.SnapshotMeta, body: bytes, signed: bool = True):
    from schedd_proto import backup_pb2 as bpb
    header = bpb.SnapshotHeader(**{f.name: getattr(meta, f.name) for f in dataclasses.fields(meta)})
    if signed:
        header.file_header = R.header_sealer(SECRET)(header)
    yield bpb.SnapshotChunk(header=header)
    for i in range(0, len(body), 1000):
        yield bpb.SnapshotChunk(data=body[i:i + 1000])


def test_schedctl_writes_the_stream_atomically_and_private(tmp_path) -> None:
    from schedd_client.backup import write_stream
    meta = meta_for(BODY)
    out = tmp_path / "b.snap"
    assert write_stream(_stream(meta, BODY), str(out)) == meta
    assert F.read_path(str(out), KEY.verify) == (meta, BODY)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    with pytest.raises(F.SnapshotFileError, match="the stream carried 9999 bytes"):
        write_stream(_stream(meta, BODY[:9999]), str(tmp_path / "short.snap"))
    with pytest.raises(F.SnapshotFileError, match="the stream carried"):
        write_stream(_stream(meta, BODY[::-1]), str(out))         # an existing file is kept as it was
    with pytest.raises(F.SnapshotFileError, match="did not sign the snapshot"):
        write_stream(_stream(meta, BODY, signed=False), str(out))  # an older server's stream
    assert F.read_path(str(out), KEY.verify) == (meta, BODY)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.snap"]     # no file, no temp file left


def test_a_restore_warning_says_force_only_when_force_turned_a_refusal_into_it() -> None:
    """The dropped member table is a warning of every restore; it was printed
    "warning (--force)" although no --force was given."""
    dropped = R.Note("the old cluster's member table (n1) is dropped")
    assert dropped.line() == "schedd restore: warning: the old cluster's member table (n1) is dropped"
    assert R.Note("tzdata differs", forced=True).line() == "schedd restore: warning (--force): tzdata differs"
