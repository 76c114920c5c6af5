"""Least-privilege execution: which Unix user a team's jobs run as, with which limits.

A worker's config (`schedd_worker.config`) may map teams to Unix users::

    [isolation.teams.payments]
    user = "payments-jobs"              # a name or a uid
    group = "payments"                  # default: the user's primary group
    groups = []                         # supplementary groups (default: the user's, as login has)
    workdir_root = "/srv/jobs/payments" # the job's working directory is this or under it
    allow_python = false                # Python handlers run inside the worker: refused unless true

A uid range (`[isolation] uid_range`, `--uid-range`; schedd_worker.uids) gives every team the
config does not map a uid of its own, with a private working folder, and no account to create.
Otherwise, once any team is mapped (`IsolationPolicy.mapped`), a job of an unmapped team is
refused with a FAILED result naming the team, whatever its handler kind; a mapping to uid 0 is refused when the
config is read, unless `allow_root_jobs = true`. Shell handlers (and sensor commands) start
with the worker's umask for jobs, switched to the mapped user (groups, gid, then uid) by
util-linux's `setpriv` (`HostTools`), then run a small shell launcher (`LAUNCHER`): it waits until the worker has put it in the attempt's
cgroup, enters the working directory as that user, and execs the job (through `prlimit`, which
sets the job's rlimits, when it has any). Python handlers run inside the worker process and cannot switch users: on a root worker
they run only for a team mapped to root itself (so never by default), elsewhere only for a team
mapped to the worker's own user or allowed with `allow_python`. Nothing of Python runs between fork and exec in the worker itself (see worker/cli.py on why
that matters with gRPC's threads).
"""

from __future__ import annotations

import grp
import os
import pwd
import resource
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schedd_worker.uids import TeamUids, UidError

__all__ = ["TeamUser", "IsolationPolicy", "LaunchPlan", "DIRECT", "IsolationError", "LAUNCHER",
           "RLIMITS", "HostTools", "NO_TOOLS", "Launch", "resolve_user", "launch"]

#: ResourceLimits field -> the rlimit it sets (memory_mb is in MiB, the rest as they are)
RLIMITS = {"memory_mb": "RLIMIT_AS", "cpu_seconds": "RLIMIT_CPU", "open_files": "RLIMIT_NOFILE",
           "processes": "RLIMIT_NPROC"}


class IsolationError(ValueError):
    """A mapping that cannot be used (unknown user, root without allow_root_jobs...)."""


@dataclass(slots=True, frozen=True)
class TeamUser:
    """Who a team's jobs run as (resolved once, when the config is read)."""
    team: str
    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    workdir_root: str = ""
    allow_python: bool = False


def _gid_of(group: str | int) -> int:
    if isinstance(group, int) or str(group).isdigit():
        return int(group)
    try:
        return grp.getgrnam(str(group)).gr_gid
    except KeyError:
        raise IsolationError(f"no such group {group!r}") from None


def resolve_user(team: str, d: Mapping[str, Any], *, allow_root_jobs: bool) -> TeamUser:
    """The TeamUser of one `[isolation.teams.<team>]` table (keys already checked)."""
    user = d["user"]
    try:
        pw = pwd.getpwuid(int(user)) if isinstance(user, int) or str(user).isdigit() \
            else pwd.getpwnam(str(user))
    except KeyError:
        raise IsolationError(f"team {team!r}: no such user {user!r}") from None
    gid = _gid_of(d["group"]) if d.get("group") not in (None, "") else pw.pw_gid
    if "groups" in d:
        groups = tuple(sorted({_gid_of(g) for g in d["groups"]}))
    else:
        groups = tuple(sorted(set(os.getgrouplist(pw.pw_name, gid))))
    if (pw.pw_uid == 0 or gid == 0) and not allow_root_jobs:
        raise IsolationError(f"team {team!r} maps to {'uid' if pw.pw_uid == 0 else 'gid'} 0: "
                             "jobs never run as root unless [isolation] allow_root_jobs = true")
    root = str(d.get("workdir_root") or "")
    if root and not os.path.isabs(root):
        raise IsolationError(f"team {team!r}: workdir_root must be an absolute path, got {root!r}")
    return TeamUser(team=team, user=pw.pw_name, uid=pw.pw_uid, gid=gid, groups=groups,
                    home=pw.pw_dir, workdir_root=os.path.normpath(root) if root else "",
                    allow_python=bool(d.get("allow_python", False)))


@dataclass(slots=True, frozen=True)
class LaunchPlan:
    """How one shell attempt starts: as whom, where, with which limits (see `launcher_argv`)."""
    uid: int | None = None           # None: stay the worker's user
    gid: int | None = None
    groups: tuple[int, ...] = ()
    umask: int | None = None         # None: the worker's
    cwd: str | None = None
    rlimits: Mapping[str, int] = field(default_factory=dict)   # resource.RLIMIT_* name -> value
    env: Mapping[str, str] = field(default_factory=dict)   # HOME, USER, LOGNAME of the user

    @property
    def needs_launcher(self) -> bool:
        return self.uid is not None or bool(self.rlimits)


DIRECT = LaunchPlan()            # the worker's own user, no limits: exec the job directly


@dataclass(slots=True, frozen=True)
class IsolationPolicy:
    """The worker's allow-list of team -> Unix user, and what it refuses. `uids`: a uid per team
    from a range (schedd_worker.uids) for the teams `teams` does not name; `worker_uid`: the
    worker's euid (None: unknown, treated as not root), which decides where Python may run."""
    teams: Mapping[str, TeamUser] = field(default_factory=dict)
    allow_root_jobs: bool = False
    umask: int | None = None         # of every launched job; a mapped team's default is 0077
    uids: TeamUids | None = None
    worker_uid: int | None = None

    @property
    def mapped(self) -> bool:
        """Every job runs as its team's user (a mapping, or a uid from the range)."""
        return bool(self.teams) or self.uids is not None

    @property
    def python_possible(self) -> bool:
        """Whether a Python handler of some team could run here: not on a root worker that
        separates teams, unless a team is mapped to root itself (`_python_refusal`). A worker
        advertises the kind only then, so the leader sends such jobs elsewhere."""
        if not self.mapped or self.worker_uid != 0:
            return True
        return any(u.uid == 0 for u in self.teams.values())

    def refusal(self, team: str, kind: str) -> str:
        """Why a job of `team` with a `kind` handler may not run here ("" when it may)."""
        if not self.mapped:
            return ""
        user = self.teams.get(team)
        if user is None and self.uids is None:
            return (f"team {team!r} has no user mapping on this worker ([isolation.teams] of its "
                    "config): refused")
        if kind == "python":
            return self._python_refusal(team, user)
        return ""

    def _python_refusal(self, team: str, user: TeamUser | None) -> str:
        """Python handlers run inside the worker process, as its user: only where that is the
        team's own user, or (not as root) where the operator allowed it with allow_python."""
        if user is not None and user.uid == self.worker_uid:
            return ""
        if self.worker_uid == 0:
            return (f"team {team!r}: Python handlers run inside the worker process, which runs "
                    "as root here, and cannot be switched to the team's uid: refused (run them "
                    "in an SDK worker of the team's own user, or as a shell or container job)")
        if user is not None and user.allow_python:
            return ""
        who = user.user if user is not None else "its uid"
        return (f"team {team!r}: Python handlers run inside the worker process, as the "
                f"worker's user, not as {who!r}: refused (allow_python = true allows it)")

    def user_of(self, team: str) -> TeamUser | str | None:
        """Who `team`'s jobs run as: its mapping, else its uid from the range (allocated on
        first use, with its working folder), else None; a string says why it cannot run."""
        user = self.teams.get(team)
        if user is not None or self.uids is None:
            return user
        try:
            uid = self.uids.uid_of(team)
            home = self.uids.workdir(team, uid)
        except (UidError, OSError) as e:
            return f"team {team!r}: no uid for its jobs: {e}"
        return TeamUser(team=team, user=f"schedd-{team}", uid=uid, gid=uid, groups=(), home=home,
                        workdir_root=home)

    def ids_of(self, team: str) -> tuple[int, int] | str | None:
        """The (uid, gid) `team`'s containers run as: its shell jobs' (`user_of`) when this worker
        separates teams, None when it does not (the image decides), or why it cannot run."""
        if not self.mapped:
            return None
        user = self.user_of(team)
        if user is None:
            return f"team {team!r} has no user mapping on this worker ([isolation.teams] of its config): refused"
        return user if isinstance(user, str) else (user.uid, user.gid)

    def plan(self, team: str, workdir: str | None, limits: Mapping[str, float]) -> LaunchPlan | str:
        """The LaunchPlan of a shell attempt of `team`, or why it may not run."""
        why = self.refusal(team, "shell")
        if why:
            return why
        rl = {RLIMITS[k]: int(v) * (1 << 20 if k == "memory_mb" else 1)
              for k, v in limits.items() if k in RLIMITS and v}
        if rl.get("RLIMIT_CPU") is not None and float(limits.get("cpu_seconds", 0)) > rl["RLIMIT_CPU"]:
            rl["RLIMIT_CPU"] += 1                       # round a fraction of a second up
        user = self.user_of(team)
        if isinstance(user, str):
            return user
        if user is None:
            return LaunchPlan(cwd=workdir, rlimits=rl, umask=self.umask)
        cwd = _workdir_under(user, workdir)
        if cwd.startswith("!"):
            return cwd[1:]
        return LaunchPlan(uid=user.uid, gid=user.gid, groups=user.groups, cwd=cwd or None,
                          rlimits=rl, umask=0o077 if self.umask is None else self.umask,
                          env={"HOME": user.home, "USER": user.user, "LOGNAME": user.user})


def _workdir_under(user: TeamUser, workdir: str | None) -> str:
    """The working directory inside the team's root ("!why" when it leaves it)."""
    root = user.workdir_root
    if not root:
        return workdir or (user.home if user.home and os.path.isdir(user.home) else "/")
    path = os.path.normpath(os.path.join(root, workdir or "."))
    if path != root and not path.startswith(root.rstrip("/") + "/"):
        return f"!workdir {workdir!r} is outside the team's workdir_root {root!r}: refused"
    return path


# The launcher: a POSIX shell already running as the team's user (the uid, gid and groups were
# switched by util-linux's setpriv, or else by the worker's subprocess call in C between fork
# and exec). $1 is "wait" when the
# worker will move it into the attempt's cgroup first (its stdin is then a pipe it reads one byte
# from), $2 the working directory, the rest the job's argv. Errors exit 126, as a shell does for
# "cannot execute". Why a shell and not Python: a Python interpreter takes ~25 ms of CPU to start,
# and a burst of attempts on a separating worker waited on it; /bin/sh starts in under 1 ms.
LAUNCHER = r"""
if [ "$1" = wait ]; then read -r _ || :; fi
exec </dev/null
if [ -n "$2" ]; then
  cd -- "$2" 2>/dev/null || { echo "schedd-worker: cannot enter $2 as uid $(id -u)" >&2; exit 126; }
fi
shift 2
exec "$@"
"""

#: RLIMIT_* name -> the option of util-linux's `prlimit` that sets it
PRLIMIT_OPTIONS = {"RLIMIT_AS": "--as", "RLIMIT_CPU": "--cpu", "RLIMIT_NOFILE": "--nofile",
                   "RLIMIT_NPROC": "--nproc"}


@dataclass(slots=True, frozen=True)
class HostTools:
    """util-linux's programs a launch uses, as found on the worker's PATH (None: missing).
    `setpriv` switches user and groups: the worker then forks with vfork, which Python's
    subprocess cannot use when it switches the user itself, and a full fork of the worker
    (tens of MB of page tables) cost 2-3 ms of its event loop per start. `prlimit` sets rlimits."""
    setpriv: str | None = None
    prlimit: str | None = None

    @classmethod
    def found(cls) -> HostTools:
        return cls(setpriv=shutil.which("setpriv"), prlimit=shutil.which("prlimit"))


NO_TOOLS = HostTools()


@dataclass(slots=True, frozen=True)
class Launch:
    """How to start one shell attempt: `argv`, and the keyword arguments of the subprocess call
    (`popen`: the umask; the user and groups where there is no setpriv); `waits`: its stdin must
    be the cgroup pipe."""
    argv: list[str]
    popen: dict[str, Any]
    waits: bool


def launch(plan: LaunchPlan, args: list[str], *, wait: bool, tools: HostTools) -> Launch:
    """The launch of `args` under `plan`: `args` itself when nothing needs the launcher (the
    worker's user, no limits, no cgroup to wait for), else through it, switched to the team's
    user first. A plan with limits on a host without `prlimit` cannot start, and says so.
    Raises IsolationError."""
    popen: dict[str, Any] = {"umask": plan.umask} if plan.umask is not None else {}
    if not (plan.needs_launcher or wait):
        return Launch(argv=args, popen=popen, waits=False)
    if plan.rlimits:
        if tools.prlimit is None:
            raise IsolationError("this job has resource limits, which need `prlimit` "
                                 "(util-linux) on the worker's PATH: install it")
        args = [tools.prlimit, *_prlimit_options(plan.rlimits), "--", *args]
    argv = ["/bin/sh", "-c", LAUNCHER, "schedd-launch", "wait" if wait else "", plan.cwd or "", *args]
    if plan.uid is not None and (plan.uid, plan.gid) != (os.getuid(), os.getgid()):
        if tools.setpriv is not None:
            groups = ",".join(map(str, plan.groups))
            argv = [tools.setpriv, f"--reuid={plan.uid}", f"--regid={plan.gid}",
                    f"--groups={groups}" if groups else "--clear-groups", "--", *argv]
        else:
            popen |= {"user": plan.uid, "group": plan.gid, "extra_groups": list(plan.groups)}
    return Launch(argv=argv, popen=popen, waits=wait)


def _prlimit_options(rlimits: Mapping[str, int]) -> list[str]:
    """soft = hard = the value, lowered to the worker's own hard limit (which the job inherits
    and, as an unprivileged user, could not raise)."""
    out = []
    for name, value in rlimits.items():
        hard = resource.getrlimit(getattr(resource, name))[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        out.append(f"{PRLIMIT_OPTIONS[name]}={value}:{value}")
    return out
