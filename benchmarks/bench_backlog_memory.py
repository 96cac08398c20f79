"""The live controller's memory over a backlog that never empties: RSS samples over time.

    python benchmarks/bench_backlog_memory.py                 # 5 minutes
    python benchmarks/bench_backlog_memory.py --minutes 60    # the hour in benchmarks/RELIABILITY.md
    python benchmarks/bench_backlog_memory.py --backlog 50000 --rate 50 --sample-s 60

A local platform (``client.up`` in a scratch directory, as ``cuberay demo``) with two
tenants: ``hold`` is guaranteed the head's CPUs and one hour-long Task holds all of
them, so ``stuck`` (no guarantee, nothing to borrow) never gets a job admitted. The
backlog is filled with ``--backlog`` copies of a one-CPU Task, then every second
``--rate`` more are submitted (one call) and the ``--rate`` oldest cancelled (one call
each; a rate the calls cannot keep up with becomes as fast as they go, and the rate
achieved is reported), so the queue stays deep and never empties while new jobs keep
arriving and old ones keep dying: the case where the controller's frozen heap
(cuberay/platform/control/heap.py) must still be let go of now and then (every
5 minutes: the frozen count jumps as everything alive is frozen again).

Every ``--sample-s`` the controller's resident memory (VmRSS of its process, found by
``ping``), its CPU seconds and the objects frozen out of its cycle collector are
printed. Reported: the samples, RSS after the fill, at the end and at most, and the
growth per hour fitted over the steady part (after the fill). Writes
benchmarks/out/backlog_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown, print_machine, write_json  # noqa: E402

from cuberay.platform import client  # noqa: E402
from cuberay.platform.demo import scratch_env  # noqa: E402
from cuberay.platform.policy.states import JobState  # noqa: E402

HEAD_CPUS = 8


def platform_file(scratch: Path) -> Path:
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "backlog"},
            "spec": {"storage": str(scratch / "storage"),
                     "tenants": [{"name": "hold", "members": ["*"],
                                  "quota": {"guaranteed": {"cpu": str(HEAD_CPUS)}}},
                                 {"name": "stuck", "members": ["*"]}]}}
    path = scratch / "platform.yaml"
    path.write_text(json.dumps(spec))
    return path


def task(tenant: str, name: str, cpus: int, seconds: float) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name, "tenant": tenant},
            "spec": {"workers": 1, "resources": {"cpu": str(cpus)}, "command": f"sleep {seconds}"}}


def proc(pid: int) -> tuple[float, float]:
    """(resident MiB, CPU seconds) of a local process."""
    rss_kib = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return rss_kib / 1024, cpu_s


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares growth of (seconds, MiB) points, in MiB per hour."""
    if len(points) < 2:
        return None
    n = len(points)
    mx, my = sum(t for t, _ in points) / n, sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return None if var == 0 else 3600 * sum((t - mx) * (v - my) for t, v in points) / var


def wait_admitted(job_id: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (state := client.status(job_id).state) not in (JobState.ADMITTED, JobState.RUNNING):
        if state.is_terminal or time.monotonic() > deadline:
            raise RuntimeError(f"the blocker {job_id} is {state.value}, not holding the head; see `cuberay logs`")
        time.sleep(0.5)


COLUMNS = ["t_min", "rss_mib", "cpu_s", "gc_frozen", "queued", "submitted", "cancelled"]


def fill(args: argparse.Namespace, name: str) -> deque[str]:
    """The blocker on the whole head, then the stuck tenant's backlog; the queued ids, oldest first."""
    blocker = client.submit(task("hold", "blocker", HEAD_CPUS, 24 * 3600))
    wait_admitted(blocker.id)
    queued: deque[str] = deque()
    for start in range(0, args.backlog, args.bulk):
        copies = client.submit_copies(task("stuck", name, 1, 1), min(args.bulk, args.backlog - start))
        queued.extend(r.id for r in copies)
    return queued


def churn(args: argparse.Namespace, handle: Any, name: str, queued: deque[str]) -> tuple[list[dict], float]:
    """Submit and cancel ``args.rate`` a second for ``args.minutes``, sampling the controller; (samples, seconds)."""
    pid = client.api(timeout=60).ping()["pid"]
    print("\n".join(markdown([], COLUMNS).splitlines()[:2]), flush=True)
    samples: list[dict[str, Any]] = []
    submitted = cancelled = 0
    start = next_sample = time.monotonic()
    while True:
        now = time.monotonic()
        done = now >= start + 60 * args.minutes
        if now >= next_sample or done:  # the last sample at the end, on time or not
            rss, cpu = proc(pid)
            frozen = client.api().ping()["gc_frozen_objects"]
            samples.append({"t_min": round((now - start) / 60, 2), "rss_mib": round(rss, 1), "cpu_s": round(cpu, 1),
                            "gc_frozen": frozen, "queued": len(queued), "submitted": submitted,
                            "cancelled": cancelled})
            print(markdown([samples[-1]], COLUMNS).splitlines()[-1], flush=True)
            next_sample += args.sample_s
        if done:
            return samples, now - start
        queued.extend(r.id for r in client.submit_copies(task("stuck", name, 1, 1), args.rate))
        submitted += args.rate
        for _ in range(args.rate):
            client.cancel(queued.popleft())
            cancelled += 1
        time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))  # a steady rate, however long the calls took


def run(args: argparse.Namespace, handle: Any) -> dict[str, Any]:
    name = f"stuck-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    queued = fill(args, name)
    filled_s = time.monotonic() - t0
    print(f"backlog of {len(queued)} queued in {filled_s:.0f} s; now {args.rate} submits and {args.rate} cancels a "
          f"second for {args.minutes:g} min, a sample every {args.sample_s:g} s", flush=True)
    samples, churn_s = churn(args, handle, name, queued)
    ever = [JobState.ADMITTED, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED]
    growth = slope_per_hour([(60 * s["t_min"], s["rss_mib"]) for s in samples])
    return {"backlog": args.backlog, "rate_per_s": args.rate,
            "achieved_per_s": round(samples[-1]["submitted"] / churn_s, 1), "minutes": args.minutes,
            "fill_s": round(filled_s, 1), "samples": samples,
            "stuck_jobs_ever_admitted": len(client.list_jobs(tenant="stuck", states=ever)),
            "rss_mib": {"after_fill": samples[0]["rss_mib"], "end": samples[-1]["rss_mib"],
                        "max": max(s["rss_mib"] for s in samples)},
            "rss_growth_mib_per_hour": None if growth is None else round(growth, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0, help="how long the backlog keeps churning after the fill")
    ap.add_argument("--backlog", type=int, default=20_000, help="jobs queued before the churn starts")
    ap.add_argument("--rate", type=int, default=20, help="submits and cancels per second during the churn")
    ap.add_argument("--sample-s", type=float, default=30.0, help="seconds between RSS samples")
    ap.add_argument("--bulk", type=int, default=10_000, help="copies per submit call while filling")
    args = ap.parse_args(argv)
    info = print_machine()
    with tempfile.TemporaryDirectory(prefix="crm", ignore_cleanup_errors=True) as tmp:
        scratch = Path(tmp)
        with scratch_env(scratch, HEAD_CPUS):
            client.up(str(platform_file(scratch)))
            try:
                result = run(args, client.connect())
            finally:
                client.down()
    result["machine"] = info
    path = write_json("backlog_memory", result)
    print(f"\nRSS after the fill {result['rss_mib']['after_fill']} MiB, at the end {result['rss_mib']['end']} MiB, "
          f"at most {result['rss_mib']['max']} MiB; fitted growth {result['rss_growth_mib_per_hour']} MiB/hour; "
          f"jobs of the stuck tenant ever admitted: {result['stuck_jobs_ever_admitted']}; submits and cancels "
          f"{result['achieved_per_s']}/s of the {args.rate}/s asked (one client's calls, one after the other)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
