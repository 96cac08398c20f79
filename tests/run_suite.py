"""`make test`: every tier, in two lanes side by side on the machine's cores.

The integration tier's tests spend about a third of their time waiting (a node to start, a poll, a driver's
start), which leaves a core idle. So the tiers run in two pytest processes at once:

    lane 1: the unit tier, then the integration tests on the session's shared Ray cluster, its output live
    lane 2: the integration tests marked ``second_lane`` (on a session cluster of this lane's own), then those that
            bring a Ray head of their own (marked ``own_ray``: the README walk-through, the local tenant cluster,
            the local head's ``down``, the whole-Ray restart), printed when they end

Lane 2's two parts run in two pytest processes one after the other, so its session cluster stops when its
tests end: an idle four-node cluster costs about 14 % of a core (measured 2026-12-07), and in one process it
stayed up, idle, through the own-head tests' 15 minutes.

The unit tier goes in lane 1 because lane 2 holds the suite's longest test (the README walk-through): measured
2026-12-07 on 2 cores, the session cluster's tests took 1,466 s and lane 2's 117 s + 1,473 s, so lane 1 ended
two minutes before lane 2 with a core left to it.

``second_lane`` moves whole modules across to even the lanes out (by their durations in benchmarks/RESULTS.md,
"Test suite"). The e2e tier goes first (it skips itself unless enabled, see tests/e2e). Lane 2 and the unit tier
each run with Ray temp, TMPDIR, cuberay home and pytest temp folders of their own, so nothing one lane's Ray writes
is read by the other.
Every tier runs even if another fails; the exit code is 1 if any did, and the last line names them.
"""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest"]


def _run(name: str, argv: list[str], env: dict[str, str], out: Path | None) -> tuple[str, int, float]:
    started = time.monotonic()
    header = f"== {name} =="
    if out is None:
        print(header, flush=True)
        rc = subprocess.call(PYTEST + argv, cwd=REPO, env=env)
    else:
        with out.open("a") as log:
            log.write(header + "\n")
            log.flush()
            rc = subprocess.call(PYTEST + argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    return name, rc, time.monotonic() - started


def _own_env(prefix: str) -> tuple[dict[str, str], list[str]]:
    """An environment and pytest options with a Ray temp root, TMPDIR, cuberay home and pytest's temp folders of
    their own: lane 2's, and the unit tier's, so nothing either leaves is read by the session cluster's tests.
    Paths stay short: Ray's and multiprocessing's socket paths must stay under 108 bytes, and the README test's
    newcomer runs a head from a folder under its test's tmp_path (pytest-of-<user>/pytest-<n>/ by default)."""
    env = dict(os.environ)
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR")
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=base or "/tmp"))
    (root / "home").mkdir()
    env.update({"RAY_TMPDIR": str(root), "TMPDIR": str(root), "CUBERAY_HOME": str(root / "home")})
    return env, [f"--basetemp={root / 'p'}"]


def _cache_bytecode() -> None:
    """Let the suite's processes keep compiled bytecode, and compile this checkout's sources once, up front.

    About a thousand processes (job drivers, Ray workers, CLI runs) import cuberay during the suite. Where the
    environment sets PYTHONDONTWRITEBYTECODE (as CI's does), Python never caches the checkout's bytecode (the venv's
    packages are compiled at install), so each of them compiled cuberay's modules from source again: ~0.1 CPU s
    a process (measured 2026-12-07), and pytest re-did its assertion rewriting of every test module in each of
    its four processes (collecting both tiers: 14.5 CPU s against 8.7 s with its cache). The caches go to
    __pycache__ folders, which git ignores.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # every tier's environment starts from this one
    for folder in ("cuberay", "tests"):
        compileall.compile_dir(REPO / folder, quiet=1, workers=0)


def main() -> int:
    _cache_bytecode()
    results = [_run("e2e tier", ["tests/e2e", "--durations=5"], dict(os.environ), None)]
    log = Path(tempfile.mkstemp(prefix="cuberay-lane2-", suffix=".log")[1])
    lane2: list[tuple[str, int, float]] = []

    def second_lane() -> None:
        env, temp = _own_env("l2")
        lane2.append(_run("integration tier: the second lane's session cluster tests",
                          ["tests/integration", "-m", "second_lane", "--durations=20", *temp], env, log))
        env, temp = _own_env("l3")
        lane2.append(_run("integration tier: tests with a Ray of their own",
                          ["tests/integration", "-m", "own_ray", "--durations=20", *temp], env, log))

    thread = threading.Thread(target=second_lane)
    thread.start()
    unit_env, unit_temp = _own_env("u")
    results.append(_run("unit tier", ["tests/unit", "--durations=10", *unit_temp], unit_env, None))
    results.append(_run("integration tier: the session cluster's tests",
                        ["tests/integration", "-m", "not own_ray and not second_lane", "--durations=30"],
                        dict(os.environ), None))
    thread.join()
    sys.stdout.write(log.read_text())
    log.unlink()
    results += lane2
    for name, rc, took in results:
        print(f"{name}: {'ok' if rc == 0 else f'exit {rc}'} in {took:.0f} s")
    failed = [name for name, rc, _ in results if rc != 0]
    if failed:
        print("FAILED tiers: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
