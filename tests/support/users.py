"""A throwaway Unix user for tests that run jobs as a mapped user (needs root and useradd),
and a scratch directory such a user can reach."""

from __future__ import annotations

import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def system_user(prefix: str) -> Iterator[pwd.struct_passwd]:
    """A fresh system user (no home), deleted on exit whatever happened."""
    name = f"{prefix}{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                    name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)


@contextmanager
def reachable_scratch(prefix: str) -> Iterator[Path]:
    """A directory (0755) outside pytest's 0700 tmp tree, which a job's user could not traverse;
    removed on exit whatever happened."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
