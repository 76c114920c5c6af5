"""The key that authenticates backup files (`schedctl cluster snapshot save`, `schedd restore`).

A backup holds the whole state, and `schedd restore` turns it into a node's data dir: a file
anyone could forge (checksums are recomputed by whoever edits the file) would let them choose
every job, token hash and ACL row of the new cluster. So the leader signs the file's header,
which holds the body's length and sha256, with HMAC-SHA256, and restore checks that MAC before
it parses a byte of the header or the body.

The key is derived from the cluster secret (HKDF-SHA256 with a label of its own), never the
secret itself: the same secret keys the Raft transport, forwarded-call signatures and job
secrets, and a key for one purpose must not open another. Whoever holds the cluster secret can
sign a backup; a file signed under another cluster's secret is refused like a forged one.
"""

from __future__ import annotations

import hashlib
import hmac

from schedd.security.secrets import derive_key

__all__ = ["MAC_BYTES", "BackupKey", "BackupKeyError"]

_SALT = b"schedd backup salt v1"
_INFO = b"schedd backup file hmac-sha256 v1"
MAC_BYTES = 32


class BackupKeyError(ValueError):
    """No cluster secret to derive the key from."""


class BackupKey:
    """Signs and verifies backup file headers of one cluster (one key, derived once)."""

    __slots__ = ("_key",)

    def __init__(self, cluster_secret: str) -> None:
        if not cluster_secret:
            raise BackupKeyError("backup files are signed with a key derived from the cluster secret: "
                                 "set secret_file in the node config")
        self._key = derive_key(cluster_secret, _SALT, _INFO)

    def sign(self, data: bytes) -> bytes:
        return hmac.new(self._key, data, hashlib.sha256).digest()

    def verify(self, data: bytes, mac: bytes) -> bool:
        """Whether `mac` is this key's MAC of `data` (compared in constant time)."""
        return hmac.compare_digest(self.sign(data), mac)
