"""A minimal elastic training loop: it counts its world size with a collective and checkpoints every step.

``train_func(config)`` is a Ray Train ``train_loop_per_worker`` for an elastic
TrainJob (``workers: {min, max}``). Each step all ranks all-reduce a one, so the
world size is what the process group really has, not what a config says; rank 0
checkpoints the step and the world sizes seen so far. When cuberay resizes the
job, Ray Train starts a new worker group from the latest checkpoint and the loop
carries on from the next step with the new world size. Each step reports
``step, world_size, world_sizes`` (every size seen, in order) and ``node_ids``
(the Ray node of every rank, from the workers themselves).

Config keys: ``steps`` (20), ``step_s`` (0.5: the work of one step, a sleep).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

import ray
import ray.train
import torch
import torch.distributed as dist

STATE_FILE = "state.json"


def _restore() -> dict[str, Any]:
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return {"step": -1, "world_sizes": []}
    with checkpoint.as_directory() as directory, open(os.path.join(directory, STATE_FILE)) as f:
        return json.load(f)


def _world_size() -> int:
    ones = torch.ones(1)
    if dist.is_initialized():
        dist.all_reduce(ones)
    return int(ones.item())


def _node_ids() -> list[str]:
    mine = ray.get_runtime_context().get_node_id()
    if not dist.is_initialized():
        return [mine]
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


def train_func(config: dict[str, Any]) -> None:
    steps, step_s = int(config.get("steps", 20)), float(config.get("step_s", 0.5))
    state = _restore()
    rank = ray.train.get_context().get_world_rank()
    world = _world_size()
    nodes = _node_ids()
    if rank == 0 and state["step"] >= 0:
        print(f"resumed from checkpoint: step {state['step'] + 1} with world size {world}", flush=True)
    sizes = list(state["world_sizes"])
    if not sizes or sizes[-1] != world:
        sizes.append(world)
    for step in range(state["step"] + 1, steps):
        time.sleep(step_s)
        world = _world_size()
        metrics = {"step": step, "world_size": world, "world_sizes": sizes, "node_ids": nodes}
        if rank != 0:
            ray.train.report(metrics)
            continue
        print(f"step {step}: world size {world}", flush=True)
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, STATE_FILE), "w") as f:
                json.dump({"step": step, "world_sizes": sizes}, f)
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory))
