"""File modes: the data dir holds the Raft log and snapshots, with job env
values in clear, and they are pickles the node loads (root-equivalent). Whoever starts the node,
with whatever umask, the data dir ends up 0700 and every file in it 0600: those it creates (the
journal, its meta, the snapshot dump written by pysyncobj's fork child) and those it finds."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from schedd_client import job_spec
from schedd.ports.fakes import wait_until

pytestmark = pytest.mark.integration


def modes(root: Path) -> dict[str, int]:
    """Each file's mode; a file renamed or removed between the listing and its stat (the dump's
    `raft.dump.tmp`, renamed into place by a compaction every second here) is skipped."""
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for p in root.rglob("*"):
        try:
            out[str(p.relative_to(root))] = stat.S_IMODE(p.lstat().st_mode)
        except FileNotFoundError:
            continue
    return out


def test_data_dir_and_files_are_private(cluster_factory):
    old = os.umask(0o022)
    try:
        c = cluster_factory(size=1, raft={"compaction_entries": 10, "compaction_seconds": 1})
        data = c.root / "n1"
        data.mkdir(mode=0o755)
        os.chmod(data, 0o755)
        (data / "left-over.tmp").write_text("job env values")     # a file from an older run
        os.chmod(data / "left-over.tmp", 0o644)
        c.start()
        c.wait_leader(timeout=90)
    finally:
        os.umask(old)
    with c.client(timeout=30) as client:
        for i in range(15):
            client.put_job(job_spec(f"env-{i}", command="true", env={"TOKEN": f"secret-{i}"}))
    wait_until(lambda: (data / "raft.dump").exists(), timeout=60, what="a snapshot dump")
    found = modes(data)
    assert found["."] == 0o700, f"data dir is {found['.']:o}"
    loose = {name: f"{mode:o}" for name, mode in found.items() if name != "." and mode != 0o600}
    assert not loose, f"files in the data dir that others may read: {loose}"
    log = c.nodes["n1"].log.read_text()
    assert "0755 -> 0700" in log and "left-over.tmp" in log, "the tightened modes were not logged"
