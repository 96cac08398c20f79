"""The README is the test: every command of its shell blocks runs verbatim, in order, as a newcomer's would.

The newcomer is a login that no tenant names (the bundled platform file lets "*" in), with a home of their own
(no ~/.cuberay, no ~/.ray), fresh CUBERAY_HOME and Ray temp dirs, no RAY_* or CUBERAY_* variable set and the
venv's bin first on PATH (the README's `source .venv/bin/activate`). They work in a folder of their own where the
checkout's configs/ and traces/ are linked, so the files the commands write (manifests/, jct.png, trace.csv)
stay out of the tree. Each command runs in bash; what it exports (``eval "$(cuberay env)"``) carries over to the
commands after it, as in one shell. Which commands are left out and which exits are expected is the README's to
say (tests/readme_commands.py): `make demo` and `make test`, and commands marked "needs Kubernetes".

The platform it starts is the README's own (`cuberay up`): a local head of its own beside the session's cluster,
stopped by the README's `cuberay down` (or here, if a command failed before it).

Where a README command is the suite's only run of something, its output is checked here too (``CHECKS``), so the
suite runs it once: the NNI experiment import (eight trials of the experiment file's own trial command).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.readme_commands import Command, readme_commands

pytestmark = pytest.mark.own_ray  # runs beside the session cluster's tests (tests/run_suite.py)

REPO = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_S = 600  # the longest README command (a training run with --wait) takes about a minute
LINKED = ("configs", "traces")


def _newcomer_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "CUBERAY_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for name in ("home", "cuberay-home", "tmp"):
        (root / name).mkdir()
    bin_dir = str(Path(sys.executable).parent)
    env.update({"HOME": str(root / "home"), "CUBERAY_HOME": str(root / "cuberay-home"),
                "RAY_TMPDIR": str(root / "tmp"), "TMPDIR": str(root / "tmp"),
                "CUBERAY_USER": f"newcomer{secrets.token_hex(3)}", "VIRTUAL_ENV": str(Path(bin_dir).parent),
                "PATH": os.pathsep.join([bin_dir, env.get("PATH", "")]), "RAY_USAGE_STATS_ENABLED": "0"})
    return env


def _run(command: Command, env: dict[str, str], cwd: Path, env_file: Path) -> tuple[int, str, str, dict[str, str]]:
    """Run one command in bash; its exit code, its stdout, its stderr, and the environment it leaves for the
    next."""
    script = f"{command.text}\n__rc=$?\nenv -0 > {env_file}\nexit $__rc\n"
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return -1, out, f"{err}\n[no end after {COMMAND_TIMEOUT_S} s: killed]", env
    left = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item) \
        if env_file.exists() else env
    return proc.returncode, out, err, left


def _tails(out: str, err: str) -> str:
    """A command's stdout and stderr, the last 4000 characters of each, for a failure message."""
    return (f"--- its stdout (last 4000 characters) ---\n{out[-4000:]}\n"
            f"--- its stderr (last 4000 characters) ---\n{err[-4000:]}")


def _nni_import_outcome(stdout: str) -> None:
    """configs/tune/experiment.yml (searchSpaceFile, trialCommand run unchanged, TPE, Medianstop) ran its eight
    trials and found a best value and config; stdout holds the outcome and nothing else."""
    outcome = json.loads(stdout)
    assert outcome["state"] == "SUCCEEDED" and outcome["trials"] == 8, outcome
    assert 0.5 < outcome["best_value"] <= 1.0 and set(outcome["best_config"]) == {"lr", "alpha", "epochs"}, outcome


# README command -> a check of its stdout, for the commands no other test runs (tests/unit/test_readme_commands.py
# fails when the README no longer has one of them as written).
CHECKS: dict[str, Callable[[str], None]] = {
    "cuberay tune import configs/tune/experiment.yml --wait -o json": _nni_import_outcome,
}


# The whole README, every command after the other, takes about 8 minutes on 2 cores; a CI runner
# a fifth slower went past the suite's 10-minute default.
@pytest.mark.timeout(1500)
def test_every_readme_command_runs_as_written(tmp_path: Path) -> None:
    work = tmp_path / "clone"
    work.mkdir()
    for name in LINKED:
        (work / name).symlink_to(REPO / name)
    env = _newcomer_env(tmp_path)
    commands = [c for c in readme_commands() if c.runs_here]
    assert len(commands) >= 40, f"only {len(commands)} README commands found: is the parser still right?"
    done: list[str] = []
    try:
        for command in commands:
            started = time.monotonic()
            rc, out, err, env = _run(command, env, work, tmp_path / "env")
            took = time.monotonic() - started
            done.append(f"  {took:6.1f} s  rc {rc}  README:{command.line}  {command.text}")
            assert rc == command.exits, (
                f"README line {command.line}: `{command.text}` exited {rc}, expected {command.exits}\n"
                f"{_tails(out, err)}\n--- the commands so far ---\n" + "\n".join(done))
            if command.text in CHECKS:
                try:
                    CHECKS[command.text](out)
                except (AssertionError, ValueError, KeyError, TypeError) as failed:  # ValueError: no JSON on stdout
                    raise AssertionError(
                        f"README line {command.line}: `{command.text}` ran, but its output is not what it should be: "
                        f"{failed!r}\n{_tails(out, err)}") from failed
        print("README commands:\n" + "\n".join(done))
    finally:
        subprocess.run(["bash", "-c", "cuberay down"], cwd=work, env=env, capture_output=True, timeout=300)
