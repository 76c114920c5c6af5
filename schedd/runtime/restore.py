"""`schedd restore --from FILE --data-dir DIR --node-id ID --config FILE`: seed one node of a NEW
cluster from a snapshot file (like `etcdutl snapshot restore`). Run it for every node of the new
cluster with the same file, then start the nodes.

What is checked, in order, each refusal one line naming what is wrong, and nothing is written
before all of it passes:
1. the file: magic and format (format 1, a pickled body, is refused: it can run code), the
   header's MAC under the backup key (schedd.security.backup_key, derived from the cluster
   secret: the new config's, or `--secret-file` naming the old cluster's) before the header is
   parsed, then the body's length and sha256 (schedd_client.snapshot_file) before the body is;
2. the versions: the zone database and croniter must be the ones the file was taken with, or
   the restored cluster could compute other instants than the old one did for the same jobs
   (`--force` accepts it); a snapshot format this build cannot read is refused outright;
3. the image: it decodes, the audit chain verifies (on load), and the state digest recomputed
   here equals the one in the header;
4. the cluster secret: env_secret values are sealed under it, so one stored value must open with
   the new config's secret (`--force` accepts a secret that does not open them: those jobs then
   fail to start until they are written again);
5. the data dir is new or empty.

The membership of the new cluster comes from `--config` (its [[peers]] and this node), never
from the file: the new cluster's log starts fresh at the image's index (schedd.replication.journal
`seed_data_dir`).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from collections.abc import Callable
from typing import TYPE_CHECKING

from schedd.runtime import config as config_mod
from schedd_client import snapshot_file

if TYPE_CHECKING:                 # the rest is imported when a restore runs, not for `schedd --help`
    from schedd.core.state import SchedulerState
    from schedd_proto import backup_pb2 as bpb


class RestoreError(Exception):
    """Why a restore is refused (one line)."""


@dataclass(slots=True)
class Restored:
    meta: snapshot_file.SnapshotMeta
    jobs: int
    executions: int
    seconds: float
    history_rows: int = 0


def header_sealer(secret: str) -> Callable[[bpb.SnapshotHeader], bytes] | None:
    """How a leader signs a backup's file header (BackupService); None without a cluster secret
    (such a node refuses to take backups: nothing could verify them)."""
    if not secret:
        return None
    from schedd.security.backup_key import BackupKey
    from schedd_client.backup import meta_of
    key = BackupKey(secret)
    return lambda header: snapshot_file.encode_header(meta_of(header), key.sign)


def backup_key_secret(cfg: config_mod.NodeConfig, secret_file: str | None) -> str:
    """The secret the file's MAC is checked under: `--secret-file`'s, else the new config's."""
    if not secret_file:
        if not cfg.secret:
            raise RestoreError("a backup is verified with a key derived from the cluster secret, and the "
                               "config has none: set secret_file, or pass the old cluster's with --secret-file")
        return cfg.secret
    try:
        with open(secret_file, encoding="utf-8") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise RestoreError(f"cannot read --secret-file {secret_file}: {getattr(e, 'strerror', None) or e}") from None


@dataclass(slots=True, frozen=True)
class Note:
    """A warning of a restore. `forced`: a refusal that --force turned into this warning; the
    label says so only then (an operator who never passed --force must not read that they did)."""

    text: str
    forced: bool = False

    def line(self) -> str:
        return f"schedd restore: warning{' (--force)' if self.forced else ''}: {self.text}"


def check_versions(meta: snapshot_file.SnapshotMeta, *, force: bool) -> list[str]:
    """Refusals for what this build cannot or should not restore; returns the warnings `force`
    turned from refusals into notes."""
    from schedd.replication import backup
    from schedd.versions import build_info
    info = build_info()
    if meta.snapshot_format not in info.readable_snapshot_formats:
        raise RestoreError(f"snapshot format {meta.snapshot_format} is not readable by this build "
                           f"(reads {', '.join(map(str, info.readable_snapshot_formats))})")
    if meta.body_encoding != backup.BODY_ENCODING:
        raise RestoreError(f"unknown body encoding {meta.body_encoding!r} (this build reads "
                           f"{backup.BODY_ENCODING!r})")
    theirs, ours = (meta.tzdata, meta.croniter), info.schedule_deps()
    if theirs == ours:
        return []
    why = (f"the snapshot was taken with tzdata {meta.tzdata} and croniter {meta.croniter}, this "
           f"build has tzdata {info.tzdb} and croniter {info.croniter}: firing instants could be "
           "computed differently (a zone rule or a cron edge case) than the old cluster did")
    if not force:
        raise RestoreError(why + "; install the same versions, or pass --force to accept it")
    return [why]


def check_secret(state: SchedulerState, secret: str, *, force: bool) -> list[str]:
    """The stored env_secret values of one job must open with `secret`: they are sealed under the
    cluster secret, so a new cluster with another one could not hand them to workers."""
    from schedd.security.secrets import EnvSealer, SecretError, open_secrets
    job = next((j for j in state.jobs.values() if j.spec.env_secret), None)
    if job is None:
        return []
    try:
        open_secrets(job.spec.env_secret, EnvSealer(secret) if secret else None, job.name)
        return []
    except SecretError:
        why = (f"the env_secret values (e.g. of job {job.name!r}) do not open with the new cluster's "
               "secret: they are sealed under the old cluster's secret (its secret_file)")
    if not force:
        raise RestoreError(why + "; use the same secret, or pass --force (those jobs then fail to "
                           "start until their secrets are written again)")
    return [why]


HISTORY_ENCODING = "schedd-history-sqlite-1"      # schedd.api.backup_service: a SaveHistory body


def read_history(path: str, verify: Callable[[bytes, bytes], bool], index: int) -> tuple[bytes, str]:
    """The history file saved with the snapshot (schedctl cluster snapshot save): its MAC and
    checksum as for the snapshot, its kind, and an index at or after the snapshot's."""
    try:
        meta, body = snapshot_file.read_path(path, verify)
    except OSError as e:
        raise RestoreError(f"cannot read {path}: {e.strerror}") from None
    except snapshot_file.SnapshotFileError as e:
        raise RestoreError(f"{path}: {e}") from None
    if meta.body_encoding != HISTORY_ENCODING:
        raise RestoreError(f"{path}: not a history file (it holds {meta.body_encoding!r})")
    if meta.index < index:
        raise RestoreError(f"{path}: the history is as of index {meta.index}, before the snapshot's {index}: "
                           "it belongs to an older snapshot (save both again, or restore --without-history)")
    return body, meta.digest


def seed_history(data_dir: str, body: bytes, digest: str, index: int) -> int:
    """Write the history file's store into the new node's data dir, cut at the snapshot's index
    (the new cluster's later entries are its own); returns the rows kept. No body: an empty
    store that holds entry `index` (restored without history: nothing to copy from a peer)."""
    import os

    from schedd.history import HistoryStore
    from schedd.runtime.history import FILE
    final = os.path.join(data_dir, FILE)
    tmp = final + ".restoring"
    with open(tmp, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(body)
    if body and f"{HistoryStore.file_digest(tmp):016x}" != digest:
        os.unlink(tmp)
        raise RestoreError("the history file's digest does not match its rows: it is not what was saved")
    store = HistoryStore(tmp, writer_thread=False)
    try:
        store.truncate_after(index)
        rows = store.count()
    finally:
        store.close()
    for suffix in ("-wal", "-shm"):
        if os.path.exists(tmp + suffix):
            os.unlink(tmp + suffix)
    os.replace(tmp, final)
    return rows


def restore(path: str, cfg: config_mod.NodeConfig, *, force: bool = False,
            secret_file: str | None = None, history: str | None = None) -> tuple[Restored, list[Note]]:
    """`history`: the history file saved with the snapshot (None: none; the restored cluster
    starts with an empty history)."""
    from schedd.core.snapshot import SnapshotImage
    from schedd.replication import backup
    from schedd.replication.journal import SeedError, seed_data_dir
    from schedd.security.backup_key import BackupKey
    started = time.monotonic()
    key = BackupKey(backup_key_secret(cfg, secret_file))
    try:
        meta, body = snapshot_file.read_path(path, key.verify)
    except OSError as e:
        raise RestoreError(f"cannot read {path}: {e.strerror}") from None
    except snapshot_file.SnapshotFileError as e:
        raise RestoreError(f"{path}: {e}") from None
    notes = [Note(why, forced=True) for why in check_versions(meta, force=force)]
    history_body, history_digest = read_history(history, key.verify, meta.index) if history else (b"", "")
    try:
        state = backup.state_from_body(body)
    except ValueError as e:              # BodyError, or restore refusing the image (a bad audit chain)
        raise RestoreError(f"{path}: {e}") from None
    del body
    if state.last_index != meta.index:
        raise RestoreError(f"{path}: the image is at index {state.last_index}, the header says {meta.index}")
    digest = state.state_digest()
    if digest != meta.digest:
        raise RestoreError(f"{path}: digest mismatch after restore (state {digest[:16]}..., header "
                           f"{meta.digest[:16]}...): the file is not what was saved")
    notes += [Note(why, forced=True) for why in check_secret(state, cfg.secret, force=force)]
    if state.members:
        # The old cluster's member table names its nodes and addresses: the new cluster's
        # membership is its config (the Raft configuration seeded below), never the old one.
        notes.append(Note(f"the old cluster's member table ({', '.join(sorted(state.members))}) is dropped: "
                          f"the new cluster's members are the config's"))
        state.drop_member_table()
    try:
        seed_data_dir(str(cfg.data_dir), SnapshotImage(state), index=meta.index, term=meta.term,
                      cluster=[m.raft_address for m in cfg.members])
    except (SeedError, OSError) as e:
        raise RestoreError(str(e)) from None
    rows = seed_history(str(cfg.data_dir), history_body, history_digest, meta.index)
    if not history and state.archived:
        notes.append(Note("no history file: the finished runs that had left the replicated state are not "
                          "restored (each job's newest is)"))
    return Restored(meta, len(state.jobs), len(state.execs), time.monotonic() - started, rows), notes


def _beside(snapshot: str) -> str | None:
    """FILE.history when `schedctl cluster snapshot save FILE` wrote one beside the snapshot."""
    import os
    path = snapshot + ".history"
    return path if os.path.exists(path) else None


def sharded_files(path: str, shards: int) -> list[str]:
    """The snapshot files of a sharded backup (`schedctl cluster snapshot save` of a cluster of
    `shards` groups: FILE, FILE.shard-1 ..., listed in the manifest FILE.shards.json), shard
    0's first; RestoreError when the manifest is missing or is for another shard count."""
    import json
    import os
    from schedd_client.backup import manifest_path, shard_path
    try:
        manifest = json.loads(open(manifest_path(path)).read())
    except FileNotFoundError:
        raise RestoreError(f"the config says shards = {shards} but {manifest_path(path)} is not beside {path}: "
                           "restore a sharded cluster from all the files `schedctl cluster snapshot save` "
                           "wrote for it") from None
    except (OSError, ValueError) as e:
        raise RestoreError(f"cannot read {manifest_path(path)}: {e}") from None
    if manifest.get("shards") != shards:
        raise RestoreError(f"{manifest_path(path)} is a backup of {manifest.get('shards')} shard(s); the config "
                           f"says shards = {shards} (the shard count of a cluster is fixed: a job's shard "
                           "follows from it)")
    files = [shard_path(path, k) for k in range(shards)]
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        raise RestoreError(f"missing shard snapshot(s): {', '.join(missing)}")
    return files


def restore_sharded(path: str, cfg: config_mod.NodeConfig, *, force: bool, secret_file: str | None,
                    with_history: bool) -> list[tuple[int, Restored, list[Note]]]:
    """Every group of a sharded node from its own file, group 0 (the data dir itself) first,
    then the shard count recorded (schedd.runtime.groups)."""
    import os
    from schedd.runtime.groups import group_config, record_shard_count
    out = []
    for k, file in enumerate(sharded_files(path, cfg.shards)):
        history = _beside(file) if with_history else None
        if k:
            os.makedirs(group_config(cfg, k).data_dir, mode=0o700, exist_ok=True)
        done, notes = restore(file, group_config(cfg, k), force=force, secret_file=secret_file, history=history)
        out.append((k, done, notes))
    record_shard_count(cfg)
    return out


def cmd_restore(args: argparse.Namespace) -> int:
    try:
        cfg = config_mod.load(args.config, node_id=args.node_id, data_dir=args.data_dir)
    except config_mod.ConfigError as e:
        print(f"schedd restore: config error: {e}", file=sys.stderr)
        return 2
    if cfg.shards > 1:
        return _cmd_restore_sharded(args, cfg)
    try:
        history = None if args.without_history else args.history or _beside(args.from_file)
        done, notes = restore(args.from_file, cfg, force=args.force, secret_file=args.secret_file, history=history)
    except RestoreError as e:
        print(f"schedd restore: {e}", file=sys.stderr)
        return 1
    for note in notes:
        print(note.line(), file=sys.stderr)
    m = done.meta
    print(f"restored node {cfg.node_id} into {cfg.data_dir}: index {m.index}, term {m.term}, "
          f"{done.jobs} jobs, {done.executions} executions, {done.history_rows:,} in history, digest {m.digest[:16]}..., taken "
          f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(m.created_ms / 1000))} by schedd "
          f"{m.schedd_version} ({done.seconds:.1f}s). Members: "
          f"{', '.join(p.id for p in cfg.members)}. Start every restored node with `schedd serve`.")
    return 0


def _cmd_restore_sharded(args: argparse.Namespace, cfg: config_mod.NodeConfig) -> int:
    try:
        restored = restore_sharded(args.from_file, cfg, force=args.force, secret_file=args.secret_file,
                                   with_history=not args.without_history)
    except RestoreError as e:
        print(f"schedd restore: {e}", file=sys.stderr)
        return 1
    for k, done, notes in restored:
        for note in notes:
            print(f"shard {k}: {note.line()}", file=sys.stderr)
        m = done.meta
        print(f"restored shard {k} of node {cfg.node_id}: index {m.index}, term {m.term}, {done.jobs} jobs, "
              f"{done.executions} executions, {done.history_rows:,} in history, digest {m.digest[:16]}...")
    print(f"restored node {cfg.node_id} into {cfg.data_dir}: {cfg.shards} shards, "
          f"{sum(d.jobs for _, d, _ in restored)} jobs. Members: {', '.join(p.id for p in cfg.members)}. "
          "Start every restored node with `schedd serve`.")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("restore", help="seed a node of a NEW cluster from a snapshot file "
                                       "(`schedctl cluster snapshot save`); run it on every node")
    r.add_argument("--from", dest="from_file", required=True, metavar="FILE", help="the snapshot file")
    r.add_argument("--config", required=True,
                   help="the new node's TOML file: its membership ([[peers]]) and cluster secret")
    r.add_argument("--node-id", help="override the config's node_id")
    r.add_argument("--data-dir", help="override the config's data_dir (must be new or empty)")
    r.add_argument("--secret-file", metavar="FILE",
                   help="the cluster secret of the cluster that took the backup, when it is not the new "
                        "config's: the file's MAC is checked under a key derived from it")
    r.add_argument("--history", metavar="FILE",
                   help="the history file saved with the snapshot (default: FILE.history beside it, if there)")
    r.add_argument("--without-history", action="store_true",
                   help="restore the replicated state only: the restored cluster starts with an empty history")
    r.add_argument("--force", action="store_true",
                   help="restore despite a tzdata/croniter difference or a cluster secret that does "
                        "not open the stored env_secret values")
    r.set_defaults(func=cmd_restore)
