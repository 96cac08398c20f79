"""Run the benchmarks and summarise them.

    python benchmarks/run.py                  # every benchmarks/bench_*.py, one after the other
    python benchmarks/run.py sim              # only bench_sim.py
    python benchmarks/run.py sim decision -- --quick   # arguments after -- go to each benchmark

Each benchmark runs in its own process (so one cannot skew another's memory or
imports), prints its own tables and writes benchmarks/out/<name>.json; this
script prints a summary: exit code, wall time and output file per benchmark.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, ROOT, markdown, print_machine  # noqa: E402

HERE = Path(__file__).resolve().parent


def available() -> dict[str, Path]:
    return {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        print("benchmarks:", ", ".join(available()))
        return 0
    benches = available()
    unknown = [n for n in argv if n.removeprefix("bench_").removesuffix(".py") not in benches]
    if unknown:
        print(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(benches)}", file=sys.stderr)
        return 2
    chosen = [n.removeprefix("bench_").removesuffix(".py") for n in argv] or list(benches)
    print_machine()
    summary, worst = [], 0
    for name in chosen:
        print(f"\n=== {name}: {benches[name].relative_to(ROOT)} {' '.join(extra)}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(benches[name]), *extra], cwd=ROOT)
        out = OUT / f"{name}.json"
        summary.append({"benchmark": name, "exit": rc, "wall s": f"{time.perf_counter() - t0:.1f}",
                        "output": str(out.relative_to(ROOT)) if out.exists() else "-"})
        worst = worst or rc
    print("\n" + markdown(summary, ["benchmark", "exit", "wall s", "output"]))
    return worst


if __name__ == "__main__":
    sys.exit(main())
