"""The [tls] config table, the context file and the client channel builder, without a cluster:
strict validation with messages naming the key, precedence flag > env > context, and the token
carried as `authorization: Bearer <token>` on every call."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from schedd.runtime.config import ConfigError, from_dict
from schedd_client import AsyncClient, Client
from schedd_client.channels import Security, SecurityError
from schedd_client.context import ContextError, load_context, resolve
from schedd_proto import scheduler_pb2 as pb

BASE = {"node_id": "n1", "data_dir": "d", "raft_address": "127.0.0.1:7001",
        "grpc_address": "127.0.0.1:7070"}


def test_tls_table_resolves_paths_against_the_config_dir(tmp_path):
    cfg = from_dict({**BASE, "tls": {"cert": "n1.pem", "key": "/abs/n1-key.pem", "client_ca": "ca.pem"}},
                    base_dir=tmp_path)
    assert cfg.tls.cert == tmp_path / "n1.pem" and cfg.tls.key == Path("/abs/n1-key.pem")
    assert cfg.tls.client_ca == tmp_path / "ca.pem" and cfg.tls.enabled and not cfg.tls.insecure
    assert not from_dict(BASE).tls.enabled and not from_dict(BASE).tls.insecure


@pytest.mark.parametrize("tls, message", [
    ({"cert": "a.pem"}, "[tls].cert and [tls].key go together"),
    ({"key": "a.pem"}, "[tls].cert and [tls].key go together"),
    ({"client_ca": "ca.pem"}, "[tls].client_ca needs [tls].cert"),
    ({"insecure": "yes"}, "[tls].insecure must be true or false"),
    ({"insecure": True, "cert": "a", "key": "b"}, "choose TLS or plaintext"),
    ({"cert": "", "key": "b"}, "[tls].cert must be a file path"),
    ({"certificate": "a"}, "unknown key in [tls]: certificate"),
])
def test_tls_table_is_strict(tls, message):
    with pytest.raises(ConfigError) as err:
        from_dict({**BASE, "tls": tls})
    assert message in str(err.value)


def test_context_toml_and_yaml(tmp_path):
    (tmp_path / "tok").write_text("acc.secret\n")
    toml = tmp_path / "c.toml"
    toml.write_text('cluster = "a:1, b:2"\nca = "ca.pem"\ncert = "c.pem"\nkey = "k.pem"\ntoken_file = "tok"\n')
    ctx = load_context(toml)
    assert ctx.cluster == ["a:1", "b:2"]
    assert ctx.security == Security(ca=tmp_path / "ca.pem", cert=tmp_path / "c.pem",
                                    key=tmp_path / "k.pem", token="acc.secret")
    yml = tmp_path / "c.yaml"
    yml.write_text("cluster: [a:1]\ntls: true\ntoken: t.s\n")
    ctx = load_context(yml)
    assert ctx.cluster == ["a:1"] and ctx.security.secure and ctx.security.token == "t.s"


@pytest.mark.parametrize("text, message", [
    ('ca = "x"\n', "cluster is required"),
    ('cluster = "a:1"\nserver = "x"\n', "unknown key: server"),
    ('cluster = "a:1"\ncert = "c"\n', "cert and key go together"),
    ('cluster = "a:1"\ntoken = "t"\ntoken_file = "f"\n', "token or token_file, not both"),
    ('cluster = "a:1"\ntoken_file = "missing"\n', "cannot read token_file"),
    ('cluster = 7\n', "cluster must be"),
    ('cluster = "a:1"\ntls = "on"\n', "tls must be true or false"),
    ('cluster = [\n', "invalid TOML"),
])
def test_context_is_strict(tmp_path, text, message):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ContextError) as err:
        load_context(f)
    assert message in str(err.value) and str(f) in str(err.value)


def test_resolve_flag_over_env_over_context(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('cluster = "ctx:1"\nca = "/ctx/ca.pem"\ncert = "/ctx/c.pem"\nkey = "/ctx/k.pem"\n')
    env = {"SCHEDD_CONTEXT": str(f)}
    assert resolve(env=env) == (["ctx:1"], Security(ca=Path("/ctx/ca.pem"), cert=Path("/ctx/c.pem"),
                                                    key=Path("/ctx/k.pem")))
    env |= {"SCHEDD_CLUSTER": "env:1", "SCHEDD_CA": "/env/ca.pem"}
    cluster, sec = resolve(env=env)
    assert cluster == ["env:1"] and sec.ca == Path("/env/ca.pem") and sec.cert == Path("/ctx/c.pem")
    cluster, sec = resolve("flag:1", ca="/flag/ca.pem", env=env)
    assert cluster == ["flag:1"] and sec.ca == Path("/flag/ca.pem")
    assert resolve(env={}) == (["127.0.0.1:7070"], Security())


def test_bad_client_files_are_named(tmp_path):
    (tmp_path / "ca.pem").write_text("garbage")
    with pytest.raises(SecurityError, match="ca.pem is not a PEM certificate"):
        Client("127.0.0.1:1", ca=tmp_path / "ca.pem")
    with pytest.raises(SecurityError, match="cannot read the CA"):
        Client("127.0.0.1:1", ca=tmp_path / "missing.pem")
    with pytest.raises(SecurityError, match="needs its key"):
        Client("127.0.0.1:1", tls=True, cert=tmp_path / "c.pem")
    from schedd_worker import Worker
    with pytest.raises(SecurityError, match="missing.pem"):
        Worker("127.0.0.1:1", ca=str(tmp_path / "missing.pem"))


async def test_the_token_travels_as_bearer_metadata_sync_and_async():
    seen: list[str | None] = []

    async def status(request, context):
        seen.append(dict(context.invocation_metadata()).get("authorization"))
        return pb.ClusterStatus(leader_id="n1")

    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("schedd.v1.Cluster", {
        "Status": grpc.unary_unary_rpc_method_handler(
            status, request_deserializer=pb.ClusterStatusRequest.FromString,
            response_serializer=pb.ClusterStatus.SerializeToString)})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with AsyncClient(f"127.0.0.1:{port}", token="acc.secret", timeout=10) as cl:
            assert (await cl.cluster_status()).leader_id == "n1"

        def blocking() -> None:
            with Client(f"127.0.0.1:{port}", token="acc.other", timeout=10) as cl:
                cl.cluster_status()
            with Client(f"127.0.0.1:{port}", timeout=10) as cl:
                cl.cluster_status()
        await asyncio.to_thread(blocking)
    finally:
        await server.stop(None)
    assert seen == ["Bearer acc.secret", "Bearer acc.other", None]


def test_worker_and_schedctl_name_a_bad_tls_file_and_exit_2(tmp_path, capsys):
    from schedd_client.schedctl import main as schedctl
    from schedd_worker.cli import main as worker
    missing = str(tmp_path / "missing-ca.pem")
    assert worker(["--ca", missing, "--allow-root", "--name", "w"]) == 2
    assert f"cannot read the CA {missing}" in capsys.readouterr().err
    assert schedctl(["--ca", missing, "cluster", "status"]) == 2
    assert f"cannot read the CA {missing}" in capsys.readouterr().err
    bad_ctx = tmp_path / "ctx.toml"
    bad_ctx.write_text('cluster = "a:1"\nsecret = "x"\n')
    assert schedctl(["--context", str(bad_ctx), "cluster", "status"]) == 2
    assert "unknown key: secret" in capsys.readouterr().err


def test_quota_key_is_not_the_tls_key_option():
    """`schedctl quota set KEY N` once stored KEY where `--key` (the TLS private key) lives, so
    with TLS configured schedctl tried to read the quota key as a key file."""
    from schedd_client.schedctl import build_parser
    args = build_parser().parse_args(["--key", "me.key", "quota", "set", "lane:backfill", "1"])
    assert (args.key, args.quota_key) == ("me.key", "lane:backfill")
    args = build_parser().parse_args(["quota", "delete", "team:a"])
    assert (args.key, args.quota_key) == (None, "team:a")


def test_an_explicit_context_wins_over_the_environment(tmp_path):
    """SCHEDD_CERT and friends overrode a certificate named in an explicit
    --context file. Order: flags > --context file > environment > $SCHEDD_CONTEXT > default; the
    environment still fills what the explicit file leaves unset (a cert and its key as a pair)."""
    f = tmp_path / "prod.toml"
    f.write_text('cluster = "ctx:1"\nca = "/ctx/ca.pem"\ncert = "/ctx/c.pem"\nkey = "/ctx/k.pem"\n')
    env = {"SCHEDD_CLUSTER": "env:1", "SCHEDD_CA": "/env/ca.pem", "SCHEDD_CERT": "/env/c.pem",
           "SCHEDD_KEY": "/env/k.pem", "SCHEDD_TOKEN": "env.token"}
    cluster, sec = resolve(context=str(f), env=env)
    assert cluster == ["ctx:1"]
    assert (sec.ca, sec.cert, sec.key) == (Path("/ctx/ca.pem"), Path("/ctx/c.pem"), Path("/ctx/k.pem"))
    assert sec.token == "env.token"                              # the file names none: filled
    cluster, sec = resolve("flag:1", context=str(f), cert="/flag/c.pem", key="/flag/k.pem", env=env)
    assert cluster == ["flag:1"] and (sec.cert, sec.key) == (Path("/flag/c.pem"), Path("/flag/k.pem"))
    bare = tmp_path / "bare.toml"
    bare.write_text('cluster = "ctx:2"\ntoken = "file.token"\n')
    cluster, sec = resolve(context=str(bare), env=env)
    assert cluster == ["ctx:2"] and sec.token == "file.token"
    assert (sec.ca, sec.cert, sec.key) == (Path("/env/ca.pem"), Path("/env/c.pem"), Path("/env/k.pem"))
    # $SCHEDD_CONTEXT is the default context: the environment's variables still override it
    cluster, sec = resolve(env={**env, "SCHEDD_CONTEXT": str(f)})
    assert cluster == ["env:1"] and sec.cert == Path("/env/c.pem")
