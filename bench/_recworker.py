"""The bench's schedd worker: one ``schedd_worker.Worker`` process whose in-process Python handler
``rec`` records each fire with its first statement (wall clock, job, the scheduled time schedd
hands it) and returns. Records go to a file in batches (every 0.2 s, off the event loop's hot
path), one line each: ``start_wall job scheduled_wall``; the parent scores them (bench/_score.py).

    python bench/_recworker.py RECORDS_FILE NAME SLOTS CLUSTER CA CERT KEY   (SCHEDD_TOKEN in env)
"""

from __future__ import annotations

import os
import sys
import threading
import time

from schedd.runtime.cluster import DIE_WITH_PARENT, die_with_parent
from schedd_worker import Worker

_buf: list[str] = []


def _flusher(path: str) -> None:
    with open(path, "a", buffering=1 << 16) as f:
        while True:
            time.sleep(0.2)
            if _buf:
                chunk = _buf[:]
                del _buf[:len(chunk)]
                f.write("".join(chunk))
                f.flush()


def main() -> None:
    if os.environ.get(DIE_WITH_PARENT) == "1":
        die_with_parent()
    path, name, slots, cluster, ca, cert, key = sys.argv[1:8]
    w = Worker(cluster, name=name, slots=int(slots), ca=ca or None, cert=cert or None, key=key or None,
               token=os.environ.get("SCHEDD_TOKEN") or None, drain_grace_s=1.0,
               allow_root=os.geteuid() == 0)     # the fault suite's loopback worker, as whoever runs it

    @w.handler("rec")
    async def rec(ctx) -> None:
        t = time.time()                      # the handler's first statement: what the user waits for
        _buf.append(f"{t:.6f} {ctx.job} {ctx.scheduled_ms / 1000:.3f}\n")

    threading.Thread(target=_flusher, args=(path,), daemon=True).start()
    w.run()


if __name__ == "__main__":
    main()
