"""A read beside a busy loop: what CPython's thread switch interval costs the controller's reads.

    python benchmarks/bench_convoy.py            # 200 page reads per setting

The controller answers reads on a thread of its own while its event loop orders a deep queue (pure Python,
0.6 s for 100,000 jobs). A read gives the interpreter up at every SQLite step and socket call; each time, it
gets it back only when the loop's thread is made to drop it, after the switch interval (5 ms by default). A
read that gives it up 50 times can so wait 250 ms for no work of its own. This measures one store-like read
(a page of 50 rows, each decoded from JSON, out of an indexed SQLite table of 100,000) alone, and beside a thread
that never stops computing, at the default interval and at the controller's (control/endpoint.py
``SWITCH_INTERVAL_S``, set in the actor). Writes benchmarks/out/convoy.json.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import percentiles, print_machine, write_json  # noqa: E402

from cuberay.platform.control.endpoint import SWITCH_INTERVAL_S  # noqa: E402

ROWS = 100_000


def build(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, tenant TEXT, submit_time REAL, spec TEXT)")
    spec = json.dumps({"kind": "Task", "spec": {"command": "sleep 3600", "resources": {"cpu": "1"}}})
    db.executemany("INSERT INTO jobs VALUES (?, ?, ?, ?)",
                   ((f"job-{i}", f"t{i % 3}", float(i), spec) for i in range(ROWS)))
    db.execute("CREATE INDEX jobs_time ON jobs (tenant, submit_time)")
    db.commit()
    db.close()


def read_page(db: sqlite3.Connection, offset: int) -> int:
    rows = db.execute("SELECT id, spec FROM jobs WHERE tenant = ? ORDER BY submit_time DESC LIMIT 50 OFFSET ?",
                      ("t1", offset)).fetchall()
    return sum(len(json.loads(spec)) for _, spec in rows)


def busy(stop: threading.Event) -> None:
    """The loop's thread: heap work that never waits (as ordering a deep queue)."""
    import heapq

    while not stop.is_set():
        heap = [(i * 7919 % 1000, i) for i in range(20_000)]
        heapq.heapify(heap)
        while heap:
            heapq.heappop(heap)


def measure(path: Path, samples: int, loop_busy: bool, interval: float) -> dict[str, float]:
    sys.setswitchinterval(interval)
    stop = threading.Event()
    thread = threading.Thread(target=busy, args=(stop,), daemon=True)
    if loop_busy:
        thread.start()
    times = []
    # Like the controller's reads group, the reads run on a thread of their own.
    def reads() -> None:
        db = sqlite3.connect(path, check_same_thread=False)
        for i in range(samples):
            t0 = time.perf_counter()
            read_page(db, (i * 97) % 5_000)
            times.append(1000 * (time.perf_counter() - t0))
        db.close()

    reader = threading.Thread(target=reads)
    reader.start()
    reader.join()
    stop.set()
    if loop_busy:
        thread.join()
    return percentiles(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args(argv)
    print_machine()
    default = sys.getswitchinterval()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "jobs.db"
        build(path)
        result = {
            "alone": measure(path, args.samples, False, default),
            f"beside a busy loop, interval {default * 1000:g} ms": measure(path, args.samples, True, default),
            f"beside a busy loop, interval {SWITCH_INTERVAL_S * 1000:g} ms":
                measure(path, args.samples, True, SWITCH_INTERVAL_S),
        }
    for name, figures in result.items():
        print(f"{name}: p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms", flush=True)
    write_json("convoy.json", {"samples": args.samples, "rows": ROWS, "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
