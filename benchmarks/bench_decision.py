"""Admission decision latency at scale: one `schedule(state, now)` cycle on a big, busy snapshot.

    python benchmarks/bench_decision.py                 # 1,000 nodes, 10,000 queued, 200 cycles
    python benchmarks/bench_decision.py --cycles 50 --nodes 200 --queued 2000
    python benchmarks/bench_decision.py --nodes 10000 --queued 1 --refill   # one job at a time, empty queue
    python benchmarks/bench_decision.py --topology      # racks of 8 hosts in blocks of 4, gangs preferred: rack

Snapshot: nodes of 8 GPUs / 64 CPUs / 512Gi, ~85% of GPUs held by running jobs
of assorted shapes and tenants; a queue of mixed shapes (1, 2, 4, 8, 16, 32
GPUs), 10 tenants, 3 priorities. Each timed cycle is followed (untimed) by
applying its decisions and finishing one random running job, so every cycle has
something to decide. Measured twice on fresh snapshots: with reasons for every
waiting job (explain=True) under the live controller's cycle budget
(``--budget-ms``, default the platform's), and without reasons or budget (the
simulator's mode). With ``--topology`` the nodes are racks of 8 hosts in blocks of 4 racks (labels
``cuberay.io/rack`` and ``cuberay.io/block``, the ledger's topology block > rack with fill on), and every
multi-node job asks ``preferred: rack``, as bench_topology.py's cuberay variant does. Cycle times are wall clock and CPU time of this process
(``time.process_time``: the comparable figure on a shared machine). Writes
benchmarks/out/decision.json.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown, print_machine, write_json  # noqa: E402

from cuberay.platform.policy.admission import Admit, ClusterState, schedule  # noqa: E402
from cuberay.platform.policy.fit import LIVE_CYCLE_BUDGET_S  # noqa: E402
from cuberay.platform.policy.ledger import Ledger  # noqa: E402
from cuberay.platform.policy.placement import place  # noqa: E402
from cuberay.platform.policy.queue import JobRequest  # noqa: E402
from cuberay.platform.policy.scheduling import Policy, TenantQuota  # noqa: E402
from cuberay.platform.policy.topology import PREFERRED, Locality, Topology  # noqa: E402
from cuberay.platform.sim.cluster import BLOCK_LABEL, RACK_LABEL  # noqa: E402
from cuberay.platform.spec.resources import CPU, GPU, MEMORY, Resources, WorkerRequest  # noqa: E402

# Reference rates quoted for comparison (from the task brief; not measured here).
KUEUE_ADMISSIONS_PER_S = 42
KUBE_SCHEDULER_PODS_PER_S = 333

# GPUs per job -> relative frequency (small jobs dominate, as in Philly).
SHAPES = {1: 40, 2: 15, 4: 15, 8: 15, 16: 10, 32: 5}
PRIORITIES = (0, 5, 10)


PLACEMENT = "pack"
TOPOLOGY = False  # --topology
HOSTS_PER_RACK, RACKS_PER_BLOCK = 8, 4
NEAR = Locality(PREFERRED, "rack")


def job_of(i: int, gpus: int, tenant: str, priority: int, submit: float) -> JobRequest:
    """Up to 8 GPUs: one worker on one node; larger: workers of 8 GPUs (one per node)."""
    per, workers = (gpus, 1) if gpus <= 8 else (8, gpus // 8)
    worker = WorkerRequest(Resources({GPU: per, CPU: 6.0 * per, MEMORY: 48.0 * 2**30 * per}))
    near = NEAR if TOPOLOGY and workers > 1 else None
    return JobRequest(f"job-{i:06d}", tenant, worker, workers, PLACEMENT, priority, submit, topology=near)


def labels(n: int) -> dict[str, str] | None:
    """--topology: node n's rack and block."""
    if not TOPOLOGY:
        return None
    rack = n // HOSTS_PER_RACK
    return {RACK_LABEL: f"r{rack}", BLOCK_LABEL: f"b{rack // RACKS_PER_BLOCK}"}


def snapshot(nodes: int, queued: int, tenants: int, busy: float, seed: int,
             policy: Policy | None = None) -> tuple[ClusterState, random.Random]:
    rng = random.Random(seed)
    ledger = Ledger()
    if TOPOLOGY:
        ledger.topology = Topology((("block", BLOCK_LABEL), ("rack", RACK_LABEL)), fill=True)
    for n in range(nodes):
        ledger.add_node(f"node-{n:05d}", {GPU: 8, CPU: 64, MEMORY: 512 * 2**30}, labels(n))
    names = [f"tenant-{t}" for t in range(tenants)]
    share = Resources({GPU: 8.0 * nodes / tenants, CPU: 64.0 * nodes / tenants})
    state = ClusterState(ledger, {t: TenantQuota(t, share, None) for t in names}, policy)
    shapes, weights = list(SHAPES), list(SHAPES.values())
    target = busy * 8 * nodes
    i, misses = 0, 0
    while ledger.total_capacity[GPU] - ledger.total_free[GPU] < target and misses < 200:
        job = job_of(i, rng.choices(shapes, weights)[0], rng.choice(names), rng.choice(PRIORITIES), -rng.random() * 3600)
        found = place(ledger, job.worker, job.workers, job.placement, near=job.topology)
        i += 1
        if found is None:
            misses += 1
            continue
        state.queue.add(job)
        state.start(job.id, found, job.submit_time + 1)
    for _ in range(queued):
        state.submit(job_of(i, rng.choices(shapes, weights)[0], rng.choice(names), rng.choice(PRIORITIES),
                            rng.random() * 600))
        i += 1
    return state, rng


def measure(args: argparse.Namespace, explain: bool) -> dict[str, Any]:
    budget = args.budget_ms / 1000 if explain and args.budget_ms > 0 else None
    c0 = time.process_time()
    state, rng = snapshot(args.nodes, args.queued, args.tenants, args.busy, args.seed, Policy(cycle_budget_s=budget))
    build_cpu_s = time.process_time() - c0
    alloc = 1 - state.ledger.total_free[GPU] / state.ledger.total_capacity[GPU]
    print(f"snapshot: {len(state.ledger.nodes):,} nodes, {alloc:.0%} GPUs allocated by {len(state.running):,} "
          f"jobs, {len(state.queue):,} queued in {len(state.queue.buckets())} buckets (built in {build_cpu_s:.1f} CPU s)",
          flush=True)
    cycle_ms, cpu_ms, decisions, admits, cut = [], [], 0, 0, 0
    next_id = 10**7
    now = 1000.0
    for _ in range(args.cycles):
        t0, c0 = time.perf_counter(), time.process_time()
        cycle = schedule(state, now, explain=explain)
        cycle_ms.append(1000 * (time.perf_counter() - t0))
        cpu_ms.append(1000 * (time.process_time() - c0))  # robust to other load on a shared machine
        decisions += len(cycle.decisions)
        cut += not cycle.complete
        admits += sum(isinstance(d, Admit) for d in cycle.decisions)
        state.apply(cycle.decisions, now)
        if state.running:
            state.finish(rng.choice(list(state.running)))
        while args.refill and len(state.queue) < args.queued:  # keep the queue as deep as it started
            state.submit(job_of(next_id, rng.choices(list(SHAPES), list(SHAPES.values()))[0],
                                f"tenant-{rng.randrange(args.tenants)}", rng.choice(PRIORITIES), now))
            next_id += 1
        now += 1.0
    total_s = sum(cycle_ms) / 1000
    return {"explain": explain, "budget_s": budget, "cycles": args.cycles, "cut_short": cut, "decisions": decisions,
            "admissions": admits, "snapshot_cpu_s": build_cpu_s,
            "median_ms_per_cycle": statistics.median(cycle_ms), "p99_ms_per_cycle": _p99(cycle_ms),
            "max_ms_per_cycle": max(cycle_ms), "p99_cpu_ms_per_cycle": _p99(cpu_ms),
            "cpu_ms_per_decision": sum(cpu_ms) / decisions if decisions else None,
            "mean_ms_per_cycle": statistics.fmean(cycle_ms),
            "median_cpu_ms_per_cycle": statistics.median(cpu_ms),
            "cpu_decisions_per_s": decisions / (sum(cpu_ms) / 1000) if sum(cpu_ms) else None,
            "ms_per_decision": 1000 * total_s / decisions if decisions else None,
            "decisions_per_s": decisions / total_s if total_s else None,
            "admissions_per_s": admits / total_s if total_s else None,
            "queued_at_end": len(state.queue), "running_at_end": len(state.running)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--queued", type=int, default=10_000)
    ap.add_argument("--tenants", type=int, default=10)
    ap.add_argument("--busy", type=float, default=0.85, help="fraction of GPUs held by running jobs")
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="50 cycles")
    ap.add_argument("--refill", action="store_true", help="after each cycle submit jobs until --queued wait again "
                    "(with --queued 1: a decision on an otherwise empty queue)")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/out/decision.json)")
    ap.add_argument("--placement", default="pack", help="every job's placement (pack, frag, auto, ...)")
    ap.add_argument("--topology", action="store_true",
                    help="racked nodes (8 hosts a rack, 4 racks a block), multi-node jobs preferred: rack")
    ap.add_argument("--budget-ms", type=float, default=1000 * LIVE_CYCLE_BUDGET_S,
                    help="cycle time budget of the explain (live) run; 0: none (default: the live platform's)")
    args = ap.parse_args(argv)
    global PLACEMENT, TOPOLOGY
    PLACEMENT, TOPOLOGY = args.placement, args.topology
    if args.quick:
        args.cycles = 50
    result: dict[str, Any] = {"machine": print_machine(), "args": vars(args) | {"out": str(args.out)}, "runs": []}
    for explain in (True, False):
        result["runs"].append(measure(args, explain))
        write_json("decision", result, args.out)
    rows = [{"mode": ("explain (live)" if r["explain"] else "no reasons (sim)")
             + (f", budget {1000 * r['budget_s']:g} ms" if r["budget_s"] else ""),
             "median ms/cycle": f"{r['median_ms_per_cycle']:.1f}", "p99 ms/cycle": f"{r['p99_ms_per_cycle']:.1f}",
             "cut short": r["cut_short"], "decisions": r["decisions"], "ms/decision": _f(r["ms_per_decision"], ".2f"),
             "decisions/s": _f(r["decisions_per_s"], ",.0f"), "admissions/s": _f(r["admissions_per_s"], ",.0f"),
             "median CPU ms/cycle": f"{r['median_cpu_ms_per_cycle']:.1f}",
             "p99 CPU ms/cycle": f"{r['p99_cpu_ms_per_cycle']:.1f}",
             "CPU ms/decision": _f(r["cpu_ms_per_decision"], ".2f"),
             "decisions per CPU-s": _f(r["cpu_decisions_per_s"], ",.0f")}
            for r in result["runs"]]
    result["load_end"] = os.getloadavg()
    write_json("decision", result, args.out)
    print(f"\nload average at the end: {result['load_end'][0]:.1f}")
    print(markdown(rows, list(rows[0])))
    best = result["runs"][0]
    print(f"\nreference (quoted, not measured here): Kueue ~{KUEUE_ADMISSIONS_PER_S} admissions/s, "
          f"kube-scheduler ~{KUBE_SCHEDULER_PODS_PER_S} pods/s; cuberay (explain) "
          f"{_f(best['admissions_per_s'], ',.0f')} admissions/s on {args.nodes:,} nodes x {args.queued:,} queued")
    return 0


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


if __name__ == "__main__":
    sys.exit(main())
