"""The root of the command line: help works, usage errors exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuberay.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_help_exits_zero_and_lists_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage" in out
    assert "Exit codes" in out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-command"]) == 2
    assert "no-such-command" in capsys.readouterr().err


def test_python_dash_m_cuberay_runs_the_cli() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    ok = subprocess.run(
        [sys.executable, "-m", "cuberay", "--help"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0, ok.stderr
    assert "cuberay" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "cuberay", "no-such-command"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2, bad.stdout + bad.stderr
