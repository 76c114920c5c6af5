"""A Unix uid per team, drawn from a range, with no passwd entry: isolation with no set-up.

A root worker given `[isolation] uid_range = "61000-61999"` (or `--uid-range`) runs the jobs of
every team it has no `[isolation.teams]` mapping for as that team's own uid (gid the same number,
no supplementary groups), so two teams' jobs cannot read each other's `/proc/<pid>/environ` or
files, nor signal each other, without anyone creating users first.

Why the allocation is persisted rather than only derived: a team's files in its working folder
stay its own across restarts only if its uid never changes, and two teams must never share one.
A hash of the team's name picks where the search starts (so a lost state file mostly gives the
same answer again); the first free uid from there, wrapping, is the team's, and the choice is
written to `<state_dir>/team-uids.json` (0600) under an exclusive lock, so workers on one host
that share the state dir never hand one uid to two teams. A uid that has a passwd or group entry
(a real account), or that the operator's mapping uses, is never handed out.

Each team gets a working folder `<state_dir>/work/<team>` (0700, owned by its uid): its HOME and
the root its jobs' `workdir` is resolved in. The state dir and `work/` are 0711 and owned by the
worker: a job can reach its own folder but list nobody's.
"""

from __future__ import annotations

import fcntl
import grp
import hashlib
import json
import os
import pwd
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TeamUids", "UidError", "parse_range", "DEFAULT_UID_RANGE", "DEFAULT_STATE_DIR",
           "STATE_FILE"]

DEFAULT_UID_RANGE = (61000, 61999)
DEFAULT_STATE_DIR = "/var/lib/schedd-worker"
STATE_FILE = "team-uids.json"
_LOCK_FILE = "team-uids.lock"
_TEAM_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")     # schedd.core.model.TEAM_RE


class UidError(ValueError):
    """No uid can be given (the range is full, a bad range, a team name that is no team's)."""


def parse_range(text: str) -> tuple[int, int]:
    """"61000-61999" -> (61000, 61999). Refuses 0 (root) and ranges below 1000 (system users)."""
    lo, sep, hi = text.strip().partition("-")
    try:
        first, last = int(lo), int(hi)
    except ValueError:
        raise UidError(f"a uid range is FIRST-LAST, e.g. \"61000-61999\", got {text!r}") from None
    if not sep or first > last:
        raise UidError(f"a uid range is FIRST-LAST with FIRST <= LAST, got {text!r}")
    if first < 1000 or last >= 2**31 - 1:
        raise UidError(f"uid range {text!r}: use uids from 1000 to 2147483646 (below 1000 are "
                       "system accounts)")
    return first, last


def has_account(uid: int) -> bool:
    """True when `uid` is a user's or `uid` as a gid is a group's (a real account's id)."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


def _private_dir(path: Path, mode: int) -> None:
    """Make `path` a directory owned by this process with `mode`; refuse a symlink or one
    owned by someone else (it would let that user swap what the worker trusts)."""
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise UidError(f"{path} must be a directory owned by uid {os.geteuid()}")
    os.chmod(path, mode)


def _reachable(path: Path) -> None:
    """Refuse a folder a team's uid cannot traverse down to. Such a uid has no passwd entry and
    no supplementary group, and owns none of the ancestors, so only their "others" execute bit
    lets it through; without this check every job of the team would fail at its `chdir` with a
    bare "Permission denied" (exit 126), long after the worker said it was ready."""
    for folder in reversed(path.resolve().parents):
        mode = stat.S_IMODE(folder.stat().st_mode)
        if not mode & stat.S_IXOTH:
            raise UidError(f"the teams' uids cannot reach {path}: {folder} is mode {mode:04o}, "
                           "without search permission for others; run `chmod o+x "
                           f"{folder}` or choose a state dir they can reach")


@dataclass(slots=True)
class TeamUids:
    """The team -> uid table of one state dir (see the module doc). `taken`: uids the
    operator's mapping uses; `exists`: whether a uid belongs to an account (injectable)."""
    first: int
    last: int
    state_dir: Path
    taken: frozenset[int] = frozenset()
    exists: Callable[[int], bool] = has_account
    _known: dict[str, int] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def prepare(self) -> None:
        """Create the state dir and `work/` (0711): at start, so a bad path stops the worker,
        as does a state dir the teams' uids could not reach (see `_reachable`)."""
        _private_dir(self.state_dir, 0o711)
        _private_dir(self.state_dir / "work", 0o711)
        _reachable(self.state_dir / "work")

    def uid_of(self, team: str) -> int:
        """The team's uid, allocated and persisted on first use. Raises UidError."""
        if not _TEAM_RE.match(team):
            raise UidError(f"team {team!r} is not a team name: refused")
        uid = self._known.get(team)
        if uid is None:
            with _Lock(self.state_dir / _LOCK_FILE):
                table = self._read()
                uid = table.get(team)
                if uid is None:
                    uid = self._pick(team, table.values())
                    table[team] = uid
                    self._write(table)
            self._known[team] = uid
        return uid

    def workdir(self, team: str, uid: int) -> str:
        """`<state_dir>/work/<team>`, created 0700 and owned by `uid` (uid_of checked the name)."""
        path = self.state_dir / "work" / team
        try:
            os.mkdir(path, 0o700)
            os.chown(path, uid, uid)          # needs CAP_CHOWN: the worker keeps it for this
        except FileExistsError:
            pass
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode):
            raise UidError(f"{path} is not a directory: refused")
        if st.st_uid == os.geteuid() and st.st_uid != uid:     # a creation cut short
            os.chown(path, uid, uid)
        elif st.st_uid != uid:
            raise UidError(f"{path} belongs to uid {st.st_uid}, not to team {team!r} (uid {uid}): "
                           "remove it")
        return str(path)

    def _pick(self, team: str, used: Iterable[int]) -> int:
        busy = set(used) | self.taken
        start = int.from_bytes(hashlib.sha256(team.encode()).digest()[:8], "big") % self.size
        for i in range(self.size):
            uid = self.first + (start + i) % self.size
            if uid not in busy and not self.exists(uid):
                return uid
        raise UidError(f"no free uid left in {self.first}-{self.last} for team {team!r}: "
                       "widen [isolation] uid_range")

    def _read(self) -> dict[str, int]:
        """The persisted table, keeping only entries inside this range with distinct uids."""
        try:
            doc = json.loads((self.state_dir / STATE_FILE).read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise UidError(f"{self.state_dir / STATE_FILE} cannot be read ({e}): fix or remove it") from None
        out: dict[str, int] = {}
        seen: set[int] = set()
        for team, uid in sorted((doc.get("teams") or {}).items()):
            if (isinstance(uid, int) and self.first <= uid <= self.last and uid not in seen
                    and uid not in self.taken):
                out[team] = uid
                seen.add(uid)
        return out

    def _write(self, table: dict[str, int]) -> None:
        path = self.state_dir / STATE_FILE
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"version": 1, "range": [self.first, self.last], "teams": table}, f,
                      sort_keys=True, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


class _Lock:
    """An exclusive flock on a 0600 file, for one read-pick-write of the table."""

    def __init__(self, path: Path) -> None:
        self.path, self.fd = path, -1

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)            # releases the lock
