"""What this build of schedd is and what it understands: the one place every version a node
reports comes from (``schedd --version``, ``cluster status``, the snapshot file header, the join
check and the feature levels).

Why the zone database and croniter are here: the firing instants a replica computes depend on
them, and replicas must compute the same instants. A node whose tzdata or croniter differs from
the cluster's is a correctness hazard, not a cosmetic difference, so it is reported and refused
where it matters (joining, restoring).
"""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass

from schedd.core import commands
from schedd.core.snapshot import READABLE_FORMATS, SNAPSHOT_FORMAT

# The gRPC API's compatibility level (package schedd.v1): raised when a message a client relies
# on changes meaning. Clients print it with ``schedctl --version``.
PROTOCOL_VERSION = 1


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def schedd_version() -> str:
    return _dist_version("schedd")


@functools.cache
def tzdb_version() -> str:
    """The IANA release of the zone data schedules use (the pinned ``tzdata`` package), or
    "host" when it is not installed and the host's /usr/share/zoneinfo is used."""
    try:
        import tzdata  # type: ignore[import-untyped]
    except ModuleNotFoundError:
        return "host"
    return str(getattr(tzdata, "IANA_VERSION", "unknown"))


@functools.cache
def croniter_version() -> str:
    return _dist_version("croniter")


@dataclass(frozen=True, slots=True)
class BuildInfo:
    """Everything about this build that a peer, an operator or a snapshot file needs to know."""
    version: str
    protocol: int
    entry_codec: int
    snapshot_format: int
    readable_snapshot_formats: tuple[int, ...]
    tzdb: str
    croniter: str

    def schedule_deps(self) -> tuple[str, str]:
        """What must be equal on every replica for them to compute the same instants."""
        return self.tzdb, self.croniter

    def one_line(self) -> str:
        return (f"schedd {self.version} (protocol {self.protocol}, entry codec {self.entry_codec}, "
                f"snapshot format {self.snapshot_format}, tzdata {self.tzdb}, croniter {self.croniter})")


@functools.cache
def build_info() -> BuildInfo:
    return BuildInfo(version=schedd_version(), protocol=PROTOCOL_VERSION, entry_codec=commands.VERSION,
                     snapshot_format=SNAPSHOT_FORMAT[1],
                     readable_snapshot_formats=tuple(f[1] for f in READABLE_FORMATS),
                     tzdb=tzdb_version(), croniter=croniter_version())
