"""How long a CLI command takes as a process, over the head's HTTP API and over Ray, on a live local platform.

    python benchmarks/bench_cli.py [--runs 7]

Starts a platform as a newcomer would (`cuberay up` with the bundled platform file, a scratch home and Ray temp
dir), holds one running job and a few waiting ones, then times each command as a whole process (interpreter start,
imports, the call, the print) `--runs` times over HTTP (what the CLI does by default) and as many times over Ray
(`CUBERAY_TRANSPORT=ray`: it joins the cluster as a Ray driver), alternating the two. `cancel` cancels a
different waiting job each run. The target: at most 0.5 s per command over HTTP. Writes
benchmarks/out/cli.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _common import ROOT, markdown, print_machine, write_json

TARGET_S = 0.5


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CUBERAY_"))}
    for name in ("home", "cuberay", "tmp"):
        (root / name).mkdir()
    env.update({"HOME": str(root / "home"), "CUBERAY_HOME": str(root / "cuberay"), "RAY_TMPDIR": str(root / "tmp"),
                "TMPDIR": str(root / "tmp"), "CUBERAY_USER": "bench", "RAY_USAGE_STATS_ENABLED": "0"})
    return env


def _cli(env: dict[str, str], *argv: str, check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).parent / "cuberay"), *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - started
    if check and done.returncode != 0:
        raise SystemExit(f"`cuberay {' '.join(argv)}` exited {done.returncode}: {done.stderr[-2000:]}")
    return took, done


def _job(root: Path, name: str, command: str, cpu: str = "250m") -> str:
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name, "tenant": "research"},
        "spec": {"workers": 2, "resources": {"cpu": cpu, "memory": "128Mi"}, "command": command}}))
    return str(path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    info = print_machine()
    from cuberay.platform.demo import scratch_platform

    root = Path(tempfile.mkdtemp(prefix="crb", dir="/tmp"))
    env = _env(root)
    platform = scratch_platform(ROOT / "configs" / "platform.yaml", root)
    ray_env = {**env, "CUBERAY_TRANSPORT": "ray"}
    rows, data = [], {}
    try:
        up_s, _ = _cli(env, "up", "--platform", str(platform), "-o", "json")
        print(f"cuberay up: {up_s:.1f} s")
        _, done = _cli(env, "submit", _job(root, "holder", "sleep 600"), "-o", "json")
        job = yaml.safe_load(done.stdout)["id"]
        # Waiting jobs to cancel, one per run and transport: with the holder running, each is over research's
        # max of 2 CPUs (bundled platform file), so it waits for quota.
        waiting = []
        for i in range(2 * args.runs):
            _, done = _cli(env, "submit", _job(root, f"waiter-{i}", "true", cpu="1"), "-o", "json")
            waiting.append(yaml.safe_load(done.stdout)["id"])
        commands = {"status": ["status", job], "queue": ["queue"], "tenants": ["tenants"], "logs": ["logs", job],
                    "cancel": None, "--help": ["--help"]}
        for name, argv in commands.items():
            times: dict[str, list[float]] = {"http": [], "ray": []}
            for run in range(args.runs):
                for transport, e in (("http", env), ("ray", ray_env)) if run % 2 == 0 else \
                        (("ray", ray_env), ("http", env)):
                    line = argv if argv is not None else ["cancel", waiting.pop()]
                    took, _ = _cli(e, *line)
                    times[transport].append(took)
            data[name] = times
            row = {"command": f"cuberay {name}"}
            for transport in ("http", "ray"):
                row[f"{transport} median s"] = f"{statistics.median(times[transport]):.2f}"
                row[f"{transport} max s"] = f"{max(times[transport]):.2f}"
            row["ray / http"] = f"{statistics.median(times['ray']) / statistics.median(times['http']):.1f}x"
            rows.append(row)
            print(f"{name}: http {row['http median s']} s, ray {row['ray median s']} s", flush=True)
    finally:
        _cli(env, "down", check=False)
    worst = max(statistics.median(t["http"]) for t in data.values()) if data else float("inf")
    print(markdown(rows, ["command", "http median s", "http max s", "ray median s", "ray max s", "ray / http"]))
    print(f"slowest median over HTTP: {worst:.2f} s (target <= {TARGET_S} s: "
          f"{'met' if worst <= TARGET_S else 'NOT met'}); {args.runs} runs each")
    write_json("cli", {"machine": info, "runs": args.runs, "seconds": data, "target_s": TARGET_S, "worst_median_s": worst})
    return 0


if __name__ == "__main__":
    sys.exit(main())
