"""Philly trace replays: cuberay vs FIFO vs FIFO+backfill on several windows, and the full-trace wall time.

    python benchmarks/bench_sim.py            # the four windows on 64 nodes (3 policies each), full trace
    python benchmarks/bench_sim.py --quick    # one week (2017-10-01..07), 64 nodes, no full replay
    python benchmarks/bench_sim.py --windows 2017-10-01..2017-11-30 --nodes 64 80 --no-full

A policy is judged on every window, not one: Sep-Oct (the busiest), Oct-Nov,
Nov-Dec, and Oct 1 - Dec 1 (one day more than Oct-Nov). End dates are
inclusive, as ``cuberay sim --end`` reads them. Each window reports the floor
(mean job duration: the average JCT if no job ever waited). All policies of
one window and cluster size run in this one process on the same loaded trace,
one after the other, so their wall times and ratios compare. Prints a markdown
table; writes benchmarks/out/sim.json (rewritten after every run, so a killed
benchmark keeps what it finished).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown, print_machine, write_json  # noqa: E402

from cuberay.platform.sim.cluster import uniform_cluster  # noqa: E402
from cuberay.platform.sim.engine import Report, simulate  # noqa: E402
from cuberay.platform.sim.trace import load_philly  # noqa: E402

# The trace is vendored in the repository (traces/philly/SOURCE.md); CUBERAY_PHILLY points elsewhere.
DEFAULT_TRACE = os.environ.get(
    "CUBERAY_PHILLY", str(Path(__file__).resolve().parents[1] / "traces" / "philly" / "philly.csv"))
POLICIES = ("cuberay", "fifo", "fifo-backfill")
WINDOWS = ("2017-09-01..2017-10-31", "2017-10-01..2017-11-30", "2017-11-01..2017-12-31", "2017-10-01..2017-12-01")
COLUMNS = ("window", "nodes", "policy", "jobs", "finished", "floor h", "avg JCT h", "p50 JCT h", "p99 JCT h",
           "avg wait h", "max wait >=16 GPU h", "max first start >=16 GPU h", "makespan h", "util", "util queued",
           "goodput", "preempt", "wall s", "cpu s", "decisions/s")


def row(window: str, report: Report, floor_s: float, cpu_s: float) -> dict[str, Any]:
    h = 3600.0
    return {"window": window, "nodes": report.nodes, "policy": report.policy, "jobs": report.jobs,
            "finished": report.finished, "floor h": f"{floor_s / h:.2f}", "avg JCT h": f"{report.avg_jct_s / h:.2f}",
            "p50 JCT h": f"{report.p50_jct_s / h:.2f}", "p99 JCT h": f"{report.p99_jct_s / h:.1f}",
            "avg wait h": f"{report.avg_wait_s / h:.2f}", "max wait >=16 GPU h": f"{report.max_wait_s_large / h:.1f}",
            "max first start >=16 GPU h": f"{report.max_first_wait_s_large / h:.1f}",
            "makespan h": f"{report.makespan_s / h:.0f}", "util": f"{100 * report.gpu_utilization:.1f}%",
            "util queued": f"{100 * report.gpu_utilization_while_queued:.1f}%",
            "goodput": f"{100 * report.goodput:.2f}%", "preempt": report.preemptions,
            "wall s": f"{report.wall_s:.1f}", "cpu s": f"{cpu_s:.1f}", "decisions/s": f"{report.decisions_per_s:,.0f}"}


def timed(jobs: list, nodes: int, policy: str) -> tuple[Report, float]:
    """A replay and the CPU seconds it took (wall time on a shared machine measures the neighbours too)."""
    c0 = time.process_time()
    report = simulate(jobs, uniform_cluster(nodes, gpus_per_node=8), policy=policy)
    return report, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=DEFAULT_TRACE, help="philly.csv (env CUBERAY_PHILLY)")
    ap.add_argument("--quick", action="store_true", help="one week, 64 nodes, no full replay")
    ap.add_argument("--windows", nargs="+", default=list(WINDOWS), metavar="START..END",
                    help="submission windows, end date inclusive (default: the four of the policy comparison)")
    ap.add_argument("--nodes", type=int, nargs="+", default=[64], help="cluster sizes (8 GPUs per node)")
    ap.add_argument("--policies", nargs="+", default=list(POLICIES))
    ap.add_argument("--no-full", action="store_true", help="skip the full-trace cuberay replay")
    ap.add_argument("--full-only", action="store_true", help="only the full-trace cuberay replay")
    ap.add_argument("--full-nodes", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/out/sim.json)")
    args = ap.parse_args(argv)
    if args.quick:
        args.windows, args.nodes, args.no_full = ["2017-10-01..2017-10-07"], [64], True
    if not Path(args.trace).exists():
        print(f"trace {args.trace} not found; pass --trace or set CUBERAY_PHILLY", file=sys.stderr)
        return 2

    result: dict[str, Any] = {"machine": print_machine(), "args": {k: str(v) for k, v in vars(args).items()},
                              "runs": []}
    rows: list[dict[str, Any]] = []

    def record(window: str, run: tuple[Report, float], floor_s: float) -> None:
        report, cpu_s = run
        rows.append(row(window, report, floor_s, cpu_s))
        result["runs"].append({"window": window, "floor_s": floor_s, "cpu_s": cpu_s, **report.to_dict()})
        path = write_json("sim", result, args.out)
        print(f"  {report.policy} on {report.nodes} nodes: {report.finished:,}/{report.jobs:,} finished, "
              f"avg JCT {report.avg_jct_s / 3600:.2f} h, wall {report.wall_s:.1f} s -> {path}", flush=True)

    if not args.full_only:
        for window in args.windows:
            start, _, end = window.partition("..")
            t0 = time.perf_counter()
            jobs = load_philly(args.trace, start=start, end=end)
            floor = sum(j.duration for j in jobs) / len(jobs) if jobs else 0.0
            print(f"loaded {len(jobs):,} jobs submitted {window} in {time.perf_counter() - t0:.1f} s", flush=True)
            for nodes in args.nodes:
                for policy in args.policies:
                    record(window, timed(jobs, nodes, policy), floor)
    if not args.no_full:
        jobs = load_philly(args.trace)
        print(f"full trace: {len(jobs):,} jobs, cuberay on {args.full_nodes} nodes", flush=True)
        floor = sum(j.duration for j in jobs) / len(jobs) if jobs else 0.0
        record("full", timed(jobs, args.full_nodes, "cuberay"), floor)

    print()
    print(markdown(rows, COLUMNS))
    _print_ratios(result["runs"])
    return 0


def _print_ratios(runs: list[dict[str, Any]]) -> None:
    """cuberay's avg JCT and large-job wait relative to each baseline on the same window and cluster."""
    by_key = {(r["window"], r["nodes"], r["policy"]): r for r in runs}
    for (window, nodes, policy), ours in by_key.items():
        if policy != "cuberay":
            continue
        for base in ("fifo", "fifo-backfill"):
            other = by_key.get((window, nodes, base))
            if other and other["avg_jct_s"] and other["max_wait_s_large"]:
                print(f"{window} on {nodes} nodes: cuberay avg JCT = {ours['avg_jct_s'] / other['avg_jct_s']:.2f}x "
                      f"{base} ({ours['avg_jct_s'] / ours['floor_s']:.2f}x the floor); worst >=16-GPU total wait "
                      f"= {ours['max_wait_s_large'] / other['max_wait_s_large']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
