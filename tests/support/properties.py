"""How many examples a heavy property test draws.

The unit tier must stay under a minute on two cores, so the heaviest property tests (a
brute-force reference per example) draw a quarter of their examples by default; hypothesis
draws new ones every run, so CI runs add up to the full count over time. `make deep` (or
SCHEDD_DEEP_PROPERTIES=1) draws every example, for a change to the code those tests guard.
"""

from __future__ import annotations

import os

DEEP = os.environ.get("SCHEDD_DEEP_PROPERTIES", "") == "1"


def examples(full: int) -> int:
    """`full` examples in a deep run, a quarter of them (at least 50) otherwise."""
    return full if DEEP else max(50, full // 4)
