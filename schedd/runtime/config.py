"""Node configuration: one TOML file per node, overridable by flags.

    node_id = "n1"
    data_dir = "/var/lib/schedd"
    raft_address = "127.0.0.1:7001"     # what peers dial; also the bind address unless raft_bind is set
    grpc_address = "127.0.0.1:7070"
    metrics_address = "127.0.0.1:9101"  # /metrics and the dashboard (HTTPS with [tls]); "" disables both
    secret_file = "/etc/schedd/cluster.secret"   # or: secret = "..." (multi-node clusters need one)
    fsync = "always"                    # always | batch | never

    [raft]
    heartbeat_ms = 100
    tick_ms = 50
    election_timeout_ms = [600, 1200]
    leader_fallback_ms = 2500
    compaction_entries = 20000
    compaction_seconds = 600
    compaction_bytes = 268435456        # ...or once the log holds this much (what a restart replays)
    max_frame_bytes = 4194304           # larger Raft frames drop the connection (legit ones < 0.5 MiB)
    handshake_timeout_ms = 5000         # Raft connections must authenticate within this

    [scheduler]
    lookahead_ms = 1500
    max_fire_batch = 500
    burst_lookahead_ms = 15000          # look this far ahead when a burst is coming...
    burst_threshold = 2000              # ...of at least this many instants
    lease_ms = 10000                    # a running attempt without news this long is lost

    [webhooks]                          # where SLA webhooks may go (schedd_client.net.policy)
    allow = ["127.0.0.1"]               # exceptions to deny; default none
    deny = ["10.0.0.0/8"]               # added to the default deny list (loopback, link-local,
                                        # cloud metadata); ["*"] makes `allow` a strict allow-list
    [limits]                            # caps on what callers may hold (RESOURCE_EXHAUSTED past them)
    max_worker_streams = 512            # worker streams this node holds (handshakes included)
    max_worker_slots = 256              # slots one worker may claim to have
    max_worker_streams_per_token = 64   # streams one worker token holds (handshakes included; +1 to reconnect)
    max_jobs_per_call = 5000            # jobs in one PutJobs call (its commit applies in one step)
    max_bytes_per_call = 8388608        # bytes of one PutJobs request (8 MiB)
    max_jobs_per_team = 1000000         # jobs a team may hold (0 = no cap)
    max_inflight_per_connection = 64    # unary calls in flight on one client connection

    [tls]                               # TLS on every gRPC port (client API, workers, forwarding)
    cert = "/etc/schedd/tls/node-n1.pem"        # PEM, may carry intermediates; relative paths are
    key = "/etc/schedd/tls/node-n1-key.pem"     # relative to this file
    client_ca = "/etc/schedd/tls/ca.pem"        # set: client certificates required (mTLS); also
                                                # the CA this node trusts when it dials its peers
    insecure = false                    # true allows plaintext, on loopback binds only; without TLS
                                        # and without it (or on any other bind) the node refuses to start
    [acl]                               # access control (docs/security-acl.md)
    enabled = true                      # default-deny; only `schedctl acl bootstrap` works until bootstrap
    rate_per_second = 200               # mutating calls per principal (0 = no limit)...
    rate_burst = 400                    # ...with bursts up to this
    login_link_seconds = 60             # how long a `schedctl dashboard` link may be used (once; 1 to 60)

    [metrics]                           # Prometheus series per job (docs/observability.md)
    job_series_limit = 500              # jobs labelled with their own series; past it, only...
    job_series_teams = ["payments"]     # ...the jobs of these teams (the others: job="_other")

    shards = 1                          # shard groups (fixed at creation; the same on every node);
                                        # a node listens on its raft_address for all of them
    raft_ports = "shared"               # sharded clusters only: "shared" (one Raft port per node) or
                                        # "per_group" (shard k on the Raft port + k, as clusters made
                                        # before the shared port do); unset: as the data dir records

    [[peers]]
    id = "n2"
    raft_address = "127.0.0.1:7002"
    grpc_address = "127.0.0.1:7071"

Validation is strict: unknown keys, bad addresses and unsafe combinations are errors that name
the file and the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import tomllib
from collections import Counter
from pathlib import Path

from schedd.core.shards import RAFT_PORT_MODES
from schedd.settings import (AclSettings, HistorySettings, Limits, MetricsSettings, NodeConfig, Peer, RaftTuning,
                             SchedulerTuning, TlsSettings)
from schedd_client.net.policy import DEFAULT_DENY_RULES, NetPolicy, PolicyError, parse_rules

__all__ = ["ConfigError", "Limits", "NodeConfig", "Peer", "RaftTuning", "SchedulerTuning", "TlsSettings",
           "load", "from_dict"]

FSYNC_MODES = ("always", "batch", "never")
MAX_SHARDS = 64                     # shard groups one node hosts, each with its own Raft port (for now)
MIN_SECRET_LEN = 24
MIN_SECRET_DISTINCT = 10
MIN_SECRET_BITS = 96
GEN_SECRET_HINT = "make one with `schedd gen-secret --out /etc/schedd/cluster.secret`"
ADDR_RE = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")


class ConfigError(ValueError):
    pass


def generate_secret() -> str:
    """A cluster secret: 32 random bytes, URL-safe base64 (43 characters, 256 bits)."""
    return secrets.token_urlsafe(32)


def _period(s: str) -> int:
    """Length of the shortest unit that `s` repeats (len(s) if none): the prefix function."""
    pi = [0] * len(s)
    for i in range(1, len(s)):
        k = pi[i - 1]
        while k and s[i] != s[k]:
            k = pi[k - 1]
        pi[i] = k + (s[i] == s[k])
    return len(s) - pi[-1] if s else 0


def estimate_secret_bits(secret: str) -> float:
    """A pessimistic guess at a secret's entropy: the per-character Shannon entropy of its own
    characters, times the characters a guesser does not get for free (not the continuation of a
    run like aaa or abc, not part of a repeated unit). Random secrets score near their
    true entropy; alphabets, repeats and runs score near zero. A keyboard walk or a passphrase
    can pass: the check catches carelessness, it cannot prove randomness (use gen-secret)."""
    n = len(secret)
    if n == 0:
        return 0.0
    h = -sum(c / n * math.log2(c / n) for c in Counter(secret).values())
    codes = [ord(c) for c in secret]
    free = sum(1 for a, b, c in zip(codes, codes[1:], codes[2:]) if c - b == b - a and abs(c - b) <= 1)
    return h * min(n - free, _period(secret))


def secret_weakness(secret: str) -> str | None:
    """Why `secret` is too weak to guard the Raft port (which unpickles), or None."""
    if len(secret) < MIN_SECRET_LEN:
        return f"too short ({len(secret)} characters, at least {MIN_SECRET_LEN})"
    if len(set(secret)) < MIN_SECRET_DISTINCT:
        return f"made of too few distinct characters ({len(set(secret))}, at least {MIN_SECRET_DISTINCT})"
    bits = estimate_secret_bits(secret)
    if bits < MIN_SECRET_BITS:
        return f"too predictable (about {bits:.0f} bits of entropy, at least {MIN_SECRET_BITS})"
    return None


def _addr(value: object, key: str) -> str:
    if not isinstance(value, str) or not ADDR_RE.match(value):
        raise ConfigError(f"{key} must be host:port, got {value!r}")
    port = int(value.rsplit(":", 1)[1])
    if not 0 < port < 65536:
        raise ConfigError(f"{key}: port {port} is out of range")
    return value


def _check_keys(table: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(f"unknown key{'s' if len(unknown) > 1 else ''} in {where}: {', '.join(unknown)}")


def _int(table: dict, key: str, default: int, lo: int, hi: int, where: str) -> int:
    v = table.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ConfigError(f"{where}.{key} must be an integer in [{lo}, {hi}], got {v!r}")
    return v


def _table(d: dict, key: str) -> dict:
    v = d.get(key) or {}
    if not isinstance(v, dict):
        raise ConfigError(f"[{key}] must be a table")
    return v


def _raft(t: dict) -> RaftTuning:
    _check_keys(t, set(RaftTuning.__slots__), "[raft]")
    d = RaftTuning()
    et = t.get("election_timeout_ms", list(d.election_timeout_ms))
    if (not isinstance(et, list) or len(et) != 2 or not all(isinstance(x, int) for x in et)
            or not 0 < et[0] < et[1]):
        raise ConfigError("[raft].election_timeout_ms must be [min, max] with 0 < min < max")
    r = RaftTuning(
        heartbeat_ms=_int(t, "heartbeat_ms", d.heartbeat_ms, 1, 10_000, "[raft]"),
        tick_ms=_int(t, "tick_ms", d.tick_ms, 1, 1_000, "[raft]"),
        election_timeout_ms=(et[0], et[1]),
        leader_fallback_ms=_int(t, "leader_fallback_ms", d.leader_fallback_ms, 100, 60_000, "[raft]"),
        compaction_entries=_int(t, "compaction_entries", d.compaction_entries, 10, 10_000_000, "[raft]"),
        compaction_seconds=_int(t, "compaction_seconds", d.compaction_seconds, 1, 86_400, "[raft]"),
        compaction_bytes=_int(t, "compaction_bytes", d.compaction_bytes, 64 << 10, 1 << 40, "[raft]"),
        max_frame_bytes=_int(t, "max_frame_bytes", d.max_frame_bytes, 1 << 20, 1 << 30, "[raft]"),
        handshake_timeout_ms=_int(t, "handshake_timeout_ms", d.handshake_timeout_ms, 100, 600_000,
                                  "[raft]"),
        replica_stuck_ms=_int(t, "replica_stuck_ms", d.replica_stuck_ms, 1_000, 3_600_000, "[raft]"),
    )
    if r.election_timeout_ms[0] <= 3 * r.heartbeat_ms:
        raise ConfigError("[raft].election_timeout_ms min must be more than 3 x heartbeat_ms")
    if r.leader_fallback_ms <= r.heartbeat_ms:
        raise ConfigError("[raft].leader_fallback_ms must be more than heartbeat_ms")
    return r


def _int_table(cls, t: dict, where: str, bounds: dict[str, tuple[int, int]]):
    """A table of integer settings: each key of `bounds` within its (lo, hi), default from `cls`."""
    _check_keys(t, set(cls.__slots__), where)
    d = cls()
    return cls(**{key: _int(t, key, getattr(d, key), lo, hi, where) for key, (lo, hi) in bounds.items()})


def _scheduler(t: dict) -> SchedulerTuning:
    return _int_table(SchedulerTuning, t, "[scheduler]", {
        "lookahead_ms": (0, 60_000), "max_fire_batch": (1, 1000), "burst_lookahead_ms": (0, 300_000),
        "burst_threshold": (0, 10_000_000), "lease_ms": (500, 3_600_000),
        "catchup_per_second": (1, 100_000)})


def _limits(t: dict) -> Limits:
    return _int_table(Limits, t, "[limits]", {
        "max_worker_streams": (1, 100_000), "max_worker_slots": (1, 100_000),
        "max_worker_streams_per_token": (1, 100_000),
        "max_jobs_per_call": (1, 1_000_000), "max_bytes_per_call": (1024, 1024 ** 3),
        "max_jobs_per_team": (0, 100_000_000), "max_inflight_per_connection": (1, 100_000)})


def _acl(t: dict) -> AclSettings:
    _check_keys(t, set(AclSettings.__slots__), "[acl]")
    enabled = t.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"[acl].enabled must be true or false, got {enabled!r}")
    d = AclSettings()
    return AclSettings(enabled=enabled,
                       rate_per_second=_int(t, "rate_per_second", d.rate_per_second, 0, 1_000_000, "[acl]"),
                       rate_burst=_int(t, "rate_burst", d.rate_burst, 1, 10_000_000, "[acl]"),
                       login_link_seconds=_int(t, "login_link_seconds", d.login_link_seconds, 1, 60, "[acl]"))


def _history(t: dict) -> HistorySettings:
    _check_keys(t, set(HistorySettings.__slots__), "[history]")
    d = HistorySettings()
    days = t.get("max_age_days", d.max_age_days)
    if isinstance(days, bool) or not isinstance(days, int | float) or not 0 < days <= 36_500:
        raise ConfigError(f"[history].max_age_days must be a number of days in (0, 36500], got {days!r}")
    return HistorySettings(max_age_days=float(days),
                           prune_rows_per_step=_int(t, "prune_rows_per_step", d.prune_rows_per_step, 10,
                                                    1_000_000, "[history]"))


def _metrics(t: dict) -> MetricsSettings:
    _check_keys(t, set(MetricsSettings.__slots__), "[metrics]")
    teams = t.get("job_series_teams", [])
    if not isinstance(teams, list) or not all(isinstance(x, str) and x for x in teams):
        raise ConfigError("[metrics].job_series_teams must be a list of team names")
    return MetricsSettings(job_series_limit=_int(t, "job_series_limit", MetricsSettings().job_series_limit,
                                                 0, 100_000, "[metrics]"),
                           job_series_teams=tuple(sorted(set(teams))))


def _webhooks(t: dict) -> NetPolicy:
    _check_keys(t, {"allow", "deny"}, "[webhooks]")
    lists = {}
    for key in ("allow", "deny"):
        v = t.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError(f"[webhooks].{key} must be a list of networks or host names")
        lists[key] = v
    rules = {}
    for key in ("allow", "deny"):
        try:
            rules[key] = parse_rules(lists[key])
        except PolicyError as e:
            raise ConfigError(f"[webhooks].{key}: {e}") from None
    return NetPolicy(allow=rules["allow"], deny=DEFAULT_DENY_RULES + rules["deny"])


def _file(t: dict, key: str, base_dir: Path | None) -> Path | None:
    v = t.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"[tls].{key} must be a file path, got {v!r}")
    path = Path(v).expanduser()
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    return path


def _tls(t: dict, base_dir: Path | None) -> TlsSettings:
    """[tls]: cert and key together, client_ca only with them, insecure a boolean. The files
    themselves are read and checked at start (schedd.security.tls), where a bad one is named."""
    _check_keys(t, {"cert", "key", "client_ca", "insecure"}, "[tls]")
    insecure = t.get("insecure", False)
    if not isinstance(insecure, bool):
        raise ConfigError(f"[tls].insecure must be true or false, got {insecure!r}")
    cert, key, ca = _file(t, "cert", base_dir), _file(t, "key", base_dir), _file(t, "client_ca", base_dir)
    if (cert is None) != (key is None):
        raise ConfigError("[tls].cert and [tls].key go together: set both or neither")
    if ca is not None and cert is None:
        raise ConfigError("[tls].client_ca needs [tls].cert and [tls].key (mTLS is TLS first)")
    if insecure and cert is not None:
        raise ConfigError("[tls].insecure = true with a [tls].cert: choose TLS or plaintext")
    return TlsSettings(cert=cert, key=key, client_ca=ca, insecure=insecure)


TOP_KEYS = {"node_id", "data_dir", "raft_address", "grpc_address", "metrics_address", "raft_bind",
            "secret", "secret_file", "fsync", "peers", "raft", "scheduler", "webhooks", "limits",
            "tls", "acl", "test_mode", "join", "history", "metrics", "shards", "raft_ports"}


def from_dict(d: dict, *, base_dir: Path | None = None) -> NodeConfig:
    _check_keys(d, TOP_KEYS, "the config")
    node_id = d.get("node_id")
    if not isinstance(node_id, str) or not re.match(r"^[A-Za-z0-9._-]{1,64}$", node_id):
        raise ConfigError(f"node_id must be 1-64 of A-Z a-z 0-9 . _ -, got {node_id!r}")
    if "data_dir" not in d:
        raise ConfigError("data_dir is required")
    data_dir = Path(str(d["data_dir"]))
    if base_dir is not None and not data_dir.is_absolute():
        data_dir = base_dir / data_dir
    peers = []
    for i, p in enumerate(d.get("peers") or []):
        if not isinstance(p, dict):
            raise ConfigError(f"peers[{i}] must be a table")
        _check_keys(p, {"id", "raft_address", "grpc_address"}, f"peers[{i}]")
        if not isinstance(p.get("id"), str) or not p["id"]:
            raise ConfigError(f"peers[{i}].id is required")
        peers.append(Peer(p["id"], _addr(p.get("raft_address"), f"peers[{i}].raft_address"),
                          _addr(p.get("grpc_address"), f"peers[{i}].grpc_address")))
    secret = d.get("secret", "")
    if d.get("secret_file"):
        if secret:
            raise ConfigError("set secret or secret_file, not both")
        path = Path(str(d["secret_file"]))
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        try:
            secret = path.read_text().strip()
        except OSError as e:
            raise ConfigError(f"cannot read secret_file {path}: {e.strerror}") from None
    fsync = d.get("fsync", "always")
    if fsync not in FSYNC_MODES:
        raise ConfigError(f"fsync must be one of {', '.join(FSYNC_MODES)}, got {fsync!r}")
    cfg = NodeConfig(
        node_id=node_id, data_dir=data_dir,
        raft_address=_addr(d.get("raft_address"), "raft_address"),
        grpc_address=_addr(d.get("grpc_address"), "grpc_address"),
        metrics_address=_addr(d["metrics_address"], "metrics_address") if d.get("metrics_address") else "",
        raft_bind=_addr(d["raft_bind"], "raft_bind") if d.get("raft_bind") else "",
        secret=str(secret), fsync=fsync, peers=tuple(peers),
        raft=_raft(d.get("raft") or {}), scheduler=_scheduler(d.get("scheduler") or {}),
        webhooks=_webhooks(d.get("webhooks") or {}),
        limits=_limits(d.get("limits") or {}),
        tls=_tls(_table(d, "tls"), base_dir),
        acl=_acl(d.get("acl") or {}),
        history=_history(d.get("history") or {}),
        metrics=_metrics(d.get("metrics") or {}),
        test_mode=bool(d.get("test_mode", False)),
        join=_join(d.get("join")),
        shards=_shards(d.get("shards", 1)),
        raft_ports=_raft_ports(d.get("raft_ports", "")),
    )
    validate(cfg)
    return cfg


def _shards(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SHARDS:
        raise ConfigError(f"shards must be an integer in [1, {MAX_SHARDS}], got {value!r}")
    return value


def _raft_ports(value: object) -> str:
    if value != "" and value not in RAFT_PORT_MODES:
        raise ConfigError(f"raft_ports must be one of {', '.join(RAFT_PORT_MODES)}, got {value!r}")
    return str(value)


def _join(value: object) -> tuple[str, ...]:
    """`join`: gRPC addresses of the cluster a node with an empty data dir asks to add it
    (a list, or one comma-separated string as --join gives it)."""
    if value is None or value == "":
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(f"join must be a list of host:port, got {value!r}")
    return tuple(_addr(str(x).strip(), "join") for x in items if str(x).strip())


def validate(cfg: NodeConfig) -> None:
    ids = [p.id for p in cfg.members]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"node ids must be unique, got {', '.join(ids)}")
    for attr in ("raft_address", "grpc_address"):
        addrs = [getattr(p, attr) for p in cfg.members]
        if len(set(addrs)) != len(addrs):
            raise ConfigError(f"every node needs its own {attr}")
    if len(cfg.members) > 1 and not cfg.secret:
        raise ConfigError(
            "refusing to start a multi-node cluster without a cluster secret: the Raft peer protocol "
            "deserializes (unpickles) what it receives, so anyone who can reach the Raft port could run "
            f"code on this node. Set secret_file (or secret), the same on every node: {GEN_SECRET_HINT}")
    weakness = secret_weakness(cfg.secret) if cfg.secret else None
    if weakness:
        raise ConfigError(f"the cluster secret is {weakness}; it guards code execution on every "
                          f"node, so {GEN_SECRET_HINT} (the same file on every node)")
    if cfg.join and not cfg.secret:
        raise ConfigError("join needs the cluster's secret (secret_file): the joining node talks Raft "
                          f"with the cluster and signs its join request with it; {GEN_SECRET_HINT}")
    if len(cfg.members) % 2 == 0:
        raise ConfigError(f"a cluster needs an odd number of voting nodes (1, 3 or 5), got {len(cfg.members)}")
    if cfg.test_mode and os.environ.get("SCHEDD_TEST_MODE") != "1":
        raise ConfigError("test_mode is for the test suite only (set SCHEDD_TEST_MODE=1 to allow it)")


def load(path: str | Path, **overrides) -> NodeConfig:
    path = Path(path)
    try:
        with path.open("rb") as f:
            d = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    d.update({k: v for k, v in overrides.items() if v not in (None, "")})
    try:
        return from_dict(d, base_dir=path.parent)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
