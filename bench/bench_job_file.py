"""What reading a big job file costs schedctl before it sends anything (`job apply -f`): the
bounded loader (schedd_client.documents: libyaml's events, composed and counted in Python) and the
job documents turned into specs, against PyYAML's pure-Python SafeLoader over the same text (the
loader schedctl used before, without its counting: a floor for it).

Run: python bench/bench_job_file.py [--jobs 20000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedd_client.documents import build_all, load_documents
from schedd_client.specs import spec_from_document


def document(i: int) -> dict:
    return {"name": f"job-{i}", "team": "ops", "schedule": "*/5 * * * *", "timezone": "Europe/Berlin",
            "command": f"echo {i}", "labels": {"tier": "gold", "n": str(i)},
            "retry": {"max_attempts": 3, "initial_backoff": "10s"}, "timeout": "5m", "overlap": "skip"}


def cpu(fn) -> tuple[float, object]:
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    a = ap.parse_args()
    data = yaml.safe_dump_all([document(i) for i in range(a.jobs)]).encode()
    floor, _ = cpu(lambda: list(yaml.load_all(data.decode(), Loader=yaml.SafeLoader)))
    load, located = cpu(lambda: load_documents(data, "jobs.yaml"))
    build, _ = cpu(lambda: build_all(located, spec_from_document))
    print(f"{a.jobs:,} jobs, {len(data) / 1e6:.1f} MB of YAML, CPU seconds")
    print(f"PyYAML SafeLoader (pure Python, no bounds)  {floor:7.2f}")
    print(f"schedctl's bounded loader (libyaml events)  {load:7.2f}   ({floor / load:.1f}x faster)")
    print(f"documents -> JobSpecs                      {build:7.2f}")


if __name__ == "__main__":
    main()
