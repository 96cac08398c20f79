"""The Jobs page's reads in the store alone, without and with the planner statistics the controller keeps.

    python benchmarks/bench_pages.py                       # SQLite, 110,000 jobs
    python benchmarks/bench_pages.py --jobs 20000 --url postgresql+psycopg://user@/db?host=/run/postgresql

A store (a scratch SQLite file unless ``--url`` names an empty database) filled with ``--jobs`` waiting Tasks:
tenant ``bulk`` (user ``bench``) and one in a thousand of tenant ``probe``. The store's ``job_page`` is timed
for a member of both tenants (the access rule then filters on tenant or user, which is what an index on the
submit time alone cannot serve without statistics) and for an admin (no filter): the first page, the page at
OFFSET 50,000 and a name substring; first as loaded, then after ``Store.refresh_statistics`` (``ANALYZE``), as
the controller runs it (control/planner_stats.py). Writes benchmarks/out/pages.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown, percentiles, print_machine, write_json  # noqa: E402

from cuberay.platform.api.records import JobRecord  # noqa: E402
from cuberay.platform.control.store import Store, default_url  # noqa: E402
from cuberay.platform.control.store_pages import JobFilter  # noqa: E402
from cuberay.platform.policy.states import JobState  # noqa: E402

MEMBER = ({"bulk", "probe"}, "bench")  # what a member of both tenants may read
SPEC = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "t", "tenant": "bulk"},
        "spec": {"workers": 1, "resources": {"cpu": "1"}, "command": "sleep 3600"}}


def fill(store: Store, jobs: int, batch: int = 5_000) -> None:
    for first in range(0, jobs, batch):
        records = []
        for i in range(first, min(jobs, first + batch)):
            tenant = "probe" if i % 1000 == 0 else "bulk"
            name = f"{tenant}-{i:06x}"
            records.append(JobRecord(id=f"{tenant}-{name}-{i}", tenant=tenant, name=name, kind="Task",
                                     user="bench" if tenant == "bulk" else "p", spec=SPEC, state=JobState.QUEUED,
                                     priority=5, submit_time=1e9 + i, seq=i, reason="waiting for quota"))
        store.add_jobs(records, "submitted", ["submitted"] * len(records))


def calls(store: Store, deep: int) -> dict[str, Callable[[], Any]]:
    out: dict[str, Callable[[], Any]] = {}
    for who, visible in (("member", MEMBER), ("admin", None)):
        out[f"{who}: first page"] = lambda v=visible: store.job_page(JobFilter(), 0, 50, v)
        out[f"{who}: OFFSET {deep:,}"] = lambda v=visible: store.job_page(JobFilter(), deep, 50, v)
        out[f"{who}: name=probe"] = lambda v=visible: store.job_page(JobFilter(name="probe"), 0, 50, v)
    return out


def timed(fn: Callable[[], Any], samples: int) -> dict[str, float]:
    values = []
    for _ in range(samples):
        start = time.perf_counter()
        fn()
        values.append(1000 * (time.perf_counter() - start))
    return percentiles(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=110_000, help="waiting jobs in the table")
    ap.add_argument("--samples", type=int, default=20, help="timed calls per read and phase")
    ap.add_argument("--url", help="an empty database's SQLAlchemy URL (default: a scratch SQLite file)")
    args = ap.parse_args()
    info = print_machine()
    with tempfile.TemporaryDirectory(prefix="cuberay-pages-") as scratch:
        with Store(args.url or default_url(scratch)) as store:
            start = time.perf_counter()
            fill(store, args.jobs)
            print(f"{args.jobs:,} jobs stored in {time.perf_counter() - start:.1f} s", flush=True)
            reads = calls(store, min(50_000, args.jobs // 2))
            rows = [{"phase": "as loaded", "read": name, **timed(fn, args.samples)} for name, fn in reads.items()]
            start = time.perf_counter()
            store.refresh_statistics()
            refresh_ms = round(1000 * (time.perf_counter() - start), 1)
            rows += [{"phase": "after refresh", "read": name, **timed(fn, args.samples)} for name, fn in reads.items()]
            backend = store.masked_url.split(":", 1)[0]
    table = markdown(rows, ["phase", "read", "n", "p50_ms", "p99_ms", "max_ms"])
    print(f"\n{backend}; refresh_statistics took {refresh_ms} ms\n\n{table}")
    path = write_json("pages", {"machine": info, "backend": backend, "jobs": args.jobs, "refresh_ms": refresh_ms,
                                "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
