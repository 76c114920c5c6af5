"""The one place that builds gRPC channels to schedd nodes: for the SDK (``Client``,
``AsyncClient``), schedctl, schedd-worker and the nodes' own forwarding channels.

Why one place: "is this connection TLS, which CA does it trust, which certificate does it
present, which token does it carry" must be answered the same way by every caller, or one of them
ends up talking plaintext to a node that the others reach over TLS.

``Security`` says how to connect: ``Security()`` is plaintext (a loopback node with
``[tls] insecure = true``); ``Security(ca=..., cert=..., key=...)`` is TLS trusting ``ca`` (and
mTLS presenting ``cert``/``key``); ``Security(tls=True)`` is TLS trusting the system roots. A
``token`` travels as the call metadata ``authorization: Bearer <token>`` (gRPC's access token
call credentials; the SDK's clients add it to each call themselves, ``token_in_calls``). A token is never sent in cleartext over a network: without TLS, gRPC's local
credentials only connect to a loopback address.

The files are read each time a channel is made: a worker, which makes a channel per connection,
uses a rotated certificate from its next connection on.

Nodes build their channel credentials with ``schedd.security.tls.channel_credentials`` (which
validates the certificate with ``cryptography``, a daemon dependency) and pass them in as
``credentials``; the SDK only reads the PEM files, so schedd-client keeps its small dependency set.
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

__all__ = ["Security", "SecurityError", "CHANNEL_OPTIONS", "KEEPALIVE_MS", "KEEPALIVE_MIN_MS",
           "KEEPALIVE_OPTIONS", "open_channel", "open_aio_channel", "security_from_env", "with_files",
           "CA_ENV", "CERT_ENV", "KEY_ENV", "TOKEN_ENV", "env_token", "speaks_tls"]

CA_ENV, CERT_ENV, KEY_ENV, TOKEN_ENV = "SCHEDD_CA", "SCHEDD_CERT", "SCHEDD_KEY", "SCHEDD_TOKEN"

#: Reconnect quickly to a node that comes back (gRPC's default backoff grows to 120 s).
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]

#: A long-lived stream (the worker's to its leader) pings its connection this often and gives up
#: on it when a ping is not answered as long again: a leader that was SIGSTOPped or cut off keeps
#: its TCP connection open and would otherwise hold the stream until the worker's own checks.
KEEPALIVE_MS = 1000
#: What a node accepts (half the worker's period, for timer slack): gRPC's default server counts
#: pings more often than every 5 minutes on a connection that sends no data as abuse.
KEEPALIVE_MIN_MS = KEEPALIVE_MS // 2
KEEPALIVE_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.keepalive_time_ms", KEEPALIVE_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_MS),        # gRPC >= 1.6x times pings out by this one
    ("grpc.http2.max_pings_without_data", 0),            # an idle stream pings too (default 2)
]


class SecurityError(ValueError):
    """A CA, certificate, key or token that cannot make a channel; the message names it."""


@dataclass(slots=True, frozen=True)
class Security:
    """How a channel to a node is secured. ``tls`` is implied by ``ca`` (or ``credentials``)."""

    tls: bool = False
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    token: str | None = None
    #: Ready-made TLS channel credentials (the nodes' forwarding channels); overrides ca/cert/key.
    credentials: grpc.ChannelCredentials | None = None

    @property
    def secure(self) -> bool:
        return self.tls or self.ca is not None or self.credentials is not None

    def describe(self) -> str:
        """For logs and error hints: what this connects with (never the token)."""
        if not self.secure:
            return "plaintext"
        who = f", client certificate {self.cert}" if self.cert else ""
        return f"TLS (CA {self.ca or 'system roots'}{who})"

    def _channel_credentials(self) -> grpc.ChannelCredentials:
        if self.credentials is not None:
            return self.credentials
        if (self.cert is None) != (self.key is None):
            raise SecurityError("a client certificate needs its key and a key its certificate "
                                f"(got cert={self.cert}, key={self.key})")
        roots = _pem(self.ca, "CA", "CERTIFICATE") if self.ca is not None else None
        if self.cert is None or self.key is None:
            return grpc.ssl_channel_credentials(root_certificates=roots)
        return grpc.ssl_channel_credentials(
            root_certificates=roots, private_key=_pem(self.key, "key", "PRIVATE KEY"),
            certificate_chain=_pem(self.cert, "certificate", "CERTIFICATE"))

    def credentials_for_channel(self) -> grpc.ChannelCredentials | None:
        """The channel credentials (None: a plain insecure channel), the token composed in."""
        base = self.transport_credentials()
        if self.token is None:
            return base
        return grpc.composite_channel_credentials(base, grpc.access_token_call_credentials(self.token))

    def transport_credentials(self) -> grpc.ChannelCredentials | None:
        """What the connection itself is secured with, without the token: TLS; or, for a token
        without TLS, gRPC's local credentials (loopback only: no cleartext token on a wire);
        None (plaintext) only when there is no token."""
        if self.token is not None and (not self.token or any(c in self.token for c in "\r\n ")):
            raise SecurityError("the token is empty or contains spaces or line breaks")
        if not self.secure:
            return None if self.token is None else grpc.local_channel_credentials()
        return self._channel_credentials()


def _pem(path: Path, what: str, marker: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise SecurityError(f"cannot read the {what} {path}: {e.strerror or e}") from None
    if b"-----BEGIN " not in data or marker.encode() not in data:
        raise SecurityError(f"the {what} {path} is not a PEM {marker.lower()}")
    return data


def _options(options: Sequence[tuple[str, Any]] | None) -> list[tuple[str, Any]]:
    return list(CHANNEL_OPTIONS) + list(options or ())


def _credentials(security: Security | None, token_in_calls: bool) -> grpc.ChannelCredentials | None:
    security = security or Security()
    return security.transport_credentials() if token_in_calls else security.credentials_for_channel()


def open_channel(address: str, security: Security | None = None,
                 options: Sequence[tuple[str, Any]] | None = None, *,
                 token_in_calls: bool = False) -> grpc.Channel:
    """A blocking channel to ``address`` secured as ``security`` says (default: plaintext).
    ``token_in_calls``: the channel does not carry the token, the caller puts it in each call's
    metadata (the SDK does: gRPC's call credentials start a thread for every call, about a
    third of a client's CPU per call); the connection is secured the same way."""
    creds = _credentials(security, token_in_calls)
    if creds is None:
        return grpc.insecure_channel(address, options=_options(options))
    return grpc.secure_channel(address, creds, options=_options(options))


def open_aio_channel(address: str, security: Security | None = None,
                     options: Sequence[tuple[str, Any]] | None = None, *,
                     token_in_calls: bool = False) -> grpc.aio.Channel:
    """The asyncio twin of ``open_channel`` (call it inside the running event loop)."""
    creds = _credentials(security, token_in_calls)
    if creds is None:
        return grpc.aio.insecure_channel(address, options=_options(options))
    return grpc.aio.secure_channel(address, creds, options=_options(options))


def env_token(env: Mapping[str, str] | None = None) -> str | None:
    """``$SCHEDD_TOKEN`` (unset or blank: no token)."""
    return ((os.environ if env is None else env).get(TOKEN_ENV) or "").strip() or None


def security_from_env(env: Mapping[str, str] | None = None, base: Security | None = None) -> Security:
    """``base`` (default plaintext) with ``SCHEDD_CA``/``SCHEDD_CERT``/``SCHEDD_KEY`` and
    ``SCHEDD_TOKEN`` applied where set: what schedctl and schedd-worker use when no flag says
    otherwise."""
    env = os.environ if env is None else env
    return with_files(base or Security(), ca=env.get(CA_ENV), cert=env.get(CERT_ENV),
                      key=env.get(KEY_ENV), token=env_token(env))


PathArg = str | os.PathLike[str] | None


def with_files(base: Security, *, ca: PathArg = None, cert: PathArg = None, key: PathArg = None,
               token: str | None = None, tls: bool | None = None) -> Security:
    """``base`` with whichever of the given values are set (flags over env over context)."""
    return replace(base, ca=Path(ca) if ca else base.ca, cert=Path(cert) if cert else base.cert,
                   key=Path(key) if key else base.key, token=token or base.token,
                   tls=base.tls if tls is None else tls)


#: What an SSL error says when the other end answered, but not in TLS (a plaintext HTTP/2 server).
_NOT_TLS = ("wrong_version_number", "unexpected_record", "record_layer", "packet_length_too_long",
            "http_request", "unknown_protocol")


def speaks_tls(address: str, timeout: float = 1.0) -> bool:
    """Does the server at ``address`` ("host:port", "[v6]:port") answer a TLS handshake?

    gRPC reports a plaintext client talking to a TLS node as UNAVAILABLE ("Socket closed"), like
    a node that went away; this tells the two apart, so the client can stop at once with what to
    do instead of retrying until its timeout. Nothing is verified: a handshake (or a TLS alert,
    e.g. a client certificate required) is the answer; no answer or a plaintext one is not."""
    host, _, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as raw:
            with ctx.wrap_socket(raw, server_hostname=None):
                return True
    except ssl.SSLError as e:
        text = f"{e.reason or ''} {e}".lower()
        return not any(marker in text for marker in _NOT_TLS)
    except (OSError, ValueError):
        return False
