"""The worker's own privileges: only what switching to the mapped users takes.

A worker that maps teams to Unix users must be able to setuid/setgid (and signal the process
groups of other users). Run as root, it keeps CAP_SETUID, CAP_SETGID and CAP_KILL and drops every
other capability from its bounding, permitted, effective, inheritable and ambient sets, and sets
no_new_privs, so that neither it nor any job can gain a capability back (a setuid-root binary
started by a job runs without privileges). Linux only; through prctl(2) and capset(2) with
ctypes (no maintained binding is a dependency of the worker). Capabilities belong to threads:
the worker drops them first thing, while it is the only thread, so every thread it starts later
(gRPC's, Python handlers') and every job inherits the reduced sets.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterable

__all__ = ["KEEP", "CAP_CHOWN", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "drop_capabilities",
           "effective_caps", "has_caps", "CapsError", "make_undumpable"]

CAP_CHOWN, CAP_KILL, CAP_SETGID, CAP_SETUID = 0, 5, 6, 7
KEEP = (CAP_KILL, CAP_SETGID, CAP_SETUID)

_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_V3 = 0x20080522


class CapsError(OSError):
    """A capability operation the kernel refused."""


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise CapsError(err, f"{what}: {os.strerror(err)}")


def effective_caps(status: str = "/proc/self/status") -> int:
    """The effective capability set of this process, as a bit mask (0 when unreadable)."""
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def has_caps(caps: Iterable[int], mask: int | None = None) -> bool:
    mask = effective_caps() if mask is None else mask
    return all(mask >> c & 1 for c in caps)


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


def drop_capabilities(keep: Iterable[int] = KEEP) -> None:
    """Keep only `keep` (bounding, permitted, effective; nothing inheritable or ambient) and set
    no_new_privs. Raises CapsError if the kernel refuses a step."""
    keep = sorted(set(keep))
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    if threads != 1:        # capabilities and no_new_privs are per thread: the others keep theirs
        raise CapsError(0, f"drop capabilities before any thread starts ({threads} are running)")
    libc = _libc()
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                           ctypes.c_ulong]
    for cap in range(_last_cap() + 1):            # needs CAP_SETPCAP: before capset drops it
        if cap not in keep:
            _check(libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), f"dropping capability {cap}")
    _check(libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient caps")
    data = (_Data * 2)()
    for cap in keep:
        word, bit = divmod(cap, 32)
        data[word].effective |= 1 << bit
        data[word].permitted |= 1 << bit
    header = _Header(_CAP_V3, 0)
    _check(libc.capset(ctypes.byref(header), data), "capset")
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "setting no_new_privs")


def make_undumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0): /proc/<worker>/environ, mem, maps... become root's and no
    process of the worker's uid may ptrace it, so a job running as the worker's own user (a
    non-root worker) cannot read the worker's token or memory either. No core dumps of it (they
    would hold the secrets it receives). Per process; a job gets dumpable again at its exec."""
    libc = _libc()
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                           ctypes.c_ulong]
    _check(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "making the worker non-dumpable")
