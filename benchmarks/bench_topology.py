"""Topology-aware gangs on a racked cluster under the distance cost: topology off, the Kueue-TAS baseline, cuberay.

    python benchmarks/bench_topology.py                 # every case below, k = 0, 0.5, 1, 2
    python benchmarks/bench_topology.py --quick         # the tuning window only, k = 1
    python benchmarks/bench_topology.py --cases philly:2017-11-01..2017-11-14@A seed:2@A --k 1

A case is a trace on a layout. Traces: a Philly window (``philly:START..END``, end inclusive) or a
Philly-shaped sample (``seed:N``: shapes, durations and tenants drawn from the whole trace, arrivals
uniform over ``--seed-days`` at ``--seed-load`` times what the layout can run). Layouts: ``A`` = 64 x 8
GPUs as 8 racks of 8 hosts in 2 blocks (the one tuned on), ``B`` = 256 x 8 GPUs as 32 racks of 8 hosts
in 4 blocks. Each case replays, under the distance cost scaled by ``k`` (sim/distance.py: 0 is no cost,
1 the cited defaults, 2 twice their excess):

- (a) ``off``: no job asks for a topology; the policy places blind (pack);
- (b) ``kueue``: every multi-host gang (one no host holds) ``preferred: rack``, placed by Kueue's TAS
  algorithm (KEP-2724 BestFit), the rest pack;
- (c) ``cuberay``: the same gangs ``preferred: rack``, placed by cuberay (fill on: jobs without a request
  go to the fullest rack that holds them);
- with ``--required``: every gang (2+ workers) ``required: rack``, by Kueue's algorithm and by cuberay.

All runs of a case use the cuberay admission policy on the same loaded trace, one after another in this
process. Reports the share of multi-host gang starts inside one rack and inside one block, avg JCT, the
worst total wait of a >=16-GPU job, the mean slowdown, goodput, preemptions and CPU seconds, then the
targets per case and k. Writes benchmarks/out/topology.json after every run.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown, print_machine, write_json  # noqa: E402
from bench_sim import DEFAULT_TRACE  # noqa: E402

from cuberay.platform.policy.topology import CUBERAY, KUEUE, Topology  # noqa: E402
from cuberay.platform.sim.cluster import BLOCK_LABEL, RACK_LABEL, racked_cluster  # noqa: E402
from cuberay.platform.sim.distance import DistanceCost  # noqa: E402
from cuberay.platform.sim.engine import Report, simulate  # noqa: E402
from cuberay.platform.sim.trace import TraceJob, load_philly  # noqa: E402

LAYOUTS = {"A": (2, 4, 8), "B": (4, 8, 8)}  # blocks, racks per block, hosts per rack (8 GPUs each)
TUNED = "philly:2017-10-01..2017-10-14@A"
CASES = (TUNED, "philly:2017-11-01..2017-11-14@A", "philly:2017-11-15..2017-11-28@A", "seed:1@A", "seed:2@A",
         "seed:3@A", "seed:1@B")
KS = (0.0, 0.5, 1.0, 2.0)
GPUS_PER_NODE = 8
COLUMNS = ("case", "k", "variant", "jobs", "multi-host starts", "in one rack", "in one block", "avg JCT h",
           "max wait >=16 GPU h", "mean slowdown", "goodput", "preempt", "rejected", "CPU s")


def levels(fill: bool) -> Topology:
    return Topology((("block", BLOCK_LABEL), ("rack", RACK_LABEL)), fill=fill)


def philly_sample(trace: str, seed: int, nodes: int, days: float, load: float) -> list[TraceJob]:
    """Philly-shaped jobs arriving uniformly over ``days`` with GPU-time ``load`` times what ``nodes`` hold."""
    rng = random.Random(seed)
    source = [j for j in load_philly(trace) if j.total_gpus <= GPUS_PER_NODE * nodes]
    span = days * 86400.0
    budget = load * GPUS_PER_NODE * nodes * span
    jobs, used = [], 0.0
    while used < budget:
        drawn = rng.choice(source)
        jobs.append(replace(drawn, id=f"s{seed}-{len(jobs):06d}", submit_time=rng.random() * span))
        used += drawn.total_gpus * drawn.duration
    return sorted(jobs, key=lambda j: j.submit_time)


def load_case(case: str, trace: str, days: float, load: float) -> tuple[list[TraceJob], str]:
    source, _, layout = case.partition("@")
    kind, _, arg = source.partition(":")
    if kind == "philly":
        start, _, end = arg.partition("..")
        return load_philly(trace, start=start, end=end), layout
    blocks, racks, hosts = LAYOUTS[layout]
    return philly_sample(trace, int(arg), blocks * racks * hosts, days, load), layout


def multi_host(job: TraceJob) -> bool:
    return job.total_gpus > GPUS_PER_NODE


def variants(jobs: list[TraceJob], required: bool) -> dict[str, tuple[list[TraceJob], str, bool]]:
    """variant -> (jobs, who places requests, fill)."""
    preferred = [replace(j, near=("preferred", "rack")) if multi_host(j) else j for j in jobs]
    out = {"off": (jobs, CUBERAY, False), "kueue": (preferred, KUEUE, False), "cuberay": (preferred, CUBERAY, True)}
    if required:
        gangs = [replace(j, near=("required", "rack")) if j.workers > 1 else j for j in jobs]
        out["kueue required"] = (gangs, KUEUE, False)
        out["cuberay required"] = (gangs, CUBERAY, True)
    return out


def row(case: str, k: float, variant: str, report: Report, cpu_s: float) -> dict[str, Any]:
    h = 3600.0
    near = report.near
    return {"case": case, "k": f"{k:g}", "variant": variant, "jobs": report.jobs,
            "multi-host starts": int(near.get("multi_host_starts", 0)),
            "in one rack": f"{100 * near.get('in_one_rack', 0):.1f}%",
            "in one block": f"{100 * near.get('in_one_block', 0):.1f}%",
            "avg JCT h": f"{report.avg_jct_s / h:.2f}", "max wait >=16 GPU h": f"{report.max_wait_s_large / h:.1f}",
            "mean slowdown": f"{near.get('mean_slowdown', 1.0):.3f}", "goodput": f"{100 * report.goodput:.2f}%",
            "preempt": report.preemptions, "rejected": report.rejected, "CPU s": f"{cpu_s:.1f}"}


def targets(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case and k: (c) >= (b) inside one rack, (c) avg JCT <= (b)'s, (c) avg JCT < (a)'s (k > 0)."""
    by = {(r["case"], r["k"], r["variant"]): r for r in runs}
    out = []
    for (case, k, variant), c in by.items():
        if variant != "cuberay" or (case, k, "kueue") not in by or (case, k, "off") not in by:
            continue
        b, a = by[(case, k, "kueue")], by[(case, k, "off")]
        rack_c, rack_b = c["near"].get("in_one_rack", 0), b["near"].get("in_one_rack", 0)
        jct_c, jct_b, jct_a = c["avg_jct_s"], b["avg_jct_s"], a["avg_jct_s"]
        out.append({"case": case, "k": k,
                    "in one rack (c) vs (b)": f"{100 * rack_c:.1f}% vs {100 * rack_b:.1f}%: "
                                              f"{'met' if rack_c >= rack_b - 1e-12 else 'NOT met'}",
                    "avg JCT (c) / (b)": f"{jct_c / jct_b:.3f}: {'met' if jct_c <= jct_b else 'NOT met'}",
                    "avg JCT (c) / (a)": f"{jct_c / jct_a:.3f}: "
                                         + ("met" if jct_c < jct_a else "NOT met" if float(k) > 0 else "(no cost)")})
        for req in ("cuberay required", "kueue required"):
            if (case, k, req) in by:
                out[-1][f"{req} / (c) JCT"] = f"{by[(case, k, req)]['avg_jct_s'] / jct_c:.3f}"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=DEFAULT_TRACE)
    ap.add_argument("--cases", nargs="+", default=list(CASES), metavar="TRACE@LAYOUT")
    ap.add_argument("--k", type=float, nargs="+", default=list(KS), help="distance-cost scales")
    ap.add_argument("--required", action="store_true", help="also every gang required: rack")
    ap.add_argument("--required-k", type=float, nargs="+", default=[0.0, 1.0],
                    help="the k values the required variants run at (with --required)")
    ap.add_argument("--seed-days", type=float, default=7.0)
    ap.add_argument("--seed-load", type=float, default=0.9, help="GPU-time asked / what the layout holds")
    ap.add_argument("--quick", action="store_true", help="the tuning window at k = 1")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.cases, args.k = [TUNED], [1.0]
    result: dict[str, Any] = {"machine": print_machine(), "args": {k: str(v) for k, v in vars(args).items()},
                              "runs": []}
    rows: list[dict[str, Any]] = []
    for case in args.cases:
        jobs, layout = load_case(case, args.trace, args.seed_days, args.seed_load)
        cluster = racked_cluster(*LAYOUTS[layout])
        print(f"{case}: {len(jobs):,} jobs, {sum(multi_host(j) for j in jobs):,} multi-host gangs, "
              f"{len(cluster)} nodes", flush=True)
        for k in args.k:
            distance = DistanceCost().scaled(k)
            for variant, (vjobs, algorithm, fill) in variants(jobs, args.required).items():
                if "required" in variant and k not in args.required_k:
                    continue
                c0 = time.process_time()
                report = simulate(vjobs, cluster, policy="cuberay", topology=levels(fill), distance=distance,
                                  near_algorithm=algorithm)
                cpu_s = time.process_time() - c0
                rows.append(row(case, k, variant, report, cpu_s))
                result["runs"].append({"case": case, "k": f"{k:g}", "variant": variant, "cpu_s": cpu_s,
                                       **report.to_dict()})
                write_json("topology", result, args.out)
                print(f"  k={k:g} {variant}: avg JCT {report.avg_jct_s / 3600:.2f} h, in one rack "
                      f"{100 * report.near.get('in_one_rack', 0):.1f}%, {cpu_s:.0f} CPU s", flush=True)
    print()
    print(markdown(rows, COLUMNS))
    checks = targets(result["runs"])
    result["targets"] = checks
    write_json("topology", result, args.out)
    if checks:
        print()
        print(markdown(checks, list(checks[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
