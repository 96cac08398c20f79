"""GPU smoke test: Ray sees the real GPUs and a task computes on one.

Opt-in: ``CUBERAY_E2E_GPU=1 .venv/bin/python -m pytest tests/e2e`` on a machine
with a CUDA GPU (and a CUDA build of torch).
"""

from __future__ import annotations

import pytest


@pytest.mark.enabled_by("CUBERAY_E2E_GPU", "a CUDA GPU")
def test_ray_task_computes_on_a_gpu() -> None:
    import ray
    import torch

    assert torch.cuda.is_available(), "CUBERAY_E2E_GPU=1 but torch sees no CUDA device"
    ray.init(num_gpus=torch.cuda.device_count())
    try:

        @ray.remote(num_gpus=1)
        def matmul_on_gpu() -> tuple[list[str], float]:
            x = torch.ones(256, 256, device="cuda")
            return ray.get_gpu_ids(), float((x @ x).sum().item())

        gpu_ids, total = ray.get(matmul_on_gpu.remote(), timeout=300)
        assert len(gpu_ids) == 1
        assert total == 256.0**3
    finally:
        ray.shutdown()
