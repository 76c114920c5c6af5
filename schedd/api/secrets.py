"""The API edge of job secrets: plaintext `env_secret` values in a request become sealed values
in the spec before anything is proposed, and reads show only masks (schedd.core.model.mask_secret).

Versions: a value keeps its version (and its ciphertext, so the canonical spec and the job's
version do not change) while it is sent again unchanged, or sent back as its mask; a new value
gets the stored version + 1 (1 for a new name).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schedd.core.model import SECRET_MASK_RE, ValidationError, mask_secret
from schedd.security.secrets import EnvSealer, SecretError, stored_secrets

__all__ = ["seal_spec_secrets", "masked", "stored_secrets"]


def seal_spec_secrets(d: dict[str, Any], stored: Mapping[str, dict], sealer: EnvSealer | None) -> None:
    """Replace the plaintext values of d["env_secret"] (a JobSpec as a dict) by sealed ones, in
    place. `stored` is the job's current sealed env_secret. Raises ValidationError."""
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
            out[name] = dict(old)
            continue
        if not isinstance(value, str):
            raise ValidationError(f"env_secret {name!r} must be text")
        if sealer is None:
            raise ValidationError(str(SecretError("env_secret needs a cluster secret (set "
                                                  "secret_file in the node config)")))
        if old is not None and _opens_to(sealer, job, name, old, value):
            out[name] = dict(old)
        else:
            version = (old or {}).get("v", 0) + 1
            out[name] = {"v": version, "ct": sealer.seal(job, name, value)}
    d["env_secret"] = out


def _opens_to(sealer: EnvSealer, job: str, name: str, old: Mapping, value: str) -> bool:
    try:
        return sealer.open(job, name, str(old.get("ct", ""))) == value
    except SecretError:
        return False


def masked(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` as reads show it: each env_secret value replaced by its mask (a copy if changed)."""
    sealed = spec.get("env_secret")
    if not sealed:
        return spec
    out = dict(spec)
    out["env_secret"] = {k: mask_secret(int(v.get("v", 0))) for k, v in sealed.items()}
    return out
