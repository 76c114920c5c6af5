"""The systemd units in deploy/ put every key in the section systemd reads it
from and sandbox both daemons; the worker refuses to run as root without --allow-root."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from schedd.runtime import cli

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = ("schedd@.service", "schedd-worker.service")

# Keys that systemd reads only from [Unit] (silently ignored elsewhere), and the sandbox both
# units must carry (value None: any value).
UNIT_ONLY = {"StartLimitIntervalSec", "StartLimitBurst", "StartLimitAction", "Description",
             "After", "Wants", "Requires", "Documentation"}
HARDENING = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ReadWritePaths": None,
    "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes",
    "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes", "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    "RestrictNamespaces": "yes", "RestrictSUIDSGID": "yes", "LockPersonality": "yes",
    "SystemCallArchitectures": "native", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
    "UMask": "0077",
}
MAX_EXPOSURE = 2.0     # systemd-analyze security, lower is better (the worker scored 8.7 before)


def parse_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """{section: [(key, value), ...]}: systemd's format allows a key more than once."""
    out: dict[str, list[tuple[str, str]]] = {}
    section = None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        m = re.fullmatch(r"\[([A-Za-z]+)\]", line)
        if m:
            section = m.group(1)
            out.setdefault(section, [])
            continue
        key, sep, value = line.partition("=")
        assert sep and section, f"{path.name}:{n}: not a key=value inside a section: {raw!r}"
        out[section].append((key.strip(), value.strip()))
    return out


def values(unit: dict, section: str, key: str) -> list[str]:
    return [v for k, v in unit.get(section, []) if k == key]


@pytest.mark.parametrize("name", UNITS)
def test_systemd_units_are_well_formed(name):
    unit = parse_unit(DEPLOY / name)
    assert set(unit) == {"Unit", "Service", "Install"}, name
    for section, pairs in unit.items():
        for key, _ in pairs:
            if key in UNIT_ONLY:
                assert section == "Unit", f"{name}: {key} is in [{section}]; systemd reads it in [Unit] only"
    assert values(unit, "Unit", "StartLimitIntervalSec") and values(unit, "Unit", "StartLimitBurst")
    for key, want in HARDENING.items():
        got = values(unit, "Service", key)
        assert got, f"{name}: [Service] has no {key}="
        if want is not None:
            assert got[-1] == want, f"{name}: {key}={got[-1]}, want {want!r}"
    users = values(unit, "Service", "User")
    assert users and users[-1] not in ("root", "0"), f"{name}: runs as {users}"
    assert not any("--allow-root" in v for v in values(unit, "Service", "ExecStart"))
    # every path the daemon writes is made writable (ProtectSystem=strict makes the rest read-only)
    state = values(unit, "Service", "StateDirectory")
    assert state and all(any(p.endswith("/" + s) for p in " ".join(values(unit, "Service", "ReadWritePaths")).split())
                         for s in state), name
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return
    r = subprocess.run([analyze, "security", "--offline=yes", "--no-pager", str(DEPLOY / name)],
                       capture_output=True, text=True, timeout=120)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout + r.stderr)
    assert m, r.stdout[-2000:] + r.stderr[-2000:]
    assert float(m.group(1)) <= MAX_EXPOSURE, f"{name}: exposure {m.group(1)}"
    r = subprocess.run([analyze, "verify", "--man=no", str(DEPLOY / name)], capture_output=True,
                       text=True, timeout=120)
    problems = [ln for ln in (r.stdout + r.stderr).splitlines()
                if ln.strip() and "is not executable" not in ln and "/opt/schedd" not in ln]
    assert not problems, problems


def test_worker_refuses_root_without_allow_root(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert cli.main(["worker", "--cluster", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "refusing to run as root" in err and "--allow-root" in err
    assert cli.root_refusal(0, allow_root=True) == ""
    assert cli.root_refusal(1000, allow_root=False) == ""
    parsed = cli.build_parser().parse_args(["worker", "--allow-root"])
    assert parsed.allow_root is True
    if os.geteuid() == 0:          # the real process, when the suite runs as root
        r = subprocess.run([sys.executable, "-m", "schedd", "worker", "--cluster", "127.0.0.1:1"],
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "SCHEDD_DIE_WITH_PARENT": "1"})
        assert r.returncode == 2 and "refusing to run as root" in r.stderr, r


DEPLOYMENT = DEPLOY.parent / "docs" / "deployment.md"


def deploy_commands() -> list[str]:
    """The shell commands of "Deploy a 3-node cluster" in docs/deployment.md (its indented code
    lines, continuations joined), up to the next section ("TLS")."""
    text = DEPLOYMENT.read_text()
    start = text.index("# Deploy a 3-node cluster\n")
    section = text[start:text.index("\n## ", start)]
    commands, current = [], ""
    for line in section.splitlines():
        if not line.startswith("    "):
            continue
        current += " " + line.strip().removesuffix("\\")
        if not line.rstrip().endswith("\\"):
            commands.append(" ".join(current.split()))
            current = ""
    return commands


def _absolute_paths(unit: dict) -> set[Path]:
    """The files a unit's process reads: its --config and SCHEDD_CONTEXT, and what those name."""
    import tomllib

    paths: set[Path] = set()
    for v in values(unit, "Service", "ExecStart") + values(unit, "Service", "Environment"):
        for m in re.finditer(r"(?:--config |SCHEDD_CONTEXT=)(/\S+)", v):
            paths.add(Path(m.group(1).replace("%i", "n1")))
    for p in list(paths):
        template = {"/etc/schedd/n1.toml": DEPLOY / "config" / "n1.toml",
                    "/etc/schedd-worker/context.toml": DEPLOY / "worker-context.toml"}[str(p)]
        doc = tomllib.loads(template.read_text())
        files = [doc.get(k) for k in ("ca", "cert", "key", "token_file", "secret_file")]
        files += [(doc.get("tls") or {}).get(k) for k in ("cert", "key", "client_ca")]
        paths |= {p.parent / f for f in files if f}
    return paths


@pytest.mark.parametrize("name", UNITS)
def test_deploy_guide_creates_every_user_and_directory_the_units_need(name):
    """The worker unit ran as a user the deploy guide never created. Every User=/Group= of
    each unit is created by a `useradd` of the deploy section, every directory holding a file the
    unit's process reads (its config or context file, and the TLS files, secret and token those
    name) is made by an `install -d` owned by the unit's group, and the venv ExecStart runs
    from is created and given the distribution that ships the binary."""
    unit = parse_unit(DEPLOY / name)
    commands = deploy_commands()
    users = {c.split()[-1]: c for c in commands if " useradd " in f" {c} "}
    [user], [group] = values(unit, "Service", "User"), values(unit, "Service", "Group")
    assert user in users, f"{name}: User={user} is never created (useradd) in docs/deployment.md"
    assert user == group and "--user-group" in users[user], users[user]
    made = {Path(p): c for c in commands if "install -d" in c for p in c.split() if p.startswith("/")}
    for path in sorted(_absolute_paths(unit)):
        assert path.parent in made, f"{name}: nothing in docs/deployment.md makes {path.parent} (for {path})"
        assert f"-g {group}" in made[path.parent], made[path.parent]
    [exec_start] = values(unit, "Service", "ExecStart")
    binary = Path(exec_start.split()[0])
    venv = binary.parent.parent
    assert any(f"venv {venv}" in c for c in commands), f"{name}: no `python3 -m venv {venv}`"
    dist = {"schedd": "schedd", "schedd-worker": "schedd-worker"}[binary.name]
    installs = [c for c in commands if f"{venv}/bin/pip install" in c]
    assert any(c.split()[-1] == dist and "--no-index" in c for c in installs), (name, installs)


def test_sdk_worker_refuses_root_without_allow_root(monkeypatch):
    """The SDK's Worker ran shell jobs as root unasked; it refuses as
    `schedd-worker` does, and `allow_root=True` is its --allow-root."""
    from schedd_worker import Worker

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(PermissionError, match="refusing to run as root") as refused:
        Worker("127.0.0.1:1", name="w")
    assert "allow_root=True" in str(refused.value) and "--config" not in str(refused.value)
    assert Worker("127.0.0.1:1", name="w", allow_root=True).name == "w"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert Worker("127.0.0.1:1", name="w").name == "w"          # an unprivileged user needs nothing
