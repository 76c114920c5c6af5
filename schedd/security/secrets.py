"""Encryption of job secrets (`env_secret`) in the replicated state.

A secret value is sealed with AES-256-GCM under a key derived (HKDF-SHA256) from the cluster
secret, with the job's name and the variable's name as associated data, so a ciphertext copied
to another job or variable does not open. Sealing happens at the API edge, before the entry is
proposed: the log, the journal and the snapshots hold only ciphertext, and apply (which must be
deterministic) never sees a random nonce being drawn. The leader opens a value only to put it in
the Assignment of the worker an attempt is given to.

What protects the values at rest is the cluster secret: whoever holds it and a data directory
can decrypt them; whoever holds only the data directory (a backup, a snapshot) cannot.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["EnvSealer", "SecretError", "Sealed", "derive_key", "open_secrets"]

_SALT = b"schedd env_secret salt v1"
_INFO = b"schedd env_secret aes-256-gcm v1"
_PREFIX = "a1:"                  # the format of a sealed value: a1:<base64(nonce || ciphertext)>
_NONCE_BYTES = 12


def derive_key(cluster_secret: str, salt: bytes, info: bytes) -> bytes:
    """A 256-bit key for one purpose (named by `salt` and `info`) derived from the cluster secret
    with HKDF-SHA256: every use of the secret gets its own key, none the secret itself."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(cluster_secret.encode())


class SecretError(ValueError):
    """A secret cannot be sealed (no cluster secret) or opened (wrong key, altered text)."""


class EnvSealer:
    """Seals and opens env_secret values of one cluster (one key, derived once)."""

    __slots__ = ("_aead",)

    def __init__(self, cluster_secret: str) -> None:
        if not cluster_secret:
            raise SecretError("env_secret needs a cluster secret (set secret_file in the node "
                              "config): its key is derived from it")
        self._aead = AESGCM(derive_key(cluster_secret, _SALT, _INFO))

    @staticmethod
    def _aad(job: str, name: str) -> bytes:
        return f"schedd/env_secret\0{job}\0{name}".encode()

    def seal(self, job: str, name: str, value: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        ct = self._aead.encrypt(nonce, value.encode(), self._aad(job, name))
        return _PREFIX + base64.b64encode(nonce + ct).decode()

    def open(self, job: str, name: str, sealed: str) -> str:
        if not sealed.startswith(_PREFIX):
            raise SecretError(f"env_secret {name!r} of {job!r}: unknown format")
        try:
            raw = base64.b64decode(sealed[len(_PREFIX):], validate=True)
            plain = self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], self._aad(job, name))
        except (ValueError, InvalidTag):
            raise SecretError(f"env_secret {name!r} of {job!r} does not open with this cluster's "
                              "key (another cluster secret, or altered)") from None
        return plain.decode()


class Sealed(Protocol):
    """A sealed value as a job's spec keeps it (schedd.core.specs.SealedSecret)."""

    @property
    def ciphertext(self) -> str: ...


def open_secrets(sealed: Mapping[str, Sealed], sealer: EnvSealer | None, job: str) -> dict[str, str]:
    """The plaintext of a job's sealed env_secret, for the Assignment of the worker that runs it
    (each value is sealed to `job`, the job's name). Raises SecretError when one does not open
    (the attempt must not run without it)."""
    if not sealed:
        return {}
    if sealer is None:
        raise SecretError("this node has no cluster secret to open env_secret with")
    return {k: sealer.open(job, k, v.ciphertext) for k, v in sealed.items()}
