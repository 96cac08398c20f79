"""Branin with nni:tpe through cuberay's Tune searcher vs NNI's TPE in a plain loop.

    python benchmarks/bench_tune.py            # 10 paired seeds, 40 trials, concurrency 2
    python benchmarks/bench_tune.py --seeds 2  # quicker

Both sides use TpeTuner(seed=s) with NNI's defaults (constant liar "best") and
two suggestions outstanding. The native loop keeps two parameter sets out and
completes the older one first. The cuberay side is a real Ray Tune run on a local
Ray (2 CPUs, one per trial, function trials through the NNI bridge), so the order
in which the two running trials finish is Ray's. Reported per seed: simple
regret (best - 0.397887), the searcher's median time per suggestion (inside
``suggest``, i.e. NNI plus the Searcher wrapper), and the search's wall time
against the sum of its trials' run times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, markdown, print_machine, write_json  # noqa: E402

from cuberay.examples.branin import MINIMUM, SEARCH_SPACE, branin  # noqa: E402

TRIALS, CONCURRENCY = 40, 2


def native(seed: int) -> dict:
    """NNI's TPE driven the way NNI's dispatcher drives it, with two suggestions outstanding."""
    import logging

    from nni.algorithms.hpo.tpe_tuner import TpeTuner

    logging.getLogger("nni").setLevel(logging.WARNING)
    tuner = TpeTuner(optimize_mode="minimize", seed=seed)
    tuner.update_search_space(SEARCH_SPACE)
    out, best, times, next_id = [], float("inf"), [], 0
    while next_id < TRIALS or out:
        while next_id < TRIALS and len(out) < CONCURRENCY:
            start = time.perf_counter()
            out.append((next_id, tuner.generate_parameters(next_id)))
            times.append(time.perf_counter() - start)
            next_id += 1
        pid, params = out.pop(0)
        value = branin(params["x1"], params["x2"])
        tuner.receive_trial_result(pid, params, value)
        tuner.trial_end(pid, True)
        best = min(best, value)
    return {"regret": best - MINIMUM, "suggest_ms": 1000 * statistics.median(times)}


def cuberay(seed: int) -> dict:
    from cuberay.tune.search import TrialCode, run_search

    result = run_search(TrialCode(entrypoint="cuberay.examples.branin:trial"), SEARCH_SPACE, metric="value",
                        mode="min", algorithm="nni:tpe", num_samples=TRIALS, max_concurrent=CONCURRENCY, seed=seed,
                        trial_resources={"CPU": 1}, storage_path=tempfile.mkdtemp(prefix="bench-tune-"),
                        name=f"branin-{seed}")
    return {"regret": result.best.value - MINIMUM, "suggest_ms": statistics.median(result.suggest_ms),
            "wall_s": result.wall_s, "trial_s": result.trial_time_s, "trials": len(result.trials)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args(argv)
    info = print_machine()
    import os

    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=CONCURRENCY, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    rows = []
    try:
        for seed in range(args.seeds):
            n, c = native(seed), cuberay(seed)
            rows.append({"seed": seed, "native regret": round(n["regret"], 4), "cuberay regret": round(c["regret"], 4),
                         "native ms/suggest": round(n["suggest_ms"], 2), "cuberay ms/suggest": round(c["suggest_ms"], 2),
                         "wall s": round(c["wall_s"], 1), "trial time sum s": round(c["trial_s"], 2),
                         "trials": c["trials"]})
            print(rows[-1], flush=True)
    finally:
        ray.shutdown()
    mean_native = statistics.mean(r["native regret"] for r in rows)
    mean_cuberay = statistics.mean(r["cuberay regret"] for r in rows)
    summary = {
        "mean regret native": round(mean_native, 4), "mean regret cuberay": round(mean_cuberay, 4),
        "ratio": round(mean_cuberay / mean_native, 3) if mean_native else None,
        "median ms/suggest cuberay": round(statistics.median(r["cuberay ms/suggest"] for r in rows), 2),
        "median ms/suggest native": round(statistics.median(r["native ms/suggest"] for r in rows), 2),
        "median wall s": round(statistics.median(r["wall s"] for r in rows), 1),
        "median trial time sum s": round(statistics.median(r["trial time sum s"] for r in rows), 2),
    }
    print(markdown(rows, list(rows[0])))
    print(markdown([summary], list(summary)))
    write_json("tune", {"machine": info, "rows": rows, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
