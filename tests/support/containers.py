"""A container image for the container handler's tests, built offline: a static busybox and a few
of its applets imported as a one-layer image (no registry, no network). One tag per pytest
process (xdist workers never remove each other's image); removed at the end of the session,
with any container a test's worker left (labelled schedd.worker)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

APPLETS = ("sh", "echo", "cat", "sleep", "true", "false", "id", "env", "head", "yes", "seq", "tr", "tail",
           "ls", "wget", "nc", "printf", "sha256sum")
REPOSITORY = "localhost/schedd-test-busybox"


def why_not() -> str:
    """Why the container tests cannot run here ("" when they can)."""
    if shutil.which("podman") is None:
        return "podman is not installed (.ci/run installs podman, runc, busybox-static, uidmap)"
    busybox = shutil.which("busybox")
    if busybox is None:
        return "busybox is not installed (.ci/run installs busybox-static)"
    if os.geteuid() != 0:
        return "container tests run rootful podman: run them as root (CI does)"
    return ""


@contextmanager
def built_image() -> Iterator[str]:
    """Import the image, yield its name, remove it (and what ran from it) at the end."""
    name = f"{REPOSITORY}:{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{uuid.uuid4().hex[:8]}"
    busybox = shutil.which("busybox")
    assert busybox is not None
    with tempfile.TemporaryDirectory(prefix="schedd-image-") as tmp:
        root = Path(tmp) / "root"
        (root / "bin").mkdir(parents=True)
        shutil.copy2(busybox, root / "bin" / "busybox")
        for applet in APPLETS:
            (root / "bin" / applet).symlink_to("busybox")
        (root / "tmp").mkdir()
        tar = Path(tmp) / "root.tar"
        with tarfile.open(tar, "w") as t:
            t.add(root, arcname=".")
        subprocess.run(["podman", "import", str(tar), name], check=True, capture_output=True, timeout=120)
    try:
        yield name
    finally:
        remove_containers(f"ancestor={name}")
        subprocess.run(["podman", "rmi", "-f", name], capture_output=True, timeout=120, check=False)


def containers(*filters: str) -> list[str]:
    """Names of the containers (any state) matching every podman --filter given."""
    args = ["podman", "ps", "-a", "--format", "{{.Names}}"]
    for f in filters:
        args += ["--filter", f]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False).stdout
    return out.split()


def remove_containers(*filters: str, settle_s: float = 5.0) -> None:
    """Remove matching containers; a watchdog may still be removing one: wait a moment for it."""
    deadline = time.monotonic() + settle_s
    while True:
        names = containers(*filters)
        if names:
            subprocess.run(["podman", "rm", "-f", "-t", "0", *names], capture_output=True, timeout=120, check=False)
        if not names or time.monotonic() > deadline:
            return
        time.sleep(0.2)
