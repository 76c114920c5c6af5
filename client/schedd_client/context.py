"""A context file: where a cluster is and how to reach it, in one small TOML or YAML file.

    # ~/.config/schedd/prod.toml   (export SCHEDD_CONTEXT=~/.config/schedd/prod.toml)
    cluster = ["10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070"]   # or "a:7070,b:7070"
    ca = "ca.pem"                    # paths are relative to this file
    cert = "admin-alice.pem"         # optional: mTLS client certificate...
    key = "admin-alice-key.pem"      # ...and its key
    token_file = "alice.token"       # or: token = "<accessor>.<secret>"
    tls = true                       # optional: TLS with the system roots when no ca is given
    dashboard = "https://10.0.0.1:9101/"   # optional, informational: a node's web dashboard (`schedctl dashboard` asks the node it reaches)

Why a file: schedctl, the SDK (``Client.from_context()``) and schedd-worker must all agree on the
same addresses and credentials; ``schedd local`` writes one so that a single ``export`` line is
all a user needs. Read by ``load_context`` (strict: an unknown key or a wrong type is an error
naming the file and the key, never a silent default). A ``.yaml``/``.yml`` file is YAML, anything
else TOML. The token is passed through unchanged as ``authorization: Bearer <token>``.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import yaml

from .channels import Security, security_from_env, with_files

__all__ = ["Context", "ContextError", "CONTEXT_ENV", "CLUSTER_ENV", "DEFAULT_CLUSTER", "load_context",
           "context_from_env", "parse_cluster", "resolve"]

CONTEXT_ENV = "SCHEDD_CONTEXT"
DEFAULT_CLUSTER = "127.0.0.1:7070"
CLUSTER_ENV = "SCHEDD_CLUSTER"
KEYS = frozenset({"cluster", "ca", "cert", "key", "token", "token_file", "tls", "dashboard"})


def parse_cluster(cluster: str | Sequence[str] | None) -> list[str]:
    """The node addresses from ``"host:port,host:port"`` or a list; ``None`` reads the
    ``SCHEDD_CLUSTER`` environment variable, else ``127.0.0.1:7070``."""
    if cluster is None:
        cluster = os.environ.get(CLUSTER_ENV, "").strip() or DEFAULT_CLUSTER
    parts = cluster.split(",") if isinstance(cluster, str) else list(cluster)
    addresses = list(dict.fromkeys(part.strip() for part in parts if part.strip()))
    if not addresses:
        raise ValueError("no cluster addresses given")
    return addresses


class ContextError(ValueError):
    """A context file that cannot be used; the message names the file and the key."""


@dataclass(slots=True, frozen=True)
class Context:
    """What a context file says: the cluster addresses and how to connect to them."""

    path: Path
    cluster: list[str]
    security: Security
    dashboard: str = ""              # a node's dashboard URL, "" when the file names none


def _parse(path: Path, text: str) -> Any:
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            return yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise ContextError(f"{path}: invalid YAML: {e}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ContextError(f"{path}: invalid TOML: {e}") from None


def _cluster(path: Path, value: Any) -> list[str]:
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        parts = value
    else:
        raise ContextError(f"{path}: cluster must be \"host:port,host:port\" or a list of them")
    addresses = list(dict.fromkeys(p.strip() for p in parts if p.strip()))
    if not addresses:
        raise ContextError(f"{path}: cluster names no address")
    return addresses


def _path(path: Path, d: dict[str, Any], key: str) -> Path | None:
    value = d.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ContextError(f"{path}: {key} must be a file path")
    p = Path(value).expanduser()
    return p if p.is_absolute() else path.parent / p


def _token(path: Path, d: dict[str, Any]) -> str | None:
    if "token" in d and "token_file" in d:
        raise ContextError(f"{path}: set token or token_file, not both")
    if "token" in d:
        if not isinstance(d["token"], str) or not d["token"].strip():
            raise ContextError(f"{path}: token must be a non-empty string")
        return d["token"].strip()
    file = _path(path, d, "token_file")
    if file is None:
        return None
    try:
        token = file.read_text().strip()
    except OSError as e:
        raise ContextError(f"{path}: cannot read token_file {file}: {e.strerror or e}") from None
    if not token:
        raise ContextError(f"{path}: token_file {file} is empty")
    return token


def load_context(path: str | os.PathLike[str]) -> Context:
    """Read and check a context file (see the module doc)."""
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except OSError as e:
        raise ContextError(f"cannot read the context file {path}: {e.strerror or e}") from None
    d = _parse(path, text)
    if not isinstance(d, dict):
        raise ContextError(f"{path}: a context file is a table of keys")
    unknown = sorted(set(d) - KEYS)
    if unknown:
        raise ContextError(f"{path}: unknown key{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}"
                           f" (known: {', '.join(sorted(KEYS))})")
    if "cluster" not in d:
        raise ContextError(f"{path}: cluster is required")
    tls = d.get("tls", False)
    if not isinstance(tls, bool):
        raise ContextError(f"{path}: tls must be true or false")
    cert, key = _path(path, d, "cert"), _path(path, d, "key")
    if (cert is None) != (key is None):
        raise ContextError(f"{path}: cert and key go together")
    security = Security(tls=tls, ca=_path(path, d, "ca"), cert=cert, key=key, token=_token(path, d))
    dashboard = d.get("dashboard", "")
    if not isinstance(dashboard, str) or (dashboard and not dashboard.startswith(("https://", "http://"))):
        raise ContextError(f"{path}: dashboard must be a URL: https://host:port/")
    return Context(path=path, cluster=_cluster(path, d["cluster"]), security=security, dashboard=dashboard)


def context_from_env(env: dict[str, str] | None = None) -> Context | None:
    """The context named by ``$SCHEDD_CONTEXT``, or None when it is unset."""
    value = (os.environ if env is None else env).get(CONTEXT_ENV, "").strip()
    return load_context(value) if value else None


def resolve(cluster: str | list[str] | None = None, *, ca: str | os.PathLike[str] | None = None,
            cert: str | os.PathLike[str] | None = None, key: str | os.PathLike[str] | None = None,
            token: str | None = None, context: str | os.PathLike[str] | None = None,
            env: dict[str, str] | None = None) -> tuple[list[str], Security]:
    """The addresses and the ``Security`` of a command line. Each value comes from, first to
    last: its flag; a context file named with ``--context`` (``context``); its environment
    variable (``SCHEDD_CLUSTER``, ``SCHEDD_CA``/``CERT``/``KEY``, ``SCHEDD_TOKEN``); the context
    file of ``$SCHEDD_CONTEXT``; the default (127.0.0.1:7070, plaintext). An explicit choice wins
    over the environment: a ``--context prod.toml`` given on the command line is not overridden
    by a ``SCHEDD_CERT`` left in the shell (the environment fills only what the file leaves
    unset). One rule for schedctl and schedd-worker, so both reach a cluster the same way."""
    env = dict(os.environ) if env is None else env
    explicit = load_context(context) if context else None
    ctx = explicit or context_from_env(env)
    env_cluster = env.get(CLUSTER_ENV, "").strip()
    if cluster:
        addresses = parse_cluster(cluster)
    elif explicit is not None:
        addresses = explicit.cluster
    elif env_cluster or ctx is None:
        addresses = parse_cluster(env_cluster or DEFAULT_CLUSTER)
    else:
        addresses = ctx.cluster
    if explicit is not None:
        security = _filled(explicit.security, security_from_env(env))
    else:
        security = security_from_env(env, ctx.security if ctx is not None else Security())
    return addresses, with_files(security, ca=ca, cert=cert, key=key, token=token)


def _filled(chosen: Security, fallback: Security) -> Security:
    """``chosen`` with what it leaves unset taken from ``fallback`` (a certificate and its key
    as a pair: never one file of each)."""
    cert, key = (chosen.cert, chosen.key) if chosen.cert is not None else (fallback.cert, fallback.key)
    return replace(chosen, ca=chosen.ca or fallback.ca, cert=cert, key=key,
                   token=chosen.token or fallback.token, tls=chosen.tls or fallback.tls)
