"""The pure core imports neither Ray nor Kubernetes (DESIGN: "a pure policy core").

Each module is imported in a fresh interpreter, because in this process some
other test may already have imported Ray.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PURE_MODULES = ("resources", "ledger", "placement", "queue", "scheduling", "decisions", "cluster_state",
                "reservation", "admission", "sim", "records",
                "sim_inputs", "sim_cluster", "sim_plot", "states", "specs")

PROBE = (
    "import importlib, sys; importlib.import_module(sys.argv[1]); "
    "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'kubernetes'}))"
)


@pytest.mark.parametrize("name", PURE_MODULES)
def test_pure_module_imports_neither_ray_nor_kubernetes(name: str) -> None:
    if not (REPO_ROOT / "cuberay" / "platform" / f"{name}.py").exists():
        pytest.skip(f"cuberay/platform/{name}.py is not written yet")
    module = f"cuberay.platform.{name}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, module],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"importing {module} failed:\n{result.stderr}"
    heavy = result.stdout.strip().splitlines()[-1]
    assert heavy == "[]", (
        f"importing {module} also imported {heavy}. Rule: the pure core (resources, ledger, "
        "placement, admission, sim) never imports Ray or Kubernetes, directly or through "
        "cuberay/__init__.py. Fix: move the Ray/Kubernetes code into controller.py, "
        "launcher.py, runner.py or cuberay/kuberay/, or import it lazily inside the function."
    )


def test_probe_detects_ray() -> None:
    """The probe itself must be able to fail: importing ray is reported."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, "ray"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "['ray']"
