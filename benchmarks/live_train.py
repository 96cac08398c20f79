"""The training function both sides of ``bench_live.py`` run: tiny DDP steps, first step marked.

Rank 0 writes two wall-clock times to ``config["marker"]`` (a file; every
process is on this machine): when the train function was entered (the worker
group is up) and the end of its first optimisation step, and prints the latter,
so the benchmark reads "submit -> first step" the same way for a cuberay job
and for a plain ``ray job submit`` of the same TorchTrainer.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

MARKER = "CUBERAY_BENCH_FIRST_STEP"


def train_func(config: dict[str, Any]) -> None:
    entered = time.time()
    import ray.train
    import ray.train.torch
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    for step in range(int(config.get("steps", 5))):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step == 0 and ray.train.get_context().get_world_rank() == 0:
            now = time.time()
            Path(config["marker"]).write_text(f"{entered!r} {now!r}")
            print(f"{MARKER} {now!r}", flush=True)
