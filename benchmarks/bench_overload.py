"""The simulator under overload: a synthetic 10,000-node cluster fed a Philly-shaped job mix fast enough
to keep a queue of tens of thousands, replayed through a number of simulated hours.

    python benchmarks/bench_overload.py        # 10,000 nodes, 150,000 jobs arriving in 1 h, 12 h replayed
    python benchmarks/bench_overload.py --nodes 1000 --jobs 15000 --hours 2
    python benchmarks/bench_overload.py --sustained   # arrivals over all 12 h at 1.6x what the cluster runs

Jobs: shapes (GPUs per worker, workers), durations and tenants drawn from the Philly trace, durations
times ``--duration-scale`` (default 4: Philly's own mix is too light to overload 80,000 GPUs with
150,000 jobs, most of them minutes long, and drains any queue within an hour or two); arrivals
spread uniformly at random over the first ``--arrive-hours`` (a deadline rush).

``--sustained`` keeps the cluster oversubscribed instead of draining a rush: arrivals spread uniformly over
the whole replay, Philly's own durations (scale 1), and as many jobs as it takes for the GPU-time asked to
reach ``--load`` (default 1.6) times what the cluster can run in that time (a job longer than the replay
counted as long as the replay); ``--jobs`` is ignored. The queue
forms once the cluster is full and grows to the end, so every cycle runs with the cluster full and a
preemption to try. Prints the jobs queued
at each simulated hour, so what was replayed under a queue is visible. Admission runs at most once per ``--tick`` simulated
seconds, like the live controller's loop (a cycle after every arrival would be one per ~0.3 s).
``--live-cycles N`` then times N cycles of the live controller (reasons for every waiting job, the live cycle
budget) on the state the replay reached, each applied with one running job finished after it, and reports
their p50/p99 (wall and CPU; not counted in the replay's times). Reports decisions/s, admission cycle p50/p99 (wall), the most jobs queued, the replay's CPU time and
the process's peak memory, with memory per queued job (peak minus the memory before the replay, over
the most jobs queued: an upper bound, it includes the running jobs' state). Writes
benchmarks/out/overload.json.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown, print_machine, write_json  # noqa: E402
from bench_sim import DEFAULT_TRACE  # noqa: E402

from cuberay.platform.policy.admission import ClusterState, schedule  # noqa: E402
from cuberay.platform.policy.fit import LIVE_CYCLE_BUDGET_S  # noqa: E402
from cuberay.platform.sim.cluster import uniform_cluster  # noqa: E402
from cuberay.platform.sim.engine import simulate  # noqa: E402
from cuberay.platform.sim.trace import load_philly  # noqa: E402


def rss_mib() -> float:
    """The process's resident memory now (Linux /proc), MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=DEFAULT_TRACE)
    ap.add_argument("--nodes", type=int, default=10_000, help="8 GPUs each")
    ap.add_argument("--jobs", type=int, default=150_000)
    ap.add_argument("--hours", type=float, default=12.0, help="simulated time")
    ap.add_argument("--arrive-hours", type=float, default=1.0, help="the window the jobs arrive in")
    ap.add_argument("--duration-scale", type=float, default=4.0,
                    help="every sampled duration times this (Philly's shape, longer jobs: a heavier mix)")
    ap.add_argument("--tick", type=float, default=10.0, help="simulated seconds between admission cycles")
    ap.add_argument("--sustained", action="store_true",
                    help="arrivals over the whole replay, durations as in Philly, jobs until --load is asked")
    ap.add_argument("--load", type=float, default=1.6,
                    help="with --sustained: GPU-time asked over what the cluster can run in the replay")
    ap.add_argument("--live-cycles", type=int, default=0,
                    help="then time this many live cycles (reasons, the live cycle budget) on the state reached")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    info = print_machine()
    rng = random.Random(args.seed)
    source = [j for j in load_philly(args.trace) if j.total_gpus <= 8 * args.nodes]
    span = args.hours * 3600.0
    if args.sustained:
        args.arrive_hours, args.duration_scale = args.hours, 1.0
    window = min(args.arrive_hours, args.hours) * 3600.0
    jobs = draw_jobs(source, rng, args, 8 * args.nodes * span)
    args.jobs = len(jobs)
    cluster = uniform_cluster(args.nodes, gpus_per_node=8)
    demand = sum(j.total_gpus * j.duration for j in jobs) / (8 * args.nodes * span)
    capped = sum(j.total_gpus * min(j.duration, span) for j in jobs) / (8 * args.nodes * span)
    print(f"{len(jobs):,} jobs arriving in {window / 3600:g} h on {args.nodes:,} nodes, {args.hours:g} h replayed: "
          f"GPU-time asked {demand:.1f}x what the replay holds ({capped:.1f}x with each job capped at the "
          f"replay's length)", flush=True)
    base = rss_mib()
    c0, t0 = time.process_time(), time.perf_counter()
    live: dict[str, Any] = {}
    report = simulate(jobs, cluster, policy="cuberay", until=span, cycle_every_s=args.tick,
                      at_end=lambda state, now: live.update(live_cycles(state, now, args.live_cycles, rng)))
    cpu_s = time.process_time() - c0 - live.get("cpu_s", 0.0)
    wall_s = time.perf_counter() - t0 - live.get("wall_s", 0.0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    row: dict[str, Any] = {
        "variant": "sustained" if args.sustained else "rush", "nodes": args.nodes, "jobs": args.jobs, "arrive h": args.arrive_hours, "sim h": args.hours,
        "tick s": args.tick,
        "cycles": report.cycles, "decisions": report.decisions, "decisions/s": f"{report.decisions_per_s:,.0f}",
        "cycle p50 ms": f"{1000 * report.cycle_p50_s:.1f}", "cycle p99 ms": f"{1000 * report.cycle_p99_s:.1f}",
        "max queued": f"{report.max_queued:,}", "queued at end": f"{report.queued_at_end:,}",
        "running at end": f"{report.running_at_end:,}", "wall s": f"{wall_s:.0f}", "CPU s": f"{cpu_s:.0f}",
        "peak MiB": f"{peak:,.0f}",
        "KiB per queued job": f"{1024 * (peak - base) / max(report.max_queued, 1):.1f}",
    }
    hours = queued_by_hour(report.timeline, args.hours)
    print("jobs queued / GPUs in use at each simulated hour: "
          + ", ".join(f"{h:g} h {q:,} / {100 * u / (8 * args.nodes):.0f}%" for h, q, u in hours))
    if live:
        print(f"live cycles on the state at {args.hours:g} h ({live['running']:,} running, {live['queued']:,} queued; "
              f"reasons, budget {1000 * live['budget_s']:g} ms): {live['cycles']} cycles, p50 / p99 "
              f"{live['p50_ms']:.1f} / {live['p99_ms']:.1f} ms wall, {live['p50_cpu_ms']:.1f} / {live['p99_cpu_ms']:.1f} ms "
              f"CPU, {live['cut_short']} cut short by the budget")
        row["live p99 ms"] = f"{live['p99_ms']:.1f}"
    load = os.getloadavg()[0]
    print(f"load average at the end: {load:.1f}")
    print(markdown([row], list(row)))
    write_json("overload", {"machine": info, "args": {k: str(v) for k, v in vars(args).items()}, "row": row,
                            "rss_before_mib": base, "load_end": load, "queued_by_hour": hours,
                            "live": live, "report": report.to_dict()}, args.out)
    return 0


def live_cycles(state: ClusterState, now: float, cycles: int, rng: random.Random) -> dict[str, Any]:
    """The live controller's cycle on the state a replay reached: reasons for every waiting job, under the
    live cycle budget, each cycle applied and one random running job finished after it (as bench_decision
    does), the clock one second on. Wall and CPU per cycle; the CPU and wall spent here overall."""
    if cycles <= 0:
        return {}
    c0, t0 = time.process_time(), time.perf_counter()
    running, queued = len(state.running), len(state.queue)
    state.policy = replace(state.policy, cycle_budget_s=LIVE_CYCLE_BUDGET_S)
    wall_ms, cpu_ms, cut = [], [], 0
    for _ in range(cycles):
        w, c = time.perf_counter(), time.process_time()
        cycle = schedule(state, now, explain=True)
        wall_ms.append(1000 * (time.perf_counter() - w))
        cpu_ms.append(1000 * (time.process_time() - c))
        cut += not cycle.complete
        state.apply(cycle.decisions, now)
        if state.running:
            state.finish(rng.choice(list(state.running)))
        now += 1.0
    wall_ms.sort()
    cpu_ms.sort()
    return {"cycles": cycles, "budget_s": LIVE_CYCLE_BUDGET_S, "running": running, "queued": queued,
            "cut_short": cut, "p50_ms": _pct(wall_ms, 0.5), "p99_ms": _pct(wall_ms, 0.99),
            "p50_cpu_ms": _pct(cpu_ms, 0.5), "p99_cpu_ms": _pct(cpu_ms, 0.99),
            "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0}


def _pct(sorted_xs: list[float], q: float) -> float:
    return sorted_xs[min(len(sorted_xs) - 1, int(q * len(sorted_xs)))]


def draw_jobs(source: list, rng: random.Random, args: argparse.Namespace, capacity_gpu_s: float) -> list:
    """``--jobs`` draws from the trace, or under ``--sustained`` draws until the GPU-time asked within the
    replay is ``--load`` times ``capacity_gpu_s`` (each job's duration capped at the replay's length); each
    arrives uniformly at random over the arrival window."""
    window = min(args.arrive_hours, args.hours) * 3600.0
    jobs, asked = [], 0.0
    while (asked < args.load * capacity_gpu_s) if args.sustained else (len(jobs) < args.jobs):
        drawn = rng.choice(source)
        job = replace(drawn, id=f"o{len(jobs):07d}", submit_time=rng.random() * window,
                      duration=drawn.duration * args.duration_scale)
        jobs.append(job)
        # A job longer than the replay counts as the replay's length: Philly's multi-day jobs would otherwise
        # make up most of the GPU-time asked while little of it can run, and leave the cluster half idle.
        asked += job.total_gpus * min(job.duration, args.hours * 3600.0)
    return jobs


def queued_by_hour(timeline: list[tuple[float, float, int]], hours: float) -> list[tuple[float, int, float]]:
    """(hour, jobs queued, GPUs in use) at each whole simulated hour, read from the replay's timeline."""
    out: list[tuple[float, int, float]] = []
    if not timeline:
        return out
    t0, i = timeline[0][0], 0
    for h in range(1, int(hours) + 1):
        while i + 1 < len(timeline) and timeline[i + 1][0] - t0 <= h * 3600:
            i += 1
        out.append((float(h), timeline[i][2], timeline[i][1]))
    return out


if __name__ == "__main__":
    sys.exit(main())
