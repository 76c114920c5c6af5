"""What this build of schedd is and what it understands: the one place every version a node
reports comes from (``schedd --version``, ``cluster status``, the snapshot file header, the join
check and the feature levels).

Why the zone database and croniter are here: the firing instants a replica computes depend on
them (and on schedd's own cron rules, whose revision rides with croniter's version), and
replicas must compute the same instants. A node whose tzdata or croniter differs from
the cluster's is a correctness hazard, not a cosmetic difference, so it is reported and refused
where it matters (joining, restoring).
"""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass

from schedd.core import commands, schedule
from schedd.core.commands import FEATURES, FeatureTable
from schedd.core.image import READABLE_FORMATS, SNAPSHOT_FORMAT
# The gRPC API's compatibility level: defined once, in the package the clients install too.
from schedd_proto import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION", "BuildInfo", "build_info", "croniter_version", "schedd_version", "tzdb_version"]


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
    """croniter's version and the revision of schedd's own cron rules, as one text ("7.0.0+rules2"):
    both decide the instants a replica computes, so a node that differs in either is refused at
    join and at restore, and flagged by `cluster status`, like a croniter upgrade."""
    return f"{_dist_version('croniter')}+rules{schedule.RULES}"


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
    feature_level: int = 1           # the highest feature level this build supports

    def schedule_deps(self) -> tuple[str, str]:
        """What must be equal on every replica for them to compute the same instants."""
        return self.tzdb, self.croniter

    def one_line(self) -> str:
        return (f"schedd {self.version} (protocol {self.protocol}, entry codec {self.entry_codec}, "
                f"feature level {self.feature_level}, snapshot format {self.snapshot_format}, "
                f"tzdata {self.tzdb}, croniter {self.croniter})")


@functools.cache
def _build_info(features: FeatureTable) -> BuildInfo:
    return BuildInfo(version=schedd_version(), protocol=PROTOCOL_VERSION, entry_codec=commands.VERSION,
                     snapshot_format=SNAPSHOT_FORMAT[1],
                     readable_snapshot_formats=tuple(f[1] for f in READABLE_FORMATS),
                     tzdb=tzdb_version(), croniter=croniter_version(), feature_level=features.max_level)


def build_info(features: FeatureTable = FEATURES) -> BuildInfo:
    """This build's facts; `features` is the node's feature table (injected: a test's node may
    run an older build's table, and then reports its levels)."""
    return _build_info(features)
