"""`schedd local`, the README's first command, is secure by default: TLS with client
certificates on every port, access control on, credentials 0600 in its data dir, and the
printed `export SCHEDD_CONTEXT=...` line is all schedctl needs. Without them nothing answers."""

from __future__ import annotations

import os
import re
import ssl
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from schedd.ports.fakes import wait_until
from tests.support.cluster import stop_local

pytestmark = pytest.mark.integration


def schedctl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "schedd_client.schedctl", *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_schedd_local_is_secure_by_default(tmp_path: Path) -> None:
    data, log = tmp_path / "local", tmp_path / "local.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDD_")}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "schedd", "local", "--data-dir", str(data),
                                 "--base-port", "0"], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, umask=0o022)     # a usual login umask
    try:
        wait_until(lambda: "demo executions: " in log.read_text() and "SUCCEEDED" in log.read_text(),
                   timeout=120, what="schedd local up with the demo succeeding")
        text = log.read_text()
        [context] = re.findall(r"export SCHEDD_CONTEXT=(\S+)", text)
        assert "SCHEDD_CLUSTER=" not in text
        addresses = re.findall(r"gRPC (127\.0\.0\.1:\d+)", text)
        assert len(addresses) == 3

        # Every credential it wrote is private.
        for path in [Path(context), data / "admin.token", data / "worker.token",
                     *sorted((data / "tls").glob("*-key.pem"))]:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        # ... and so is the rest (the folder was 0755, its logs and node
        # configs 0644, before): the folder and its logs 0700, every log and node config 0600.
        for path in (data, data / "logs", data / "tls"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
        logs = sorted((data / "logs").iterdir())
        configs = sorted(data.glob("n*.toml"))
        assert len(configs) == 3 and len(logs) >= 4, (configs, logs)
        for path in [*logs, *configs, data / "cluster.secret"]:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path

        # The printed line is all schedctl needs ...
        ok = schedctl("run", "list", "demo", "-o", "json", env={**env, "SCHEDD_CONTEXT": context})
        assert ok.returncode == 0, ok.stderr
        assert '"SUCCEEDED"' in ok.stdout
        # ... and without it nothing answers: plaintext is refused (the ports speak TLS only) ...
        plain = schedctl("job", "list", env={**env, "SCHEDD_CLUSTER": ",".join(addresses)})
        assert plain.returncode != 0 and "TLS" in plain.stderr
        # ... and TLS with the CA but no client certificate and no token is refused too.
        ca = str(data / "tls" / "ca.pem")
        anonymous = schedctl("job", "list", env={**env, "SCHEDD_CLUSTER": ",".join(addresses),
                                                 "SCHEDD_CA": ca})
        assert anonymous.returncode != 0

        # The dashboard's address, on a line of its own, speaks HTTPS only.
        [dashboard] = re.findall(r"^dashboard (https://127\.0\.0\.1:\d+/)$", text, re.MULTILINE)
        page = urllib.request.urlopen(dashboard + "login", timeout=10,
                                      context=ssl.create_default_context(cafile=ca)).read().decode()
        assert 'id="token"' in page
        with pytest.raises(OSError):
            urllib.request.urlopen(dashboard.replace("https:", "http:") + "login", timeout=10)
        # A one-time link, on the dashboard of the node that minted its code (a node of this cluster).
        link = schedctl("dashboard", "--no-open", env={**env, "SCHEDD_CONTEXT": context})
        assert link.returncode == 0 and re.fullmatch(r"https://127\.0\.0\.1:\d+/login#code=[\w-]{43}\n",
                                                     link.stdout), link
        assert (data / "admin.token").read_text().strip() not in link.stdout
    finally:
        stop_local(proc, timeout=60)
    assert "schedd local: stopped" in log.read_text()
