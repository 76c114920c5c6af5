# Partial type stubs for pysyncobj 0.3.x (it ships none): the names schedd uses. Anything not
# declared is Any, so code reaching into pysyncobj's internals type-checks as untyped there.
from typing import Any

from pysyncobj.syncobj import FAIL_REASON as FAIL_REASON
from pysyncobj.syncobj import SyncObj as SyncObj
from pysyncobj.syncobj import SyncObjConf as SyncObjConf
from pysyncobj.syncobj import SyncObjConsumer as SyncObjConsumer
from pysyncobj.syncobj import _RAFT_STATE as _RAFT_STATE
from pysyncobj.syncobj import replicated as replicated
from pysyncobj.syncobj import replicated_sync as replicated_sync

def __getattr__(name: str) -> Any: ...
