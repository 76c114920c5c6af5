"""The API edge of job secrets: plaintext `env_secret` values in a request become sealed values
in the spec before anything is proposed, and reads show only masks (schedd.core.model.mask_secret).

Versions: a value keeps its version (and its ciphertext, so the canonical spec and the job's
version do not change) while it is sent again unchanged, or sent back as its mask; a new value
gets the stored version + 1 (1 for a new name).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schedd.core.model import SECRET_MASK_RE, ValidationError
from schedd.core.specs import SealedSecret
from schedd.security.secrets import EnvSealer, SecretError

__all__ = ["seal_spec_secrets"]


def seal_spec_secrets(d: dict[str, Any], stored: Mapping[str, SealedSecret], sealer: EnvSealer | None) -> None:
    """Replace the plaintext values of d["env_secret"] (a request's JobSpec as a dict, before
    validation) by sealed ones, in the form validation takes ({"v": version, "ct": ciphertext}),
    in place. `stored` is the job's current sealed env_secret. Raises ValidationError."""
    plain = d.get("env_secret") or {}
    if not plain:
        d.pop("env_secret", None)
        return
    job = d.get("name") or ""
    out: dict[str, dict] = {}
    for name in sorted(plain):
        value = plain[name]
        old = stored.get(name)
        m = SECRET_MASK_RE.match(value) if isinstance(value, str) else None
        if m is not None:
            if old is None:
                raise ValidationError(f"env_secret {name!r}: {value} keeps a stored value, and "
                                      f"job {job!r} has none under that name; send the value")
            out[name] = old.to_dict()
            continue
        if not isinstance(value, str):
            raise ValidationError(f"env_secret {name!r} must be text")
        if sealer is None:
            raise ValidationError(str(SecretError("env_secret needs a cluster secret (set "
                                                  "secret_file in the node config)")))
        if old is not None and _opens_to(sealer, job, name, old, value):
            out[name] = old.to_dict()
        else:
            version = (old.version if old is not None else 0) + 1
            out[name] = SealedSecret(version, sealer.seal(job, name, value)).to_dict()
    d["env_secret"] = out


def _opens_to(sealer: EnvSealer, job: str, name: str, old: SealedSecret, value: str) -> bool:
    try:
        return sealer.open(job, name, old.ciphertext) == value
    except SecretError:
        return False
