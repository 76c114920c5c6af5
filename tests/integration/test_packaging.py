"""The wheels are what gets deployed (README, "Packaging"): tools/build-wheels.sh builds the three
distributions, they install into a fresh venv, and the installed entry points work from a
directory where the source tree is not importable: `schedd --help`, `schedctl --help`, `schedd
worker --help`, `schedd-worker --help`, and compose.yaml's whole start sequence run from the
wheels with deploy/compose's own files, minus the containers (this machine has no container
runtime): init.sh, three TLS nodes that `schedd health` (the HEALTHCHECK) finds SERVING,
worker-token.sh, a worker from its context file, and a job that succeeds on it.

To stay fast and offline the wheels go in with --no-deps, and the venv sees this test's
third-party packages through a .pth line naming the test venv's site-packages (a .pth *line*
adds a directory without running the .pth files inside it, so the editable installs of this
checkout stay inactive there). Every import is checked to come from the new venv."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from schedd.ports.fakes import wait_until
from schedd.runtime.cluster import DIE_WITH_PARENT, restartable_ports

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# What tools/build-wheels.sh needs of the checkout (the tests, docs and venvs stay behind).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "schedd", "client", "worker", "tools")
DISTRIBUTIONS = ("schedd", "schedd_client", "schedd_worker")
PACKAGES = ("schedd", "schedd_client", "schedd_proto", "schedd_worker")
NODES = ("n1", "n2", "n3")


def _run(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, check=False)
    assert p.returncode == 0, f"{args}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def _clean_env() -> dict[str, str]:
    """This environment without PYTHONPATH, the virtualenv marker and any SCHEDD_* setting."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("SCHEDD_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _build(tmp: Path, env: dict[str, str]) -> list[Path]:
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".venv", "*.pyc")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    out = tmp / "dist"
    # No build isolation where the test venv's setuptools can build them (no index needed);
    # else pip fetches the build-system requirement, as a user's build does.
    no_isolation = ["--no-build-isolation"] if _version("setuptools") >= (77,) else []
    _run(["bash", str(src / "tools" / "build-wheels.sh"), "--out", str(out), *no_isolation, "-q"],
         cwd=src, env=env)
    wheels = sorted(out.glob("*.whl"))
    assert sorted(w.name.split("-")[0] for w in wheels) == sorted(DISTRIBUTIONS), wheels
    return wheels


def _version(dist: str) -> tuple[int, ...]:
    """The installed version of `dist` as numbers ((0,) when it is not installed)."""
    try:
        text = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return (0,)
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def _venv(tmp: Path, wheels: list[Path], env: dict[str, str]) -> Path:
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp, env=env)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (purelib / "zz_test_deps.pth").write_text("".join(f"{p}\n" for p in site.getsitepackages()))
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
          "--no-deps", "--no-index", "--no-compile", *map(str, wheels)], cwd=tmp, env=env)
    return venv


def test_wheels_install_and_run_from_a_clean_venv(tmp_path: Path) -> None:
    env = _clean_env()
    venv = _venv(tmp_path, _build(tmp_path, env), env)
    bin_ = venv / "bin"
    elsewhere = tmp_path / "elsewhere"          # the cwd: nothing of the checkout importable here
    elsewhere.mkdir()

    # Every package of ours comes from the venv's site-packages, none from the checkout.
    where = _run([str(bin_ / "python"), "-c", "import json, importlib; print(json.dumps({p: "
                  f"importlib.import_module(p).__file__ for p in {PACKAGES!r}}}))"], cwd=elsewhere, env=env)
    for pkg, path in json.loads(where.stdout).items():
        resolved = Path(path).resolve()
        assert resolved.is_relative_to(venv.resolve()), (pkg, resolved)
        assert not resolved.is_relative_to(ROOT), (pkg, resolved)

    for cmd in (["schedd", "--help"], ["schedctl", "--help"], ["schedd", "worker", "--help"],
                ["schedd-worker", "--help"]):
        out = _run([str(bin_ / cmd[0]), *cmd[1:]], cwd=elsewhere, env=env, timeout=60)
        assert "usage:" in out.stdout, (cmd, out.stdout)

    _compose_smoke(bin_, tmp_path / "compose", elsewhere, env)


def _compose_here(tmp: Path, files: Path) -> dict[str, Path]:
    """deploy/compose's node configs and context files as the containers see them, moved to this
    machine: each service name becomes 127.0.0.1 with free ports, and the containers'
    /etc/schedd/ and /var/lib/schedd/ become directories under `tmp`."""
    base = restartable_ports(3 * len(NODES))
    port = {(n, p): base + len(NODES) * k + i for i, n in enumerate(NODES)
            for k, p in enumerate(("7070", "7001", "9101"))}
    for d in ("etc/pki", "etc/tls", "etc/secret", "etc/creds", "var"):
        (tmp / d).mkdir(parents=True, mode=0o700)
    out = {}
    # each service's own tls volume: init.sh writes it to TLS/<service>, the service mounts it
    # at /etc/schedd/tls (compose.yaml)
    service = {f"{n}.toml": n for n in NODES} | {"worker-context.toml": "w1", "admin-context.toml": "admin"}
    for name in [f"{n}.toml" for n in NODES] + ["worker-context.toml", "admin-context.toml"]:
        text = (files / name).read_text()
        text = re.sub(r"\b(n[1-3]):(7070|7001|9101)\b", lambda m: f"127.0.0.1:{port[m[1], m[2]]}", text)
        text = text.replace("/etc/schedd/tls/", f"{tmp}/etc/tls/{service[name]}/")
        text = text.replace("/etc/schedd/", f"{tmp}/etc/").replace("/var/lib/schedd/", f"{tmp}/var/")
        out[name] = tmp / name
        out[name].write_text(text)
    return out


def _compose_smoke(bin_: Path, tmp: Path, cwd: Path, env: dict[str, str]) -> None:
    """compose.yaml's sequence with the installed wheels and deploy/compose's own files, minus
    the containers: init.sh (certificates, secret), three `schedd serve` nodes until `schedd
    health` (the HEALTHCHECK) passes on each, worker-token.sh, a worker from the worker's context
    file, and a job that runs on it, checked with the installed schedctl."""
    files = _compose_here(tmp, ROOT / "deploy" / "compose")
    env = {**env, "PATH": f"{bin_}:{env.get('PATH', '/usr/bin:/bin')}", DIE_WITH_PARENT: "1"}
    dirs = {"SCHEDD_PKI_DIR": "etc/pki", "SCHEDD_TLS_DIR": "etc/tls", "SCHEDD_SECRET_DIR": "etc/secret",
            "SCHEDD_CREDS_DIR": "etc/creds"}
    env.update({k: str(tmp / v) for k, v in dirs.items()})
    _run(["sh", str(ROOT / "deploy" / "compose" / "init.sh")], cwd=cwd, env=env)
    assert not list((tmp / "etc" / "tls").rglob("ca-key.pem"))       # the CA key stays in pki
    procs: list[subprocess.Popen] = []
    try:
        for n in NODES:
            with open(tmp / f"{n}.log", "w") as log:
                procs.append(subprocess.Popen([str(bin_ / "schedd"), "serve", "--config", str(files[f"{n}.toml"])],
                                              cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
        for n in NODES:
            wait_until(lambda n=n: _probe(bin_, files[f"{n}.toml"], cwd, env) == 0, timeout=120, interval=0.5,
                       what=f"`schedd health` SERVING on {n}")
        admin = {**env, "SCHEDD_CONTEXT": str(files["admin-context.toml"])}
        _run(["sh", str(ROOT / "deploy" / "compose" / "worker-token.sh")], cwd=cwd, env=admin)
        token = tmp / "etc" / "creds" / "worker.token"
        assert token.stat().st_mode & 0o777 == 0o600 and "." in token.read_text()
        with open(tmp / "w1.log", "w") as log:
            # (as the suite's root only: the image's user is not root and needs no --allow-root)
            as_root = ["--allow-root"] if os.geteuid() == 0 else []
            procs.append(subprocess.Popen([str(bin_ / "schedd"), "worker", "--name", "w1", "--slots", "2", *as_root],
                                          cwd=cwd,
                                          env={**env, "SCHEDD_CONTEXT": str(files["worker-context.toml"])},
                                          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True))
        ctl = [str(bin_ / "schedctl")]
        _run([*ctl, "job", "create", "hello", "--schedule", "", "--command",
              "echo hello from the wheels"], cwd=cwd, env=admin)
        _run([*ctl, "job", "trigger", "hello"], cwd=cwd, env=admin)

        worker = procs[-1]

        def succeeded() -> bool:
            assert worker.poll() is None, (tmp / "w1.log").read_text()
            p = subprocess.run([*ctl, "run", "list", "hello", "-o", "json"], cwd=cwd, env=admin,
                               capture_output=True, text=True, timeout=60, check=False)
            return p.returncode == 0 and '"SUCCEEDED"' in p.stdout

        wait_until(succeeded, timeout=120, interval=1.0, errors=False,
                   what="the job to succeed on the wheel's worker")
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def _probe(bin_: Path, config: Path, cwd: Path, env: dict[str, str]) -> int:
    return subprocess.run([str(bin_ / "schedd"), "health", "--config", str(config)], cwd=cwd, env=env,
                          capture_output=True, timeout=60, check=False).returncode
