#!/usr/bin/env bash
# A/B of the controller's write path (bench_live.py overhead and drain) between two checkouts of cuberay.
#
#   benchmarks/ab_live.sh TREE_A TREE_B [ROUNDS]      (each tree with its own .venv; default 4 rounds)
#
# Why the care: on 2 cores a run that starts while the last one's Ray processes are still exiting, or while the
# 1-minute load is still high from it, is slower by tens of percent. So before every run this waits until no
# raylet or GCS is left and the load is under 0.6 (at most 2 minutes), and the order alternates by round (A B,
# then B A), so neither tree always runs second. Results: benchmarks/out/ab-live-<time>/, one JSON per run,
# and a summary of the medians with B / A.
set -euo pipefail
a=$(cd "$1" && pwd); b=$(cd "$2" && pwd); rounds=${3:-4}
out="$(cd "$(dirname "$0")" && pwd)/out/ab-live-$(date +%H%M%S)"
mkdir -p "$out"

settle() {
  for _ in $(seq 1 120); do
    if ! pgrep -f "raylet|gcs_server" >/dev/null && awk -v l="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN{exit !(l<0.6)}'; then
      return
    fi
    sleep 1
  done
  echo "warning: the machine did not settle (load $(cut -d' ' -f1 /proc/loadavg)); measuring anyway" >&2
}

for round in $(seq 1 "$rounds"); do
  if (( round % 2 )); then order=("$a:A" "$b:B"); else order=("$b:B" "$a:A"); fi
  for entry in "${order[@]}"; do
    tree=${entry%:*}; side=${entry##*:}
    settle
    scratch=$(mktemp -d /tmp/ab.XXXX); mkdir -p "$scratch/home"
    echo "round $round $side ($tree) $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    (cd "$tree" && RAY_TMPDIR=$scratch TMPDIR=$scratch CUBERAY_HOME=$scratch/home PYTHONPATH=. \
      timeout 1200 .venv/bin/python benchmarks/bench_live.py --parts overhead,drain --probes 20 --tasks 100 \
      > "$out/$side-$round.txt" 2>&1 && cp benchmarks/out/live.json "$out/$side-$round.json")
    rm -rf "$scratch"
  done
done

python3 - "$out" <<'EOF'
import glob, json, statistics, sys
out = sys.argv[1]
figures = {"decision + launch (ms)": lambda d: d["overhead"]["decision_plus_launch_median_ms"],
           "submit -> RUNNING seen (ms)": lambda d: d["overhead"]["submit_to_running_seen_by_client"]["median_ms"],
           "submit 100 (s)": lambda d: d["drain"]["submit_all_s"], "drain 100 (s)": lambda d: d["drain"]["drain_s"]}
runs = {side: [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{side}-*.json"))] for side in "AB"}
print(f"| figure | A rounds | B rounds | B / A (medians) |\n|---|---|---|---|")
for name, get in figures.items():
    a, b = ([get(d) for d in runs[s]] for s in "AB")
    ratio = statistics.median(b) / statistics.median(a) if a and b else float("nan")
    print(f"| {name} | {' / '.join(map(str, a))} | {' / '.join(map(str, b))} | {ratio:.2f} |")
EOF
