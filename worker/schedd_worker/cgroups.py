"""One cgroup v2 per shell attempt, where the worker has a cgroup it may write (delegated).

`[isolation] cgroup` in the worker's config says where: "auto" (the default) uses the worker's
own cgroup when it was delegated to it (systemd's `Delegate=yes` marks it with the xattr
trusted.delegate, or user.delegate for a user manager) and has the memory and pids controllers
available; a cgroup the worker merely can write (root can write any) is left alone, since its
manager owns it. "off" never uses one; a path names a delegated cgroup v2 directory. The worker first moves itself into a leaf `worker/` below
it (cgroup v2 lets only leaves hold processes once controllers are enabled for the children),
enables +memory +pids for the children, and then gives each attempt with a memory or process
limit its own `attempt-<token>/` with memory.max and pids.max. The launcher waits until it has
been moved in before it execs the job, so every process of the job is inside. After the attempt
the group is emptied (cgroup.kill where the kernel has it) and removed.

Without a usable cgroup the limits are still applied as rlimits (per process, and RLIMIT_NPROC
per Unix user), which is weaker: docs/workers.md "Isolation on workers" says what each gives.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["Cgroups", "CgroupError", "own_cgroup_dir", "delegated"]

log = logging.getLogger("schedd.worker.cgroups")

NEEDED = ("memory", "pids")
REMOVE_TRIES = 20


class CgroupError(RuntimeError):
    """A configured cgroup directory that cannot be used."""


def own_cgroup_dir(proc_cgroup: str = "/proc/self/cgroup",
                   mountinfo: str = "/proc/self/mountinfo") -> Path | None:
    """The worker's own cgroup v2 directory, or None (no unified hierarchy, or not mounted)."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
        mounts = Path(mountinfo).read_text().splitlines()
    except OSError:
        return None
    rel = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    if rel is None:
        return None
    for m in mounts:
        left, sep, right = m.partition(" - ")
        if sep and right.split()[:1] == ["cgroup2"]:
            return Path(left.split()[4]) / rel.lstrip("/")
    return None


def delegated(path: Path) -> bool:
    """Whether the cgroup at `path` was delegated to this process (systemd's marker)."""
    for name in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(path, name).strip(b"\0\n") == b"1":
                return True
        except OSError:
            continue
    return False


class Cgroups:
    """Attempt cgroups under one delegated cgroup v2 directory (see the module doc)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def from_setting(cls, setting: str) -> Cgroups | None:
        """"off" -> None; "auto" -> the worker's own cgroup if usable, else None (logged); a
        path -> that directory, prepared, or CgroupError."""
        if setting == "off":
            return None
        if setting == "auto":
            found = own_cgroup_dir()
            if found is None or not delegated(found):
                log.info("no delegated cgroup v2 for the worker (%s): job limits are rlimits only",
                         found or "no unified hierarchy")
                return None
            try:
                return cls.prepared(found)
            except CgroupError as e:
                log.info("cgroup %s not usable (%s): job limits are rlimits only", found, e)
                return None
        return cls.prepared(Path(setting))

    @classmethod
    def prepared(cls, root: Path) -> Cgroups:
        """Move this process into `root`/worker and enable the controllers for the children."""
        try:
            available = (root / "cgroup.controllers").read_text().split()
        except OSError as e:
            raise CgroupError(f"{root} is not a cgroup v2 directory ({e.strerror})") from None
        missing = [c for c in NEEDED if c not in available]
        if missing:
            raise CgroupError(f"{root} lacks the {', '.join(missing)} controller(s)")
        if not os.access(root, os.W_OK):
            raise CgroupError(f"{root} is not writable by the worker (delegate it)")
        try:
            leaf = root / "worker"
            leaf.mkdir(exist_ok=True)
            (leaf / "cgroup.procs").write_text(f"{os.getpid()}\n")
            (root / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in NEEDED) + "\n")
        except OSError as e:
            raise CgroupError(f"cannot prepare {root}: {e.strerror or e}") from None
        return cls(root)

    def create(self, token: int, limits: Mapping[str, float]) -> Path | None:
        """The cgroup of attempt `token` with its memory.max / pids.max, or None when it has
        neither limit (or the cgroup cannot be made: logged, rlimits still apply)."""
        values = {}
        if limits.get("memory_mb"):
            values["memory.max"] = str(int(limits["memory_mb"]) << 20)
        if limits.get("processes"):
            values["pids.max"] = str(int(limits["processes"]))
        if not values:
            return None
        path = self.root / f"attempt-{token}"
        try:
            path.mkdir(exist_ok=True)
            for name, value in values.items():
                (path / name).write_text(value + "\n")
        except OSError as e:
            log.warning("cannot make cgroup %s: %s", path, e)
            self.remove(path)
            return None
        return path

    @staticmethod
    def attach(path: Path, pid: int) -> None:
        (path / "cgroup.procs").write_text(f"{pid}\n")

    @staticmethod
    def remove(path: Path) -> None:
        """Empty the attempt's cgroup and remove it (best effort: logged when it stays)."""
        kill = path / "cgroup.kill"
        if kill.exists():
            try:
                kill.write_text("1\n")
            except OSError:
                pass
        for i in range(REMOVE_TRIES):
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY or i == REMOVE_TRIES - 1:
                    log.warning("cgroup %s not removed: %s", path, e.strerror or e)
                    return
                time.sleep(0.01 * (i + 1))      # the killed members are still exiting
