"""GPU sharing: how much of a fleet is allocated when the arrived GPU demand reaches its capacity.

    python benchmarks/bench_sharing.py                   # seeds 1..5, every placement
    python benchmarks/bench_sharing.py --seeds 1 --write-inputs benchmarks/out/sharing

The shape of a GPU-sharing production cluster (Weng et al., USENIX ATC'23, "Beware of
Fragmentation"): ~1,500 nodes mixing 8-, 4-, 2- and 1-GPU machines and CPU-only ones
(~6,000 GPUs); tasks of which ~13% need no GPU, ~38% a share of one card (0.2-0.8,
often near 0.5), ~48% one whole card and ~1% 2-8 cards, each with 3-16 CPUs. Tasks
arrive in random order and never leave. Each placement replays the same tasks through
the simulator (``fifo-backfill``: every task that fits starts at once) and stops once
the GPUs asked for reach 100% of the cluster's; the figure is the share of GPUs then
allocated. The published anchors on that workload: Random 86.3%, BestFit 92.9%, FGD 95.2%.

``--cpu-heavy`` is the variant with a CPU-heavy share: 40% of the tasks need no GPU, and those ask for
4-48 CPUs (some as large as half a CPU-only node), the mix where spreading one-pod CPU tasks over the
CPU nodes leaves none with room for a large one, which then takes CPUs beside GPUs.

``--write-inputs DIR`` writes one seed's trace and cluster so that the same replay runs as
``cuberay sim DIR/trace.csv --cluster DIR/cluster.yaml --policy fifo-backfill --until 100%
--placement frag --placement best_fit``. Writes benchmarks/out/sharing.json.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown, print_machine, write_json  # noqa: E402

from cuberay.platform.policy.scheduling import TenantQuota  # noqa: E402
from cuberay.platform.sim.cluster import NodeSpec  # noqa: E402
from cuberay.platform.sim.engine import simulate  # noqa: E402
from cuberay.platform.sim.trace import TraceJob  # noqa: E402
from cuberay.platform.spec.resources import CPU, GPU, Resources  # noqa: E402

# (nodes, GPUs, CPUs) per kind of machine: 1,500 nodes, 5,850 GPUs.
NODE_KINDS = ((500, 8, 72), (250, 4, 48), (250, 2, 32), (350, 1, 16), (150, 0, 96))
PLACEMENTS = ("random", "best_fit", "pack", "auto", "frag")
LABELS = {"random": "random", "best_fit": "best-fit", "pack": "pack (auto before frag)", "auto": "auto (now)",
          "frag": "frag"}
CPUS = (3, 4, 6, 8, 12, 16)
CPU_WEIGHTS = (10, 30, 15, 25, 12, 8)
SHARES = [round(0.2 + 0.05 * i, 2) for i in range(13)]  # 0.2 .. 0.8
CPU_ONLY = 0.13
HEAVY_CPU_ONLY = 0.40  # --cpu-heavy: the share of tasks that need no GPU ...
HEAVY_CPUS, HEAVY_WEIGHTS = (4, 8, 16, 24, 32, 48), (20, 25, 20, 15, 12, 8)  # ... and their CPUs


def cluster() -> list[NodeSpec]:
    nodes = []
    for count, gpus, cpus in NODE_KINDS:
        for i in range(count):
            cap = {CPU: float(cpus), **({GPU: float(gpus)} if gpus else {})}
            nodes.append(NodeSpec(f"g{gpus}-{i:04d}", cap))
    return nodes


def task(rng: random.Random, i: int, cpu_heavy: bool = False) -> TraceJob:
    u = rng.random()
    cpu_only = HEAVY_CPU_ONLY if cpu_heavy else CPU_ONLY
    # The GPU tasks keep their mix: u rescaled onto the default's GPU range (exactly u without --cpu-heavy).
    rest = (u - cpu_only) / (1 - cpu_only) * (1 - CPU_ONLY) + CPU_ONLY if cpu_heavy else u
    if u < cpu_only:
        gpus = 0.0
    elif rest < 0.51:  # a share of one card, most often about a half
        gpus = 0.5 if rng.random() < 0.4 else rng.choice(SHARES)
    elif rest < 0.99:
        gpus = 1.0
    else:
        gpus = float(rng.choice((2, 4, 8)))
    if cpu_heavy and gpus == 0.0:
        cpus = float(rng.choices(HEAVY_CPUS, HEAVY_WEIGHTS)[0])
    else:
        cpus = float(rng.choices(CPUS, CPU_WEIGHTS)[0])
    return TraceJob(f"task-{i:05d}", float(i), 1e9, gpus, 1, cpus)


def workload(seed: int, capacity: float, cpu_heavy: bool = False) -> list[TraceJob]:
    """Tasks in random order until their GPU demand passes 110% of capacity (the replay stops at 100%)."""
    rng = random.Random(seed)
    jobs, demand = [], 0.0
    while demand < 1.1 * capacity:
        job = task(rng, len(jobs), cpu_heavy)
        jobs.append(job)
        demand += job.gpus
    return jobs


def run(seed: int, placement: str, cpu_heavy: bool = False) -> dict[str, Any]:
    nodes = cluster()
    capacity = sum(n.capacity.get(GPU, 0.0) for n in nodes)
    jobs = workload(seed, capacity, cpu_heavy)
    quotas = {"default": TenantQuota("default", Resources(), None)}
    t0 = time.perf_counter()
    report = simulate(jobs, nodes, quotas, "fifo-backfill", until_demand=1.0, placement=placement)
    return {"seed": seed, "placement": placement, "cpu_heavy": cpu_heavy, "allocated": report.gpu_allocated_fraction,
            "arrived": report.arrived_gpu_demand, "tasks": report.running_at_end + report.queued_at_end,
            "running": report.running_at_end, "waiting": report.queued_at_end,
            "wall_s": time.perf_counter() - t0}


def write_inputs(directory: Path, seed: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    nodes = cluster()
    jobs = workload(seed, sum(n.capacity.get(GPU, 0.0) for n in nodes))
    lines = ["submit_time,duration,gpus,cpus"] + [f"{j.submit_time:g},{j.duration:g},{j.gpus:g},{j.cpus:g}"
                                                  for j in jobs]
    (directory / "trace.csv").write_text("\n".join(lines) + "\n")
    groups = ["nodes:"]
    for count, gpus, cpus in NODE_KINDS:
        groups.append(f"  - {{name: g{gpus}, count: {count}, resources: {{cpu: \"{cpus}\", memory: 1Ti, "
                      f"gpu: \"{gpus}\"}}}}")
    (directory / "cluster.yaml").write_text("\n".join(groups) + "\n")
    print(f"wrote {directory}/trace.csv ({len(jobs):,} tasks) and {directory}/cluster.yaml")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5, help="seeds 1..N")
    ap.add_argument("--seed", type=int, action="append", help="repeatable: these seeds instead of 1..N")
    ap.add_argument("--placement", action="append", choices=PLACEMENTS, help="repeatable (default: all)")
    ap.add_argument("--cpu-heavy", action="store_true", help="the variant with 40%% CPU-only tasks of 4-48 CPUs")
    ap.add_argument("--write-inputs", type=Path, default=None, metavar="DIR")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/out/sharing.json)")
    args = ap.parse_args(argv)
    if args.write_inputs:
        write_inputs(args.write_inputs, 1)
        return 0
    placements = args.placement or list(PLACEMENTS)
    result: dict[str, Any] = {"machine": print_machine(), "args": {"seeds": args.seed or args.seeds,
                                                                   "placements": placements,
                                                                   "cpu_heavy": args.cpu_heavy},
                              "runs": []}
    seeds = args.seed or list(range(1, args.seeds + 1))
    for seed in seeds:
        for placement in placements:
            r = run(seed, placement, args.cpu_heavy)
            result["runs"].append(r)
            print(f"seed {seed} {placement:9s} allocated {100 * r['allocated']:.2f}% of GPUs at "
                  f"{100 * r['arrived']:.1f}% demand ({r['waiting']} tasks waiting, {r['wall_s']:.1f} s)", flush=True)
            write_json("sharing", result, args.out)
    rows = []
    for placement in placements:
        got = [r["allocated"] for r in result["runs"] if r["placement"] == placement]
        rows.append({"placement": LABELS[placement], **{f"seed {s}": f"{100 * g:.2f}%" for s, g in zip(seeds, got)},
                     "mean": f"{100 * statistics.fmean(got):.2f}%"})
    print()
    print(markdown(rows, list(rows[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
