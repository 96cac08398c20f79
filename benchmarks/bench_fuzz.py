"""Fuzz the spec loader, the resource grammar, the trace readers and the platform file with hypothesis.

Each target gets ``--examples`` generated inputs (default 10,000) and must accept each or refuse it with a
CuberayError; a refused document must name its field path (tests/fuzzing.py holds the targets and the
contract; tests/unit/test_fuzz.py runs 150 per target in CI). Prints one line per target and writes JSON.

    .venv/bin/python benchmarks/bench_fuzz.py --examples 10000 --out /tmp/fuzz.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings  # noqa: E402

from tests.fuzzing import TARGETS  # noqa: E402


def run_target(name: str, examples: int, seed: int) -> dict[str, Any]:
    strategy, target = TARGETS[name]
    counts = {"inputs": 0}

    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(value: Any) -> None:
        counts["inputs"] += 1
        target(value)

    run._hypothesis_internal_use_seed = seed  # reproducible with --seed
    t0 = time.monotonic()
    failure = None
    try:
        run()
    except BaseException as err:  # noqa: BLE001 - a crash is the figure being measured
        failure = f"{type(err).__name__}: {str(err)[:2000]}"
    return {"target": name, "inputs": counts["inputs"], "crashes": 0 if failure is None else 1,
            "failure": failure, "seconds": round(time.monotonic() - t0, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = []
    for name in args.targets.split(","):
        result = run_target(name, args.examples, args.seed)
        results.append(result)
        print(f"{name:10s} inputs {result['inputs']:6d}  crashes {result['crashes']}  {result['seconds']:7.1f}s"
              + (f"  {result['failure'][:300]}" if result["failure"] else ""), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 1 if any(r["crashes"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
