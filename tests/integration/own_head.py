"""A Ray head of a test's own beside the session's cluster: its environment, and the sweep that ends it.

The head runs from the real CLI in subprocesses with a home, a Ray temp root and a ~ of its own (its token goes
to ~/.ray there), none of the session cluster's variables, and a login no tenant names.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

SESSION_VARIABLES = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "CUBERAY_HEAD_ID")  # the session's cluster


def own_head_env(root: Path) -> dict[str, str]:
    """The environment of a head under ``root`` (keep ``root`` short: Ray's socket paths stay under 108 bytes)."""
    env = {key: value for key, value in os.environ.items() if key not in SESSION_VARIABLES}
    env.update({"RAY_TMPDIR": str(root), "TMPDIR": str(root), "CUBERAY_HOME": str(root / "home"),
                "HOME": str(root / "user"), "CUBERAY_USER": "newcomer", "RAY_USAGE_STATS_ENABLED": "0"})
    (root / "user").mkdir(exist_ok=True)
    return env


def kill_leftovers(env: dict[str, str]) -> None:
    """Kill every process started with this head's home: never leak a head into the session, even when
    `cuberay down` failed."""
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CUBERAY_HOME") == env["CUBERAY_HOME"]:
                proc.kill()
        except psutil.Error:
            continue
