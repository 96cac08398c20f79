"""The live platform on one local Ray head: what cuberay costs over plain Ray, and whether its queue holds.

    python benchmarks/bench_live.py                 # 3 repeats, 10 probes, 200 tasks (~15 min on 2 cores)
    python benchmarks/bench_live.py --quick         # 3 repeats, 5 probes, 40 tasks
    python benchmarks/bench_live.py --parts first --backends tensorflow,xgboost   # other frameworks' first step

1. Time to first step: submit -> end of the first optimisation step of a
   2-worker DDP TorchTrainer (benchmarks/live_train.py), through cuberay
   (``client.submit`` of a TrainJob) and through plain Ray (``JobSubmissionClient``
   running benchmarks/live_driver.py, the same trainer and train function),
   alternating on the same cluster. Reported: the ratio of the medians (target <= 1.15).
2. Controller overhead per admitted job, from the controller's own event log
   (timestamps it writes as it acts): submitted -> admitted (the admission
   decision, including the tick that makes it) and admitted -> started (the
   Ray Job submit call), for tiny Tasks submitted one at a time to an idle
   cluster; and submit -> RUNNING as a client sees it.
3. Drain: N tiny Tasks submitted at once with the driver cap (max_drivers) at 4.
   None may be lost (every one SUCCEEDED in cuberay, and in Ray: its Ray Job
   SUCCEEDED, or for a small job its Ray task ``<tenant>/<job-id>`` FINISHED in
   Ray's task list, which is what the dashboard shows), and never more than the
   cap at once: Ray's own job list sampled while they drain, and the start/end
   times Ray recorded for the small jobs' tasks, overlapped afterwards.
   ``--no-small-jobs`` runs every job as a Ray Job (the platform's ``small_jobs: false``).

The cluster is the one ``cuberay up`` starts (``client.up``), in a scratch
directory as ``cuberay demo`` does, with 8 logical CPUs. Writes
benchmarks/out/live.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, markdown, print_machine, wait_for, write_json  # noqa: E402

from cuberay.platform import client  # noqa: E402
from cuberay.platform.demo import scratch_env  # noqa: E402
from cuberay.platform.policy.states import JobState  # noqa: E402

TENANT = "bench"
DRIVER_CAP = 4
HEAD_CPUS = 8
TARGET_RATIO = 1.15


def platform_file(scratch: Path, small_jobs: bool = True) -> Path:
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "bench"},
            "spec": {"storage": str(scratch / "storage"),
                     "scheduler": {"max_drivers": DRIVER_CAP, "small_jobs": small_jobs},
                     "tenants": [{"name": TENANT, "members": ["*"], "admins": ["bench"]}]}}
    path = scratch / "platform.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


# ---------------------------------------------------------------- 1. time to first step


def read_marker(marker: Path, t0: float) -> tuple[float, float]:
    """(submit -> train function entered, submit -> end of the first step) in seconds."""
    entered, first = (float(v) for v in marker.read_text().split())
    return entered - t0, first - t0


def first_step_cuberay(marker: Path, backend: str = "torch") -> tuple[float, float]:
    from benchmarks.live_train import ENTRYPOINTS

    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": f"{backend[:5]}-{uuid.uuid4().hex[:6]}", "tenant": TENANT},
            "spec": {"workers": 2, "resources": {"cpu": "1"}, "placement": "pack", "backend": backend,
                     "entrypoint": f"benchmarks.live_train:{ENTRYPOINTS[backend]}",
                     "config": {"marker": str(marker)}}}
    t0 = time.time()
    ref = client.submit(spec, user="bench")
    record = client.wait(ref, timeout=300, poll_s=0.5)
    if record.state != JobState.SUCCEEDED:
        raise RuntimeError(f"cuberay DDP run {ref.id} ended {record.state.value}: {record.message}")
    return read_marker(marker, t0)


def first_step_plain(jobs: Any, marker: Path, storage: Path, backend: str = "torch") -> tuple[float, float]:
    config = json.dumps({"marker": str(marker)})
    entrypoint = (f"{sys.executable} {ROOT / 'benchmarks' / 'live_driver.py'} '{config}' {storage} "
                  f"plain-{uuid.uuid4().hex[:6]} {backend}")
    t0 = time.time()
    sid = jobs.submit_job(entrypoint=entrypoint, entrypoint_num_cpus=0)
    status = wait_for(lambda: (s := jobs.get_job_status(sid)).is_terminal() and s, 300, f"Ray Job {sid}", 0.5)
    if status.value != "SUCCEEDED":
        raise RuntimeError(f"plain Ray Job {sid} ended {status.value}:\n{jobs.get_job_logs(sid)[-2000:]}")
    return read_marker(marker, t0)


def bench_first_step(jobs: Any, scratch: Path, repeats: int, backend: str = "torch") -> dict[str, Any]:
    times: dict[str, list[float]] = {"cuberay": [], "plain": []}
    entered: dict[str, list[float]] = {"cuberay": [], "plain": []}

    def one(side: str, marker: Path) -> tuple[float, float]:
        if side == "cuberay":
            return first_step_cuberay(marker, backend)
        return first_step_plain(jobs, marker, scratch / "plain-runs", backend)

    one("plain", scratch / "marker-warmup")  # the first trainer on a fresh cluster pays cold caches
    for i in range(repeats):
        for side in ("cuberay", "plain"):  # alternating, so drift on the machine hits both
            up_s, took = one(side, scratch / f"marker-{side}-{i}")
            times[side].append(round(took, 2))
            entered[side].append(round(up_s, 2))
            print(f"  repeat {i + 1}: {side:7s} submit -> workers up {up_s:6.2f} s, -> first step {took:6.2f} s",
                  flush=True)
    medians = {side: statistics.median(values) for side, values in times.items()}
    ratio = medians["cuberay"] / medians["plain"]
    # Each cuberay run against the plain run right after it: less sensitive to load that comes and goes.
    pairs = [round(c / p, 3) for c, p in zip(times["cuberay"], times["plain"])]
    return {"backend": backend, "runs_s": times, "workers_up_s": entered, "median_s": medians,
            "ratio": round(ratio, 3),
            "pair_ratios": pairs, "median_pair_ratio": statistics.median(pairs),
            "target": TARGET_RATIO, "ok": ratio <= TARGET_RATIO}


# ---------------------------------------------------------------- 2. controller overhead


def tiny_task(name: str) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
            "metadata": {"name": f"{name}-{uuid.uuid4().hex[:6]}", "tenant": TENANT},
            "spec": {"workers": 1, "resources": {"cpu": "100m"}, "command": "true"}}


def bench_overhead(probes: int) -> dict[str, Any]:
    handle = client.connect()
    import ray

    decision, launch, to_running = [], [], []
    for _ in range(probes):
        t0 = time.time()
        ref = client.submit(tiny_task("probe"), user="bench")
        seen = wait_for(lambda: client.status(ref).state in (JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED)
                        and time.time(), 60, "the probe to run", 0.02)
        to_running.append((seen - t0) * 1000)
        record = client.wait(ref, timeout=120, poll_s=0.2)
        if record.state != JobState.SUCCEEDED:
            raise RuntimeError(f"probe {ref.id} ended {record.state.value}: {record.message}")
        events = {e.kind: e.time for e in ray.get(handle.events.remote(client.caller(), ref.id, 100))}
        decision.append((events["admitted"] - events["submitted"]) * 1000)
        launch.append((events["started"] - events["admitted"]) * 1000)

    def summary(values: list[float]) -> dict[str, float]:
        return {"median_ms": round(statistics.median(values), 1), "max_ms": round(max(values), 1)}

    return {"probes": probes, "decision": summary(decision), "launch_call": summary(launch),
            "decision_plus_launch_median_ms": round(statistics.median(d + la for d, la in zip(decision, launch)), 1),
            "submit_to_running_seen_by_client": summary(to_running),
            "measured": "controller event timestamps: submitted->admitted (admission cycle) and "
                        "admitted->started (Ray Job submit call, or a small job's start sent to its runner); "
                        "client: submit() -> status RUNNING (20 ms polls)"}


# ---------------------------------------------------------------- 3. drain under the driver cap


class DriverSampler:
    """Samples Ray's own job list: how many cuberay drivers are PENDING or RUNNING at once."""

    def __init__(self, jobs: Any, period_s: float = 0.5) -> None:
        self.jobs, self.period_s = jobs, period_s
        self.peak, self.samples = 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            alive = [j for j in self.jobs.list_jobs()
                     if j.submission_id and (j.metadata or {}).get("cuberay.io/job")
                     and j.status.value in ("PENDING", "RUNNING")]
            self.peak, self.samples = max(self.peak, len(alive)), self.samples + 1
            self._stop.wait(self.period_s)

    def __enter__(self) -> "DriverSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def ray_tasks(names: set[str], dashboard_url: str) -> dict[str, Any]:
    """Ray's own records of the small jobs' tasks (the dashboard's task view), by name: the last attempt of each."""
    from ray.util.state import list_tasks

    found: dict[str, Any] = {}
    for task in list_tasks(address=dashboard_url, filters=[("type", "=", "NORMAL_TASK")], detail=True,
                           limit=10_000, raise_on_missing_output=False, timeout=120):
        if task.name in names:
            found[task.name] = task
    return found


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end at t closes before a start at t opens)."""
    live = most = 0
    for _, step in sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals]):
        live += step
        most = max(most, live)
    return most


def bench_drain(jobs: Any, count: int, dashboard_url: str) -> dict[str, Any]:
    t0 = time.monotonic()
    with DriverSampler(jobs) as sampler:
        refs = [client.submit(tiny_task("drain"), user="bench") for _ in range(count)]
        submitted_s = time.monotonic() - t0
        records = [client.wait(ref, timeout=3600, poll_s=0.1) for ref in refs]
    drained_s = time.monotonic() - t0
    states: dict[str, int] = {}
    for record in records:
        states[record.state.value] = states.get(record.state.value, 0) + 1
    import ray

    names = {f"{r.tenant}/{r.id}": r for r in records}
    tasks = wait_for(lambda: (t := ray_tasks(set(names), dashboard_url)) and
                     sum(1 for x in t.values() if x.end_time_ms) >= sum("Ray task" in (r.message or "")
                                                                         for r in records) and t,
                     120, "Ray's task records", 2.0) if ray.is_initialized() else {}
    small = {n for n, r in names.items() if "Ray task" in (r.message or "")}
    ray_ok = sum(1 for r in records if r.submission_id and f"{r.tenant}/{r.id}" not in small
                 and jobs.get_job_status(r.submission_id).value == "SUCCEEDED")
    ray_ok += sum(1 for n in small if n in tasks and tasks[n].state == "FINISHED")
    spans = [(t.start_time_ms, t.end_time_ms) for n, t in tasks.items() if n in small and t.start_time_ms
             and t.end_time_ms]
    task_peak = most_at_once(spans)
    peak = max(sampler.peak, task_peak)
    lost = count - states.get("SUCCEEDED", 0)
    return {"tasks": count, "submit_all_s": round(submitted_s, 1), "drain_s": round(drained_s, 1),
            "tasks_per_s": round(count / drained_s, 2), "states": states, "ray_succeeded": ray_ok,
            "small_jobs": len(small), "lost": lost, "driver_cap": DRIVER_CAP,
            "peak_live_ray_jobs": sampler.peak, "samples": sampler.samples,
            "peak_small_tasks_at_once": task_peak, "small_task_spans": len(spans),
            "ok": lost == 0 and ray_ok == count and peak <= DRIVER_CAP}


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probes", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="5 probes, 40 tasks")
    parser.add_argument("--no-small-jobs", action="store_true", help="every job as a Ray Job (small_jobs: false)")
    parser.add_argument("--parts", default="first,overhead,drain",
                        help="comma-separated parts to run: first (DDP first step), overhead, drain")
    parser.add_argument("--backends", default="torch",
                        help="comma-separated frameworks for part 1: torch, tensorflow, xgboost (each its own "
                             "trainer on both sides)")
    args = parser.parse_args(argv)
    if args.quick:
        args.probes, args.tasks = 5, 40
    info = print_machine()
    load_start = os.getloadavg()[0]
    from ray.job_submission import JobSubmissionClient

    with tempfile.TemporaryDirectory(prefix="crb", ignore_cleanup_errors=True) as tmp:
        scratch = Path(tmp)
        with scratch_env(scratch, HEAD_CPUS):
            t0 = time.monotonic()
            url = client.up(str(platform_file(scratch, small_jobs=not args.no_small_jobs)))
            up_s = time.monotonic() - t0
            print(f"cuberay up: {up_s:.1f} s, dashboard {url}", flush=True)
            try:
                jobs = JobSubmissionClient(url)
                parts = set(args.parts.split(","))
                first = overhead = drain = None
                firsts = []
                if "first" in parts:
                    for backend in args.backends.split(","):
                        print(f"1. submit -> first {backend} step, cuberay vs plain `ray job submit`", flush=True)
                        firsts.append(bench_first_step(jobs, scratch, args.repeats, backend))
                    first = firsts[0]
                if "overhead" in parts:
                    print(f"2. controller overhead, {args.probes} tiny Tasks one at a time", flush=True)
                    overhead = bench_overhead(args.probes)
                if "drain" in parts:
                    print(f"3. drain {args.tasks} tiny Tasks, driver cap {DRIVER_CAP}", flush=True)
                    drain = bench_drain(jobs, args.tasks, url)
            finally:
                client.down()
    result = {"machine": info, "load_avg_start_end": [round(load_start, 1), round(os.getloadavg()[0], 1)],
              "up_s": round(up_s, 1), "first_step": first, "first_steps": firsts, "overhead": overhead,
              "drain": drain}
    path = write_json("live", result)
    rows = []
    for first in firsts:
        what = first["backend"]
        rows += [
            {"measure": f"submit -> first {what} step, cuberay (median)",
             "value": f"{first['median_s']['cuberay']:.2f} s"},
            {"measure": f"submit -> first {what} step, plain ray job submit",
             "value": f"{first['median_s']['plain']:.2f} s"},
            {"measure": f"ratio of medians (target <= {TARGET_RATIO})",
             "value": f"{first['ratio']:.3f} ({'ok' if first['ok'] else 'OVER'})"},
            {"measure": "per-pair ratios (cuberay / the plain run after it)",
             "value": ", ".join(f"{r:.2f}" for r in first["pair_ratios"])}]
    if overhead:
        rows += [
            {"measure": "admission decision per job (median)", "value": f"{overhead['decision']['median_ms']} ms"},
            {"measure": "launch call per job (median)", "value": f"{overhead['launch_call']['median_ms']} ms"},
            {"measure": "decision + launch per job (median)",
             "value": f"{overhead['decision_plus_launch_median_ms']} ms"},
            {"measure": "submit -> RUNNING seen by a client (median)",
             "value": f"{overhead['submit_to_running_seen_by_client']['median_ms']} ms"}]
    if drain:
        rows += [
            {"measure": f"drain {drain['tasks']} tasks", "value": f"{drain['drain_s']} s ({drain['tasks_per_s']}/s)"},
            {"measure": "lost / SUCCEEDED in Ray (Ray Job or Ray task)",
             "value": f"{drain['lost']} / {drain['ray_succeeded']} ({drain['small_jobs']} as small jobs)"},
            {"measure": f"peak live Ray Job drivers (cap {DRIVER_CAP}, {drain['samples']} samples)",
             "value": str(drain["peak_live_ray_jobs"])},
            {"measure": f"peak small-job Ray tasks at once (cap {DRIVER_CAP}, from Ray's start/end times)",
             "value": str(drain["peak_small_tasks_at_once"])}]
    print("\n" + markdown(rows, ["measure", "value"]))
    print(f"\nwrote {path.relative_to(ROOT)}")
    return 0 if all(f["ok"] for f in firsts) and (drain is None or drain["ok"]) else 1


if __name__ == "__main__":
    sys.exit(main())
