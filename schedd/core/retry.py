"""Retry policy: how many attempts, and how long to wait between them. Pure and deterministic:
the jitter is drawn from a hash of (execution id, attempt), never from a random generator, so
every replica computes the same retry time inside apply."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from schedd.core.specs import JobSpec

JITTER = 0.2                 # +-20 % around the exponential delay


@dataclass(slots=True, frozen=True)
class RetryPolicy:
    max_attempts: int = 1            # 1: no retry
    initial_backoff_s: float = 10.0
    max_backoff_s: float = 300.0
    multiplier: float = 2.0

    @classmethod
    def from_spec(cls, spec: JobSpec) -> RetryPolicy:
        """The spec's retry with the defaults filled in (0 in the spec: the default)."""
        r, d = spec.retry, cls()
        if r is None:
            return d
        return cls(max_attempts=max(1, int(r.max_attempts or d.max_attempts)),
                   initial_backoff_s=float(r.initial_backoff_seconds or d.initial_backoff_s),
                   max_backoff_s=float(r.max_backoff_seconds or d.max_backoff_s),
                   multiplier=float(r.multiplier or d.multiplier))

    def delay_ms(self, execution_id: str, failures: int) -> int:
        """The wait after the `failures`-th failed attempt (1-based): initial * multiplier^(n-1),
        capped, with deterministic jitter."""
        base = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (failures - 1))
        digest = hashlib.blake2b(f"{execution_id}#{failures}".encode(), digest_size=8).digest()
        unit = int.from_bytes(digest, "big") / 2 ** 64            # [0, 1)
        return max(0, round(base * (1 + JITTER * (2 * unit - 1)) * 1000))
