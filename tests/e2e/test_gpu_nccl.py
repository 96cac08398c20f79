"""Two-worker training on GPUs over NCCL, with the transport NCCL chose in the job's output.

Opt-in: ``CUBERAY_E2E_GPU=1 .venv/bin/python -m pytest tests/e2e/test_gpu_nccl.py`` on a machine with
at least two CUDA GPUs (and a CUDA build of torch). On a node with RDMA NICs the transport line reads
``IB (mlx5_0:1/RoCE, ...)``; without, ``Socket (eth0)`` or NCCL's intra-node P2P/SHM (then
"not reported": NCCL never opened a network transport).
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest

TRANSPORT = re.compile(r"rank \d+ NCCL transport: (.+)")


def _two_gpu_node():
    import ray
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 CUDA GPUs, torch sees {torch.cuda.device_count()}")
    ray.init(num_gpus=2, log_to_driver=True)
    return ray.get_runtime_context().get_node_id()


@pytest.mark.enabled_by("CUBERAY_E2E_GPU", "two CUDA GPUs")
@pytest.mark.parametrize("deepspeed_config", [None, {"zero_optimization": {"stage": 2}}], ids=["ddp", "zero2"])
def test_two_gpu_workers_train_over_nccl(tmp_path: Path, capfd: pytest.CaptureFixture,
                                         deepspeed_config: dict | None) -> None:
    import ray

    from cuberay.train.torch_launcher import run_train_function

    node = _two_gpu_node()
    try:
        started = time.monotonic()
        result = run_train_function(
            "cuberay.examples.digits:train_func", config={"epochs": 2}, node_ids=[node, node],
            resources_per_worker={"CPU": 1, "GPU": 1}, use_gpu=True, storage_path=str(tmp_path),
            name=f"nccl-{uuid.uuid4().hex[:6]}", deepspeed_config=deepspeed_config)
        elapsed = time.monotonic() - started
    finally:
        ray.shutdown()
    assert result["metrics"]["world_size"] == 2 and result["metrics"]["accuracy"] > 0.5
    out = capfd.readouterr().out
    transports = TRANSPORT.findall(out)
    assert transports, out[-3000:]
    print(f"NCCL transport: {transports[0]}; 2 epochs in {elapsed:.1f}s")
