"""What following Ray Job drivers costs as a cluster's job history grows.

    python benchmarks/bench_job_poll.py                      # 8, 300 and 1,000 ended jobs
    python benchmarks/bench_job_poll.py --history 0 3000 --calls 10

The controller learns that a driver ended by reading its Ray Job's status through the Jobs API at every tick while
any driver runs. This starts a one-node Ray head with its dashboard, writes N ended Ray Jobs into the Jobs API's
store (as a cluster that has run N jobs keeps them), and times the two ways to read: ``list_jobs`` (every job the
cluster ever ran) and ``get_job_info`` for each of 1 and 8 tracked jobs (what the controller reads now). Reported
per call: wall time, and the CPU time of every process on the machine (the dashboard's job module does the work
in a process of its own). Writes benchmarks/out/job_poll.json.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown, print_machine, write_json  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _all_cpu_s() -> float:
    """CPU seconds used so far by every process this user can read (the ones that end meanwhile are missed)."""
    total = 0.0
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def _per_call(fn: Callable[[], Any], calls: int) -> tuple[float, float]:
    cpu0, wall0 = _all_cpu_s(), time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - wall0) / calls * 1000, (_all_cpu_s() - cpu0) / calls * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, nargs="+", default=[0, 300, 1000],
                        help="numbers of ended Ray Jobs the cluster keeps, measured in this order")
    parser.add_argument("--calls", type=int, default=20, help="reads per measurement")
    args = parser.parse_args(argv)
    print_machine()
    root = tempfile.mkdtemp(prefix="jp", dir="/tmp")  # short: Ray's socket paths must stay under 108 bytes
    os.mkdir(os.path.join(root, "ray"))
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
                       "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": root})
    import ray
    from ray.cluster_utils import Cluster
    from ray.dashboard.modules.job.common import JobInfo, JobInfoStorageClient, JobStatus
    from ray.job_submission import JobSubmissionClient

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": True, "dashboard_port": 0, "temp_dir": os.path.join(root, "ray")})
    rows: list[dict[str, Any]] = []
    try:
        ray.init(address=cluster.address)
        jobs = JobSubmissionClient(f"http://{cluster.webui_url}")
        store = JobInfoStorageClient(ray._private.worker.global_worker.gcs_client)

        async def keep(first: int, last: int) -> None:
            for i in range(first, last):
                await store.put_info(f"raysubmit_ended{i:06d}", JobInfo(
                    status=JobStatus.SUCCEEDED, entrypoint="python -m cuberay.run /storage/job.yaml",
                    metadata={"cuberay.io/job": f"team-job-{i}", "job_name": f"job-{i}"},
                    start_time=1, end_time=2, message="Job finished successfully.", driver_exit_code=0))

        kept = 0
        for history in sorted(args.history):
            asyncio.run(keep(kept, max(history, 8)))  # at least the 8 jobs read one by one below
            kept = max(history, 8)
            listed_ms, listed_cpu = _per_call(jobs.list_jobs, args.calls)
            row = {"ended jobs kept": kept, "list_jobs ms": f"{listed_ms:.1f}", "list_jobs CPU ms": f"{listed_cpu:.1f}"}
            for tracked in (1, 8):
                ids = [f"raysubmit_ended{i:06d}" for i in range(tracked)]
                wall, cpu = _per_call(lambda ids=ids: [jobs.get_job_info(i) for i in ids], args.calls)
                row[f"{tracked} get_job_info ms"], row[f"{tracked} get_job_info CPU ms"] = f"{wall:.1f}", f"{cpu:.1f}"
            rows.append(row)
            print(row, flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    columns = list(rows[0]) if rows else []
    print("\n" + markdown(rows, columns))
    write_json("job_poll", {"calls": args.calls, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
