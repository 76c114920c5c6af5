"""The repairs of pysyncobj's Raft core, one module each; `schedd.replication.raft_patches`
composes them into `RepairingSyncObj` and indexes which module holds which repair.

Every module here overrides or reads name-mangled private state of `pysyncobj.SyncObj`, so the
package is tied to one pysyncobj release, checked here before any of its modules loads.
"""

from __future__ import annotations

from pysyncobj.version import VERSION as _INSTALLED_VERSION

PYSYNCOBJ_VERSION = "0.3.17"
if _INSTALLED_VERSION != PYSYNCOBJ_VERSION:
    raise ImportError(f"schedd's Raft patches are written against pysyncobj {PYSYNCOBJ_VERSION}, "
                      f"found {_INSTALLED_VERSION}")
