"""Reliability under load on one local Ray head (opt-in; figures go to benchmarks/RELIABILITY.md).

    python benchmarks/bench_reliability.py                      # 500 concurrent, 2 min at 5/s, 1,000 queued
    python benchmarks/bench_reliability.py --concurrent 100 --load-s 30 --no-run   # a quick look

1. Concurrency: 20 threads submit ``--concurrent`` jobs, each with its own request id, and 10% of them a
   second time (a client retrying a lost answer). Reported: jobs stored vs distinct request ids, and (unless
   --no-run) that each ran exactly once: SUCCEEDED with 1 attempt, one run (a Ray Job, or a small job's Ray
   task, whose log file per attempt is in the tenant's storage), one worker start stamp.
2. Load: ``--rate`` submissions per second for ``--load-s`` seconds of tiny Tasks. Reported: submit latency
   p50/p99, admissions per second, the controller's memory growth (RSS of its process), and the most runs in
   flight (Ray Job drivers and small jobs' Ray tasks, as the controller counts them) against the cap.
3. Crash: the controller is killed ``--kills`` times while jobs wait (resume = the restarted controller's own
   start stamp minus the kill time), then one running job's driver is SIGKILLed (freed = until FAILED, no
   allocation). Its jobs are 2-worker gangs, so each runs as a Ray Job with a driver process to kill.
4. Queue: one job holds tenant ``q``'s max, ``--queued`` more wait behind it; then ``client.queue()``,
   ``client.status()`` and the CLI's ``cuberay queue`` / ``cuberay status`` (in-process, connected) are timed;
   then the blocker is cancelled and each waiting job too, one by one, while the controller admits them (cancel
   latency p50 / max).
5. Overhead: ``--probes`` tiny Tasks one at a time on an idle head; the controller's decision (submitted ->
   admitted) and launch (admitted -> started) per job from its own event timestamps (bench_live.py's part 2).

``--database sqlite,postgresql`` runs the phases on each store in turn, each on a head of its own, in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown, print_machine, write_json  # noqa: E402
from bench_live import bench_overhead  # noqa: E402 (the live benchmark's part 2, on each store here)

from cuberay.platform import client  # noqa: E402
from cuberay.platform.demo import scratch_env  # noqa: E402
from cuberay.platform.policy.states import JobState  # noqa: E402

STAMP = "cuberay-start-stamp"
DRIVER_CAP = 4


def platform_file(scratch: Path, small_jobs: bool = True, database: str | None = None) -> Path:
    scheduler = {"max_drivers": DRIVER_CAP, "small_jobs": small_jobs}
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "bench"},
            "spec": {"storage": str(scratch / "storage"), "scheduler": scheduler, "database": database,
                     "tenants": [{"name": "bench", "members": ["*"]}, {"name": "b2", "members": ["*"]},
                                 {"name": "q", "members": ["*"], "quota": {"max": {"cpu": "1", "memory": "8Gi"}}}]}}
    path = scratch / "platform.yaml"
    path.write_text(json.dumps(spec))
    return path


def tiny(name: str, cpu: str = "100m", sleep_s: float = 0, workers: int = 1, kind: str = "Task") -> dict[str, Any]:
    """A Task (or command-mode TrainJob) printing one start stamp per worker; a one-worker Task is a small job
    (a Ray task, no driver), anything else a Ray Job with a driver."""
    command = f"{sys.executable} -c \"import time; print('{STAMP}', flush=True); time.sleep({sleep_s})\""
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": kind, "metadata": {"name": name},
            "spec": {"workers": workers, "resources": {"cpu": cpu, "memory": "64Mi"}, "command": command}}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def wait_all_terminal(ids: list[str], timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        recs = {r.id: r for r in client.list_jobs(tenant="bench")}
        done = [recs[j] for j in ids if j in recs and recs[j].state.is_terminal]
        if len(done) == len(ids) or time.monotonic() > deadline:
            return done
        time.sleep(2)


def runs_and_stamps(job_ids: list[str], jobs: Any, storage: Path) -> dict[str, tuple[int, int]]:
    """Job id -> (runs, worker start stamps), by Ray's and the workers' own account, not the store's.

    A run is a Ray Job ``cuberay-<id>[-<attempt>]`` or a small job's attempt (one log file per attempt in the
    tenant's storage, written by its Ray task); stamps are counted in those logs.
    """
    wanted = set(job_ids)
    out = {j: (0, 0) for j in job_ids}
    for info in jobs.list_jobs():
        sid = info.submission_id or ""
        job_id = sid[len("cuberay-"):] if sid.startswith("cuberay-") else ""
        if job_id not in wanted:
            job_id = job_id.rsplit("-", 1)[0]  # a later attempt's suffix
        if job_id in wanted:
            runs, stamps = out[job_id]
            out[job_id] = (runs + 1, stamps + jobs.get_job_logs(sid).count(STAMP))
    for job_id in job_ids:
        for log in storage.glob(f"*/logs/{job_id}/*.log"):
            runs, stamps = out[job_id]
            out[job_id] = (runs + 1, stamps + log.read_text(errors="replace").count(STAMP))
    return out


def bench_concurrent(n: int, run: bool, jobs: Any, storage: Path) -> dict[str, Any]:
    name = f"conc-{uuid.uuid4().hex[:6]}"
    keys = [f"r{i}" for i in range(n)] + [f"r{i}" for i in range(0, n, 10)]  # 10% retried
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=20) as pool:
        refs = list(pool.map(lambda k: client.submit(tiny(name), "bench", request_id=k), keys))
    submit_s = time.monotonic() - t0
    by_key: dict[str, set[str]] = {}
    for key, ref in zip(keys, refs):
        by_key.setdefault(key, set()).add(ref.id)
    stored = [r for r in client.list_jobs(tenant="bench") if r.name == name]
    out: dict[str, Any] = {"submits": len(keys), "request_ids": n, "stored": len(stored),
                           "distinct_ids": len({r.id for r in stored}),
                           "one_job_per_request_id": all(len(v) == 1 for v in by_key.values()),
                           "submit_s": round(submit_s, 1)}
    if not run:  # the next phase measures a quiet platform
        for r in stored:
            client.cancel(r.id)
    else:
        t0 = time.monotonic()
        done = wait_all_terminal([r.id for r in stored], 3600)
        counts = runs_and_stamps([r.id for r in stored], jobs, storage)
        once = sum(1 for r in done if r.state == JobState.SUCCEEDED and r.attempts == 1 and counts[r.id][0] == 1)
        stamps_ok = sum(1 for r in done if counts[r.id][1] == 1)
        out.update({"ended": len(done), "ran_exactly_once": once, "one_start_stamp": stamps_ok,
                    "drain_s": round(time.monotonic() - t0, 1)})
    return out


def controller_rss_mb() -> float:
    import psutil

    pid = client.api().ping()["pid"]
    return psutil.Process(pid).memory_info().rss / 2**20


def bench_load(rate: float, seconds: float, drain: bool = True) -> dict[str, Any]:
    name = f"load-{uuid.uuid4().hex[:6]}"
    rss0 = controller_rss_mb()
    latencies: list[float] = []
    ids: list[str] = []
    peak = [0]
    stop = threading.Event()

    def sample() -> None:  # runs in flight as the controller counts them: Ray Job drivers and small jobs' tasks
        while not stop.is_set():
            peak[0] = max(peak[0], client.api().ping()["drivers"]["in_flight"])
            time.sleep(1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    for i in range(int(rate * seconds)):
        due = t0 + i / rate
        time.sleep(max(0.0, due - time.monotonic()))
        s = time.monotonic()
        ids.append(client.submit(tiny(name), "bench").id)
        latencies.append(time.monotonic() - s)
    load_s = time.monotonic() - t0
    admitted = sum(1 for e in client.api().events(None, None) if e.kind == "admitted" and e.job_id in set(ids))
    rss1 = controller_rss_mb()
    if drain:
        done = wait_all_terminal(ids, 3600)
    else:  # --no-run: what ran during the load is the figure; cancel the rest
        done = [r for r in client.list_jobs(tenant="bench") if r.id in set(ids) and r.state.is_terminal]
        for job_id in ids:
            client.cancel(job_id)
    stop.set()
    sampler.join()
    return {"submissions": len(ids), "drained": drain, "seconds": round(load_s, 1), "rate_achieved": round(len(ids) / load_s, 2),
            "submit_p50_ms": round(1000 * pct(latencies, 0.5), 1), "submit_p99_ms": round(1000 * pct(latencies, 0.99), 1),
            "admitted_during_load": admitted, "admissions_per_s": round(admitted / load_s, 2),
            "succeeded": sum(r.state == JobState.SUCCEEDED for r in done), "ended": len(done),
            "after_load_s": round(time.monotonic() - t0 - load_s, 1),
            "controller_rss_mb": [round(rss0, 1), round(rss1, 1)],
            "peak_runs_in_flight": peak[0], "driver_cap": DRIVER_CAP}


def kill_controller() -> float:
    """Kill the controller actor (Ray restarts it); seconds until the new one's own ``controller_started`` stamp."""
    import ray

    from cuberay.platform.control.install import find

    old = client.api().ping()["pid"]
    killed = time.time()
    ray.kill(find(), no_restart=False)
    while True:
        try:
            if client.api(timeout=5).ping()["pid"] != old:
                break
        except Exception:  # noqa: BLE001 - restarting
            time.sleep(0.2)
    stamps = [e.time for e in client.api().events(None, None) if e.kind == "controller_started"
              and e.time > killed]
    return round(min(stamps) - killed, 2)


def bench_crash(kills: int) -> dict[str, Any]:
    """Kill the controller ``kills`` times while jobs wait (resume = its own start stamp - kill time), and kill
    one job's driver (freed = time until the job is FAILED with no allocation)."""
    import os
    import signal

    from ray.job_submission import JobSubmissionClient


    name = f"crash-{uuid.uuid4().hex[:6]}"
    # 2-worker gangs run as Ray Jobs (a driver process to kill); q's max of 1 CPU: one runs, two wait.
    ids = [client.submit(tiny(name, cpu="500m", sleep_s=3600, workers=2), "q").id for _ in range(3)]
    resumed = []
    for _ in range(kills):
        resumed.append(kill_controller())
    lost = [j for j in ids if client.status(j).state.is_terminal]
    while not (running := next((r for r in map(client.status, ids) if r.state == JobState.RUNNING
                                and r.submission_id), None)):
        time.sleep(0.2)
    jobs = JobSubmissionClient(client.api().dashboard_url())
    while not (info := jobs.get_job_info(running.submission_id)).driver_info:
        time.sleep(0.2)
    os.kill(int(info.driver_info.pid), signal.SIGKILL)
    killed = time.monotonic()
    while not ((rec := client.status(running.id)).state.is_terminal and rec.allocation is None):
        time.sleep(0.1)
    freed = round(time.monotonic() - killed, 2)
    for j in ids:
        client.cancel(j)
    return {"controller_kills": kills, "resume_s": resumed, "lost_or_ended_by_kills": len(lost),
            "driver_kill_freed_s": freed, "driver_kill_state": rec.state.value}


def bench_stream(n: int, kills: int, jobs: Any, storage: Path) -> dict[str, Any]:
    """``n`` jobs of mixed kinds and tenants submitted over ~``n``/4 s while the controller is killed ``kills``
    times at random moments; every job must end SUCCEEDED, once per request id, each recorded attempt one run
    with its workers' start stamps (a run that died with a kill may be retried as a recorded new attempt)."""
    import random


    rng = random.Random(12)
    name = f"stream-{uuid.uuid4().hex[:6]}"
    shapes = [("Task", 1), ("Task", 2), ("TrainJob", 2)]  # small job, gang as a Ray Job, command-mode TrainJob
    plan = [(f"s{i}", *shapes[i % 3], ("bench", "b2")[i % 2]) for i in range(n)]
    kill_at = sorted(rng.uniform(0.1, 0.9) * n / 4 for _ in range(kills))
    ids: dict[str, str] = {}
    resumed: list[float] = []

    def submit_all() -> None:
        for key, kind, workers, tenant in plan:
            while key not in ids:  # the controller may be down: retry with the same request id
                try:
                    ids[key] = client.submit(tiny(f"{name}-{kind.lower()}-{workers}", sleep_s=rng.uniform(0, 2),
                                                  workers=workers, kind=kind), tenant, request_id=key).id
                except Exception:  # noqa: BLE001 - restarting controller
                    time.sleep(0.2)
            time.sleep(0.25)

    submitter = threading.Thread(target=submit_all)
    t0 = time.monotonic()
    submitter.start()
    for at in kill_at:
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        resumed.append(kill_controller())
    submitter.join()
    job_ids = list(ids.values())
    deadline = time.monotonic() + 1800
    while True:
        recs = [client.status(j) for j in job_ids]
        if all(r.state.is_terminal for r in recs) or time.monotonic() > deadline:
            break
        time.sleep(2)
    counts = runs_and_stamps(job_ids, jobs, storage)
    workers_of = {ids[key]: workers for key, _, workers, _ in plan}
    return {"jobs": n, "kills": kills, "resume_s": resumed, "distinct_jobs": len(set(job_ids)),
            "succeeded": sum(r.state == JobState.SUCCEEDED for r in recs),
            "runs_match_attempts": sum(counts[r.id][0] == r.attempts for r in recs),
            "stamps_match_workers_x_attempts": sum(counts[r.id][1] == workers_of[r.id] * r.attempts for r in recs),
            "retried_attempts": sum(r.attempts - 1 for r in recs),
            "not_succeeded": [f"{r.id}: {r.state.value}: {r.message or r.reason}" for r in recs
                              if r.state != JobState.SUCCEEDED],
            "seconds": round(time.monotonic() - t0, 1)}


def timed(fn: Any, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.monotonic()
        fn()
        times.append(time.monotonic() - t)
    return round(max(times), 3)


def bench_queue(n: int) -> dict[str, Any]:
    from cuberay.cli import main as cli

    blocker = client.submit(tiny(f"hold-{uuid.uuid4().hex[:6]}", cpu="1", sleep_s=3600), "q")
    name = f"wait-{uuid.uuid4().hex[:6]}"
    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(lambda _: client.submit(tiny(name, cpu="1"), "q").id, range(n)))
    time.sleep(5)  # a few admission cycles over the full queue
    waiting = sum(1 for e in client.queue("q") if e.position is not None)
    out = {"queued": waiting, "client_queue_s": timed(lambda: client.queue()),
           "client_status_s": timed(lambda: client.status(ids[-1])),
           "cli_queue_s": timed(_silent(cli, ["queue"])), "cli_status_s": timed(_silent(cli, ["status", ids[-1]]))}
    client.cancel(blocker.id)
    cancels = []
    for job_id in ids:  # while the controller admits the queue behind the blocker
        t = time.monotonic()
        client.cancel(job_id)
        cancels.append(time.monotonic() - t)
    out.update({"cancel_p50_ms": round(1000 * pct(cancels, 0.5), 1),
                "cancel_max_ms": round(1000 * max(cancels), 1)})
    return out


def _silent(fn: Any, argv: list[str]) -> Any:
    def call() -> None:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            fn(argv)
    return call


def start_postgres() -> Any:
    """A PostgreSQL server of Debian's package for this run (tests/postgres.py starts it), fsync on."""
    from tests.postgres import INSTALL_HINT, PostgresServer, find_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit(INSTALL_HINT)
    return PostgresServer.start(bin_dir, durable=True)


PHASES = ("concurrent", "load", "crash", "stream", "queue", "overhead")
STORES = ("sqlite", "postgresql")


def run_phases(args: argparse.Namespace, skip: set[str], database: str | None) -> dict[str, Any]:
    """Every phase not skipped, on a head of its own whose store is ``database`` (None: SQLite)."""
    from ray.job_submission import JobSubmissionClient

    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cuberay-rel-", ignore_cleanup_errors=True) as tmp:
        scratch = Path(tmp)
        with scratch_env(scratch, args.cpus):
            url = client.up(str(platform_file(scratch, small_jobs=not args.ray_jobs, database=database)))
            try:
                jobs = JobSubmissionClient(url)
                phases = {
                    "concurrent": lambda: bench_concurrent(args.concurrent, not args.no_run, jobs,
                                                           scratch / "storage"),
                    "load": lambda: bench_load(args.rate, args.load_s, drain=not args.no_run),
                    "crash": lambda: bench_crash(args.kills),
                    "stream": lambda: bench_stream(args.stream, args.stream_kills, jobs, scratch / "storage"),
                    "queue": lambda: bench_queue(args.queued),
                    "overhead": lambda: bench_overhead(args.probes)}
                for name in PHASES:
                    if name not in skip:
                        result[name] = phases[name]()
                        print(f"{name}:", result[name], flush=True)
            finally:
                client.down()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrent", type=int, default=500)
    parser.add_argument("--no-run", action="store_true",
                        help="phase 1 counts stored jobs only; phase 2 cancels what has not ended when the load stops")
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--load-s", type=float, default=120.0)
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=20, help="tiny Tasks, one at a time, in the overhead phase")
    parser.add_argument("--cpus", type=int, default=8)
    parser.add_argument("--kills", type=int, default=3, help="controller kills in the crash phase")
    parser.add_argument("--stream", type=int, default=100, help="jobs in the crash stream (mixed kinds, tenants)")
    parser.add_argument("--stream-kills", type=int, default=3, help="controller kills during the crash stream")
    parser.add_argument("--ray-jobs", action="store_true",
                        help="every job runs as a Ray Job with its own driver (scheduler.small_jobs false)")
    parser.add_argument("--database", default="sqlite",
                        help="the store, or a comma list of stores run one after the other in this run: sqlite "
                             "(a file in the scratch dir) or postgresql (a PostgreSQL 15 server started for the "
                             "run: Debian's package, fsync on, a private socket)")
    parser.add_argument("--skip", default="", help="comma list of phases to skip: " + ",".join(PHASES))
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    stores = args.database.split(",")
    unknown = sorted(set(stores) - set(STORES)) + sorted(skip - set(PHASES))
    if unknown:
        parser.error(f"unknown store or phase {', '.join(unknown)}: stores are {', '.join(STORES)}, "
                     f"phases {', '.join(PHASES)}")
    info = print_machine()
    result: dict[str, Any] = {"machine": info, "args": vars(args), "stores": {}}
    with contextlib.ExitStack() as stack:
        server = None
        if "postgresql" in stores:
            server = start_postgres()
            stack.callback(server.stop)
        for store in stores:
            print(f"== store: {store}", flush=True)
            database = server.fresh_url("bench") if store == "postgresql" else None
            result["stores"].setdefault(store, []).append(run_phases(args, skip, database))
    path = write_json("reliability", result)
    rows = [{"store": store, "phase": phase, "figures": json.dumps(figures)}
            for store, runs in result["stores"].items() for run in runs for phase, figures in run.items()]
    print("\n" + markdown(rows, ["store", "phase", "figures"]) + f"\n\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
