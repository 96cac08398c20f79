"""The live platform on one local Ray head: what cuberay costs over plain Ray, and whether its queue holds.

    python benchmarks/bench_live.py                 # 3 repeats, 10 probes, 200 tasks (~15 min on 2 cores)
    python benchmarks/bench_live.py --quick         # 3 repeats, 5 probes, 40 tasks

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
   None may be lost (every one SUCCEEDED in cuberay and its Ray Job SUCCEEDED),
   and Ray's own job list, sampled while they drain, must never show more live
   drivers than the cap.

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
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, markdown, print_machine, write_json  # noqa: E402

from cuberay.platform import client  # noqa: E402
from cuberay.platform.demo import scratch_env  # noqa: E402
from cuberay.platform.policy.states import JobState  # noqa: E402

TENANT = "bench"
DRIVER_CAP = 4
HEAD_CPUS = 8
TARGET_RATIO = 1.15


def platform_file(scratch: Path) -> Path:
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "bench"},
            "spec": {"storage": str(scratch / "storage"),
                     "scheduler": {"max_drivers": DRIVER_CAP},
                     "tenants": [{"name": TENANT, "members": ["*"], "admins": ["bench"]}]}}
    path = scratch / "platform.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def wait_for(check: Callable[[], Any], timeout: float, what: str, poll_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll_s)


# ---------------------------------------------------------------- 1. time to first step


def read_marker(marker: Path, t0: float) -> tuple[float, float]:
    """(submit -> train function entered, submit -> end of the first step) in seconds."""
    entered, first = (float(v) for v in marker.read_text().split())
    return entered - t0, first - t0


def first_step_cuberay(marker: Path) -> tuple[float, float]:
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": f"ddp-{uuid.uuid4().hex[:6]}", "tenant": TENANT},
            "spec": {"workers": 2, "resources": {"cpu": "1"}, "placement": "pack",
                     "entrypoint": "benchmarks.live_train:train_func", "config": {"marker": str(marker)}}}
    t0 = time.time()
    ref = client.submit(spec, user="bench")
    record = client.wait(ref, timeout=300, poll_s=0.5)
    if record.state != JobState.SUCCEEDED:
        raise RuntimeError(f"cuberay DDP run {ref.id} ended {record.state.value}: {record.message}")
    return read_marker(marker, t0)


def first_step_plain(jobs: Any, marker: Path, storage: Path) -> tuple[float, float]:
    config = json.dumps({"marker": str(marker)})
    entrypoint = (f"{sys.executable} {ROOT / 'benchmarks' / 'live_driver.py'} '{config}' {storage} "
                  f"plain-{uuid.uuid4().hex[:6]}")
    t0 = time.time()
    sid = jobs.submit_job(entrypoint=entrypoint, entrypoint_num_cpus=0)
    status = wait_for(lambda: (s := jobs.get_job_status(sid)).is_terminal() and s, 300, f"Ray Job {sid}", 0.5)
    if status.value != "SUCCEEDED":
        raise RuntimeError(f"plain Ray Job {sid} ended {status.value}:\n{jobs.get_job_logs(sid)[-2000:]}")
    return read_marker(marker, t0)


def bench_first_step(jobs: Any, scratch: Path, repeats: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"cuberay": [], "plain": []}
    entered: dict[str, list[float]] = {"cuberay": [], "plain": []}

    def one(side: str, marker: Path) -> tuple[float, float]:
        if side == "cuberay":
            return first_step_cuberay(marker)
        return first_step_plain(jobs, marker, scratch / "plain-runs")

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
    return {"runs_s": times, "workers_up_s": entered, "median_s": medians, "ratio": round(ratio, 3),
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
        events = {e.kind: e.time for e in ray.get(handle.events.remote(ref.id, 100))}
        decision.append((events["admitted"] - events["submitted"]) * 1000)
        launch.append((events["started"] - events["admitted"]) * 1000)

    def summary(values: list[float]) -> dict[str, float]:
        return {"median_ms": round(statistics.median(values), 1), "max_ms": round(max(values), 1)}

    return {"probes": probes, "decision": summary(decision), "launch_call": summary(launch),
            "decision_plus_launch_median_ms": round(statistics.median(d + la for d, la in zip(decision, launch)), 1),
            "submit_to_running_seen_by_client": summary(to_running),
            "measured": "controller event timestamps: submitted->admitted (admission cycle) and "
                        "admitted->started (Ray Job submit call); client: submit() -> status RUNNING (20 ms polls)"}


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


def bench_drain(jobs: Any, count: int) -> dict[str, Any]:
    t0 = time.monotonic()
    with DriverSampler(jobs) as sampler:
        refs = [client.submit(tiny_task("drain"), user="bench") for _ in range(count)]
        submitted_s = time.monotonic() - t0
        records = [client.wait(ref, timeout=3600, poll_s=2.0) for ref in refs]
    drained_s = time.monotonic() - t0
    states: dict[str, int] = {}
    for record in records:
        states[record.state.value] = states.get(record.state.value, 0) + 1
    ray_ok = sum(1 for r in records if r.submission_id and jobs.get_job_status(r.submission_id).value == "SUCCEEDED")
    lost = count - states.get("SUCCEEDED", 0)
    return {"tasks": count, "submit_all_s": round(submitted_s, 1), "drain_s": round(drained_s, 1),
            "tasks_per_s": round(count / drained_s, 2), "states": states, "ray_jobs_succeeded": ray_ok,
            "lost": lost, "driver_cap": DRIVER_CAP, "peak_live_drivers": sampler.peak,
            "samples": sampler.samples, "ok": lost == 0 and ray_ok == count and sampler.peak <= DRIVER_CAP}


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probes", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="5 probes, 40 tasks")
    args = parser.parse_args(argv)
    if args.quick:
        args.probes, args.tasks = 5, 40
    info = print_machine()
    load_start = os.getloadavg()[0]
    from ray.job_submission import JobSubmissionClient

    with tempfile.TemporaryDirectory(prefix="cuberay-bench-", ignore_cleanup_errors=True) as tmp:
        scratch = Path(tmp)
        with scratch_env(scratch, HEAD_CPUS):
            t0 = time.monotonic()
            url = client.up(str(platform_file(scratch)))
            up_s = time.monotonic() - t0
            print(f"cuberay up: {up_s:.1f} s, dashboard {url}", flush=True)
            try:
                jobs = JobSubmissionClient(url)
                print("1. submit -> first DDP step, cuberay vs plain `ray job submit`", flush=True)
                first = bench_first_step(jobs, scratch, args.repeats)
                print(f"2. controller overhead, {args.probes} tiny Tasks one at a time", flush=True)
                overhead = bench_overhead(args.probes)
                print(f"3. drain {args.tasks} tiny Tasks, driver cap {DRIVER_CAP}", flush=True)
                drain = bench_drain(jobs, args.tasks)
            finally:
                client.down()
    result = {"machine": info, "load_avg_start_end": [round(load_start, 1), round(os.getloadavg()[0], 1)],
              "up_s": round(up_s, 1), "first_step": first, "overhead": overhead, "drain": drain}
    path = write_json("live", result)
    rows = [
        {"measure": "submit -> first DDP step, cuberay (median of 3)", "value": f"{first['median_s']['cuberay']:.2f} s"},
        {"measure": "submit -> first DDP step, plain ray job submit", "value": f"{first['median_s']['plain']:.2f} s"},
        {"measure": f"ratio of medians (target <= {TARGET_RATIO})",
         "value": f"{first['ratio']:.3f} ({'ok' if first['ok'] else 'OVER'})"},
        {"measure": "per-pair ratios (cuberay / the plain run after it)",
         "value": ", ".join(f"{r:.2f}" for r in first["pair_ratios"])},
        {"measure": "admission decision per job (median)", "value": f"{overhead['decision']['median_ms']} ms"},
        {"measure": "Ray Job launch call per job (median)", "value": f"{overhead['launch_call']['median_ms']} ms"},
        {"measure": "submit -> RUNNING seen by a client (median)",
         "value": f"{overhead['submit_to_running_seen_by_client']['median_ms']} ms"},
        {"measure": f"drain {drain['tasks']} tasks", "value": f"{drain['drain_s']} s ({drain['tasks_per_s']}/s)"},
        {"measure": "lost / Ray Jobs SUCCEEDED", "value": f"{drain['lost']} / {drain['ray_jobs_succeeded']}"},
        {"measure": f"peak live drivers (cap {DRIVER_CAP}, {drain['samples']} samples)",
         "value": str(drain["peak_live_drivers"])},
    ]
    print("\n" + markdown(rows, ["measure", "value"]))
    print(f"\nwrote {path.relative_to(ROOT)}")
    return 0 if first["ok"] and drain["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
