"""A throwaway Unix user for tests that run jobs as a mapped user (needs root and useradd)."""

from __future__ import annotations

import pwd
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager


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
