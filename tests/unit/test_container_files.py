"""The Dockerfile and compose.yaml say what docs/deployment.md ("Run it in containers") promises, checked
without a container runtime: a python:3.11-slim multi-stage build, a non-root user, a gRPC
HEALTHCHECK through a command that exists, nothing secret in the image; a compose project of
three nodes and a worker whose node configs load with schedd's own validation and agree with
each other, with the volumes and the start order (init -> nodes -> setup -> worker)."""

from __future__ import annotations

import ipaddress
import shlex
import tomllib
from pathlib import Path, PurePosixPath

import pytest
import yaml

from schedd.runtime import config as config_mod
from schedd.runtime.cli import build_parser
from schedd_client.context import KEYS as CONTEXT_KEYS

ROOT = Path(__file__).resolve().parents[2]
NODES = ("n1", "n2", "n3")
NODE_CONFIG = "/etc/schedd/node.toml"            # where the image's CMD and HEALTHCHECK look


def dockerfile_stages(text: str) -> list[list[tuple[str, str]]]:
    """The Dockerfile as stages of (INSTRUCTION, arguments), continuation lines joined and
    comments dropped; the instructions before the first FROM form stage 0."""
    stages: list[list[tuple[str, str]]] = [[]]
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        logical += (" " if logical else "") + line.removesuffix("\\").strip()
        if line.endswith("\\"):
            continue
        word, _, args = logical.partition(" ")
        if word.upper() == "FROM":
            stages.append([])
        stages[-1].append((word.upper(), args.strip()))
        logical = ""
    return stages


def args_of(stage: list[tuple[str, str]], word: str) -> list[str]:
    return [a for w, a in stage if w == word]


@pytest.fixture(scope="module")
def stages() -> list[list[tuple[str, str]]]:
    return dockerfile_stages((ROOT / "Dockerfile").read_text())


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_the_dockerfile_parser_joins_continuations() -> None:
    """The helper the checks below rely on (a negative control for its join and its stages)."""
    got = dockerfile_stages("ARG A=1\n# c\nFROM x AS b\nRUN a \\\n    && b\nFROM y\nUSER 5\n")
    assert got == [[("ARG", "A=1")], [("FROM", "x AS b"), ("RUN", "a && b")], [("FROM", "y"), ("USER", "5")]]


def test_dockerfile_is_a_slim_multi_stage_build_of_the_wheels(stages) -> None:
    [base_arg] = args_of(stages[0], "ARG")
    assert base_arg == "PYTHON_IMAGE=python:3.11-slim"
    froms = [args_of(s, "FROM")[0] for s in stages[1:]]
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    build_runs = " ".join(args_of(stages[1], "RUN"))
    assert "tools/build-wheels.sh --deps" in build_runs
    assert "--no-index --find-links /wheels schedd" in build_runs     # no index for our names
    assert args_of(stages[2], "COPY") == ["--from=build /opt/schedd/venv /opt/schedd/venv"]


def test_dockerfile_runs_as_a_non_root_user_with_a_data_volume(stages) -> None:
    final = stages[-1]
    [user] = args_of(final, "USER")
    [uid_arg] = [a for a in args_of(final, "ARG") if a.startswith("SCHEDD_UID=")]
    uid = uid_arg.split("=", 1)[1]
    assert user == "${SCHEDD_UID}:${SCHEDD_UID}" and int(uid) >= 1000
    runs = " ".join(args_of(final, "RUN"))
    assert '--uid "${SCHEDD_UID}"' in runs and "--shell /usr/sbin/nologin" in runs
    # USER comes before what the container runs, and nothing after it switches back
    words = [w for w, _ in final]
    assert words.index("USER") < words.index("ENTRYPOINT") and "RUN" not in words[words.index("USER"):]
    assert args_of(final, "VOLUME") == ['["/var/lib/schedd"]']
    assert set(" ".join(args_of(final, "EXPOSE")).split()) == {"7070", "7001", "9101"}


def test_dockerfile_healthcheck_is_grpc_health_through_schedd_health(stages) -> None:
    [check] = args_of(stages[-1], "HEALTHCHECK")
    options, _, cmd = check.partition(" CMD ")
    assert "--interval=" in options and "--timeout=" in options
    argv = yaml.safe_load(cmd)                    # the exec form is a JSON (so YAML) list
    assert argv[:2] == ["schedd", "health"] and argv[argv.index("--config") + 1] == NODE_CONFIG
    args = build_parser().parse_args(argv[1:])    # the command exists with these flags
    assert args.cmd == "health" and args.service == "schedd.liveness"
    [entry] = args_of(stages[-1], "ENTRYPOINT")
    [default] = args_of(stages[-1], "CMD")
    assert yaml.safe_load(entry) == ["schedd"]
    assert yaml.safe_load(default) == ["serve", "--config", NODE_CONFIG]


def test_nothing_secret_goes_into_the_image(stages) -> None:
    for stage in stages:
        for word, args in stage:
            if word in ("COPY", "ADD"):
                assert not any(s in args for s in (".pem", "secret", "token", ".venv")), args
            if word in ("ENV", "ARG"):
                assert not any(s in args.upper() for s in ("SECRET", "TOKEN", "PASSWORD")), args
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("**") if "**" in ignore else -1] == "**"      # deny by default
    for pattern in ("**/*.pem", "**/*.token", "**/*.secret"):
        assert pattern in ignore


def _node_config(service: dict) -> tuple[Path, dict]:
    [mount] = [v for v in service["volumes"] if v.split(":")[1] == NODE_CONFIG]
    host = ROOT / mount.split(":")[0]
    assert mount.endswith(":ro"), mount
    return host, tomllib.loads(host.read_text())


def _mounts(service: dict) -> dict[str, str]:
    """container path -> source (a volume name or a ./ path)."""
    return {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", [])}


def _under(path: str, mounts: dict[str, str]) -> str:
    """The source of the mount that holds `path` inside the container."""
    hits = [c for c in mounts if PurePosixPath(path).is_relative_to(c)]
    assert hits, f"{path} is on no mounted volume"
    return mounts[max(hits, key=len)]


def test_compose_runs_three_nodes_and_a_worker(compose) -> None:
    services = compose["services"]
    nodes = {n: s for n, s in services.items() if any(v.split(":")[1] == NODE_CONFIG for v in s.get("volumes", []))}
    assert sorted(nodes) == list(NODES)
    assert services["w1"]["command"][0] == "worker"
    assert services["w1"]["environment"]["SCHEDD_CONTEXT"] == "/deploy/worker-context.toml"
    for name, s in services.items():
        assert s["image"] == services["n1"]["image"], name            # one image for everything
        assert not s.get("privileged") and s.get("user") in (None,), name   # the image's non-root user
    # start order: init, then the nodes, then setup (the worker's token), then the worker
    for n in NODES:
        assert nodes[n]["depends_on"] == {"init": {"condition": "service_completed_successfully"}}
        assert "healthcheck" not in nodes[n]                            # the image's gRPC HEALTHCHECK
    assert services["setup"]["depends_on"] == {n: {"condition": "service_healthy"} for n in NODES}
    assert services["w1"]["depends_on"] == {"setup": {"condition": "service_completed_successfully"}}
    for one_shot in ("init", "setup", "w1", "schedctl"):
        assert services[one_shot]["healthcheck"] == {"disable": True}


def test_compose_keeps_the_ca_key_and_the_secret_where_they_belong(compose) -> None:
    services = compose["services"]
    holders = {v: sorted(n for n, s in services.items() if v in _mounts(s).values())
               for v in ("pki", "secret", "creds", "tls-admin", "tls-w1", *(f"tls-{n}" for n in NODES))}
    assert holders["pki"] == ["init"]                                  # the CA key never reaches a node
    assert holders["secret"] == ["init", *NODES]
    assert holders["creds"] == ["setup", "w1"]
    assert holders["tls-admin"] == ["init", "schedctl", "setup"]       # never the worker or a node
    assert holders["tls-w1"] == ["init", "w1"]
    for n in NODES:
        assert holders[f"tls-{n}"] == ["init", n]
    for name, s in services.items():
        if name not in ("init", "setup"):
            assert all(v.endswith(":ro") for v in s["volumes"] if not v.startswith("data-")
                       and not v.startswith("worker-home")), name
    assert set(compose["volumes"]) >= {"pki", "secret", "creds", *(f"data-{n}" for n in NODES)}
    assert "tls" not in compose["volumes"]           # the one volume every service shared is gone


def test_compose_node_configs_load_and_agree(compose) -> None:
    services = compose["services"]
    subnet = ipaddress.ip_network(compose["networks"]["schedd"]["ipam"]["config"][0]["subnet"])
    members: list[dict[str, tuple[str, str]]] = []
    addresses = set()
    for n in NODES:
        s = services[n]
        path, raw = _node_config(s)
        mounts = _mounts(s)
        # schedd's own validation, with a strong secret in place of the file the volume holds
        assert _under(raw.pop("secret_file"), mounts) == "secret"
        cfg = config_mod.from_dict({**raw, "secret": config_mod.generate_secret()})
        assert cfg.node_id == n == s["hostname"]
        assert cfg.grpc_address == f"{n}:7070" and cfg.raft_address == f"{n}:7001"
        assert cfg.tls.cert is not None and cfg.tls.client_ca is not None        # TLS, mTLS
        for f in (cfg.tls.cert, cfg.tls.key, cfg.tls.client_ca):
            assert _under(str(f), mounts) == f"tls-{n}", f
        assert cfg.tls.cert.name == f"node-{n}.pem" and cfg.tls.key.name == f"node-{n}-key.pem"
        assert _under(str(cfg.data_dir), mounts) == f"data-{n}"
        members.append({m.id: (m.raft_address, m.grpc_address) for m in cfg.members})
        ip = ipaddress.ip_address(s["networks"]["schedd"]["ipv4_address"])
        assert ip in subnet
        addresses.add(ip)
        assert path.name == f"{n}.toml"
    assert len(addresses) == len(NODES)
    assert all(m == members[0] for m in members) and sorted(members[0]) == list(NODES)


def test_compose_contexts_name_the_nodes_and_the_init_files(compose) -> None:
    grpc = [f"{n}:7070" for n in NODES]
    init = (ROOT / "deploy" / "compose" / "init.sh").read_text()
    assert "WORKERS=${SCHEDD_WORKERS:-w1}" in init and "ADMINS=${SCHEDD_ADMINS:-admin}" in init
    for name, service, cert, volume in (("worker-context.toml", "w1", "worker-w1", "tls-w1"),
                                        ("admin-context.toml", "setup", "admin-admin", "tls-admin"),
                                        ("admin-context.toml", "schedctl", "admin-admin", "tls-admin")):
        ctx = tomllib.loads((ROOT / "deploy" / "compose" / name).read_text())
        assert set(ctx) <= CONTEXT_KEYS and ctx["cluster"] == grpc
        mounts = _mounts(compose["services"][service])
        assert Path(ctx["cert"]).name == f"{cert}.pem" and Path(ctx["key"]).name == f"{cert}-key.pem"
        for key in ("ca", "cert", "key"):
            assert _under(ctx[key], mounts) == volume
        if "token_file" in ctx:
            assert _under(ctx["token_file"], mounts) == "creds"
    entry = compose["services"]["init"]["entrypoint"]
    assert shlex.join(entry) == "sh /deploy/init.sh"


def _volume_files(compose: dict, tmp: Path) -> dict[str, set[str]]:
    """Run deploy/compose/init.sh as the init service would, its /etc/schedd/ redirected into
    `tmp` (no container runtime here), and return what it left in each named volume: a volume's
    files are those under the directory init mounts it at."""
    import os
    import subprocess
    import sys

    etc = tmp / "etc"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "SCHEDD_PKI_DIR": str(etc / "pki"), "SCHEDD_TLS_DIR": str(etc / "tls"),
           "SCHEDD_SECRET_DIR": str(etc / "secret")}
    init_mounts = _mounts(compose["services"]["init"])
    for path, source in init_mounts.items():
        if not source.startswith("./"):
            (etc / PurePosixPath(path).relative_to("/etc/schedd")).mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["sh", str(ROOT / "deploy" / "compose" / "init.sh")], env=env, cwd=tmp,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out: dict[str, set[str]] = {}
    for path, source in init_mounts.items():
        if not source.startswith("./"):
            where = etc / PurePosixPath(path).relative_to("/etc/schedd")
            out[source] = {str(f.relative_to(where)) for f in where.rglob("*") if f.is_file()}
    return out


def test_each_compose_service_gets_only_the_keys_it_needs(compose, tmp_path) -> None:
    """init.sh copied every certificate and key but the CA key into one volume
    that the worker mounted too, and the worker's jobs run as the uid owning those files: a job
    could use schedctl with the admin certificate. Here init.sh runs for real (in a sandbox) and
    each service's view is what its mounts hold: a node its own pair, the worker the CA and its
    own pair, the admin pair only setup and schedctl, the CA key init alone."""
    files = _volume_files(compose, tmp_path)
    own = {n: {"ca.pem", f"node-{n}.pem", f"node-{n}-key.pem"} for n in NODES}
    own |= {"w1": {"ca.pem", "worker-w1.pem", "worker-w1-key.pem"},
            "setup": {"ca.pem", "admin-admin.pem", "admin-admin-key.pem"},
            "schedctl": {"ca.pem", "admin-admin.pem", "admin-admin-key.pem"}}
    for name, service in compose["services"].items():
        if name == "init":
            continue
        seen = {f for source in _mounts(service).values() if source.startswith("tls")
                for f in files[source]}
        assert seen == own[name], f"{name} sees {sorted(seen)}"
        keys = {f for source in _mounts(service).values() if source in files
                for f in files[source] if f.endswith("-key.pem") or f.endswith(".secret")}
        assert "ca-key.pem" not in keys, name
        assert keys <= own[name] | ({"cluster.secret"} if name in NODES else set()), (name, keys)
    assert "ca-key.pem" in files["pki"]
