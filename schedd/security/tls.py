"""gRPC TLS: server credentials that reload on SIGHUP, channel credentials, and peer principals.

Why dynamic credentials: a node must rotate its certificate without a restart (a restart is a
leader election). gRPC's ``dynamic_ssl_server_credentials`` asks a fetcher before EVERY new
handshake whether the certificate changed; established connections keep the certificate they
were made with. So the fetcher must be cheap: it compares a generation counter and returns None
("no change") unless `CertReloader.request()` was called since it last looked. Only then are the
files re-read, once per request for all ports sharing the reloader. A reload that fails (a half
copied file, a key that does not match the certificate, an expired certificate) keeps the
certificate in service and logs why: a typo during rotation must not take the node off the air.

`request()` only increments an integer, so it is safe from a signal handler (`signal.signal` or
`loop.add_signal_handler`); the daemon's SIGHUP handler calls it (docs/security-tls.md).
`reload_now()` does the same and loads at once, for an operator who wants the outcome logged at
SIGHUP time rather than at the next connection.

mTLS rule: a configured client CA means client certificates are REQUIRED and verified against
it; without one the server asks for none. gRPC fills the x509 properties of the auth context
only from a certificate it verified under these credentials, which is why
`principal_from_auth_context` may trust them (the naming rule is in schedd.security.certs).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from schedd.security.certs import principal_of_uris

log = logging.getLogger("schedd.security.tls")


class TlsError(ValueError):
    """A certificate, key or CA file that cannot serve; the message names the file and why."""


@dataclass(slots=True, frozen=True)
class ServerTlsFiles:
    """A node's TLS files ([tls] cert, key, client_ca). The paths are fixed at start: a reload
    re-reads these files, so whether mTLS is required never changes while the node runs."""
    cert: Path
    key: Path
    client_ca: Path | None = None


@dataclass(slots=True, frozen=True)
class ServerMaterial:
    """Validated server TLS material and what the logs say about it."""
    config: grpc.ServerCertificateConfiguration
    serial: int
    subject: str
    not_after: dt.datetime


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise TlsError(f"cannot read the {what} {path}: {e.strerror or e}") from e


def _certs(data: bytes, path: Path, what: str) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as e:
        raise TlsError(f"the {what} {path} is not a PEM certificate: {e}") from e
    if not certs:
        raise TlsError(f"the {what} {path} holds no certificate")
    return certs


def _check_pair(cert_pem: bytes, key_pem: bytes, cert_path: Path, key_path: Path,
                now: dt.datetime) -> x509.Certificate:
    """The leaf of a cert file, once its key is its own and it is valid at `now`."""
    leaf = _certs(cert_pem, cert_path, "certificate")[0]
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as e:
        raise TlsError(f"the key {key_path} is not an unencrypted PEM private key: {e}") from e
    if key.public_key() != leaf.public_key():
        raise TlsError(f"the key {key_path} is not the private key of {cert_path}")
    if not leaf.not_valid_before_utc <= now <= leaf.not_valid_after_utc:
        raise TlsError(f"the certificate {cert_path} is valid from {leaf.not_valid_before_utc:%F %T}"
                       f" to {leaf.not_valid_after_utc:%F %T} UTC, not now ({now:%F %T} UTC)")
    return leaf


def load_server_material(files: ServerTlsFiles, *, now: dt.datetime | None = None) -> ServerMaterial:
    """Read and validate a node's server TLS files; TlsError says what is wrong."""
    now = now or dt.datetime.now(dt.UTC)
    cert_pem, key_pem = _read(files.cert, "certificate"), _read(files.key, "key")
    leaf = _check_pair(cert_pem, key_pem, files.cert, files.key, now)
    roots = None
    if files.client_ca is not None:
        roots = _read(files.client_ca, "client CA")
        _certs(roots, files.client_ca, "client CA")
    config = grpc.ssl_server_certificate_configuration([(key_pem, cert_pem)], root_certificates=roots)
    return ServerMaterial(config=config, serial=leaf.serial_number, subject=leaf.subject.rfc4514_string(),
                          not_after=leaf.not_valid_after_utc)


class CertReloader:
    """Server credentials for any number of gRPC ports that pick up new files after `request()`.

    Construction loads the files and raises TlsError if they cannot serve (the node refuses to
    start). Thread-safe: gRPC calls the fetchers from its own threads."""

    def __init__(self, files: ServerTlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._requested = 0          # written only by request(): no lock, signal-handler safe
        self._loaded = 0
        self._material = load_server_material(files)
        self.last_error: str | None = None
        log.info("TLS: serving %s (serial %x, valid to %s)%s", self._material.subject,
                 self._material.serial, self._material.not_after,
                 ", client certificates required" if self.mtls else "")

    @property
    def mtls(self) -> bool:
        return self.files.client_ca is not None

    @property
    def material(self) -> ServerMaterial:
        """What the next handshake will use (loading first if a reload was requested)."""
        return self._current()

    def request(self) -> None:
        """Ask for the files to be re-read before the next handshake (the SIGHUP hook)."""
        self._requested += 1

    def reload_now(self) -> str | None:
        """Request a reload and do it now; the reason it failed, or None."""
        self.request()
        self._current()
        return self.last_error

    def _current(self) -> ServerMaterial:
        with self._lock:
            target = self._requested
            if self._loaded != target:
                self._loaded = target
                self._load()
            return self._material

    def _load(self) -> None:
        old = self._material
        try:
            new = load_server_material(self.files)
        except TlsError as e:
            self.last_error = str(e)
            log.warning("TLS reload failed, still serving serial %x: %s", old.serial, e)
            return
        self.last_error = None
        self._material = new
        log.info("TLS reloaded: serving %s (serial %x, was %x; valid to %s)", new.subject,
                 new.serial, old.serial, new.not_after)

    def credentials(self) -> grpc.ServerCredentials:
        """Credentials for one `server.add_secure_port`; each port gets its own fetcher, so a
        reload reaches every port that shares this reloader."""
        served = [self._current()]

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            try:
                current = self._current()
            except Exception:  # never fail a handshake here
                log.exception("TLS certificate fetcher failed; keeping the current certificate")
                return None
            if current is served[0]:
                return None
            served[0] = current
            return current.config

        return grpc.dynamic_ssl_server_credentials(served[0].config, fetch,
                                                   require_client_authentication=self.mtls)


def channel_credentials(ca: Path, cert: Path | None = None, key: Path | None = None,
                        *, now: dt.datetime | None = None) -> grpc.ChannelCredentials:
    """Credentials for a client, worker or node dialing a node: trust `ca`, and present
    `cert`/`key` (both or neither) for mTLS. Files are validated first so a bad one is named
    here, not as an opaque handshake failure later. Channel credentials are fixed per channel:
    after a reload, the caller makes new channels (docs/security-tls.md)."""
    if (cert is None) != (key is None):
        raise TlsError("a client certificate needs its key and a key its certificate")
    roots = _read(ca, "CA")
    _certs(roots, ca, "CA")
    if cert is None or key is None:
        return grpc.ssl_channel_credentials(root_certificates=roots)
    cert_pem, key_pem = _read(cert, "certificate"), _read(key, "key")
    _check_pair(cert_pem, key_pem, cert, key, now or dt.datetime.now(dt.UTC))
    return grpc.ssl_channel_credentials(root_certificates=roots, private_key=key_pem,
                                        certificate_chain=cert_pem)


def principal_from_auth_context(auth: Mapping[str, Sequence[bytes]]) -> str | None:
    """The principal (``kind/name``) of a TLS peer whose certificate carries one schedd URI SAN,
    else None (plaintext, no client certificate, or a certificate naming no one or two)."""
    if b"ssl" not in auth.get("transport_security_type", ()):
        return None
    uris = [*auth.get("peer_uri", ()), *auth.get("x509_subject_alternative_name", ())]
    return principal_of_uris(v.decode("utf-8", "replace") for v in uris)


def peer_principal(context: grpc.ServicerContext | grpc.aio.ServicerContext) -> str | None:
    """`principal_from_auth_context` of a call's context (sync or aio servicer)."""
    return principal_from_auth_context(context.auth_context() or {})
