"""DeepSpeed checkpoints through DeepSpeed's own save/load, inside Ray Train checkpoints.

Every rank calls :func:`report` with its engine: DeepSpeed writes the rank's shard
(``engine.save_checkpoint``: under ZeRO-1/2 rank 0 adds the module weights, each rank
its ``zero_pp_rank_<r>_*_optim_states.pt``; under ZeRO-3 each rank also its share of
the weights) into a fresh local directory, and ``ray.train.report`` hands that
directory to Ray Train, which puts the files of all ranks into the one checkpoint
directory of the report (Ray Train V2 agrees the directory name across ranks). A
restarted worker group gets that directory back from ``ray.train.get_checkpoint()``
and :func:`restore` hands it to ``engine.load_checkpoint``, so optimizer state and
ZeRO partitions come back as DeepSpeed saved them; nothing is gathered on one rank.

Rank 0 also writes ``cuberay.json`` (the caller's ``meta``, e.g. the epoch, and the
world size). When a run comes back with another world size, DeepSpeed cannot
re-partition ZeRO optimizer shards saved for the old one, so under ZeRO-1/2 only the
module weights are loaded and the optimizer starts afresh (said in the log); a ZeRO-3
checkpoint, whose weights are partitioned too, is refused with how to convert it.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable

import ray.train
import torch.distributed as dist

TAG = "deepspeed"  # DeepSpeed's checkpoint tag: the subdirectory holding the shards
META_FILE = "cuberay.json"


def report(engine: Any, metrics: dict[str, Any], *, meta: dict[str, Any] | None = None,
           also: Callable[[str], None] | None = None) -> None:
    """Save this rank's DeepSpeed shard and report it with ``metrics`` (every rank calls it: it is a collective).

    ``also(directory)`` may add files of its own (e.g. gathered weights for serving) before the upload.
    """
    with tempfile.TemporaryDirectory(prefix="cuberay-ds-") as directory:
        engine.save_checkpoint(directory, tag=TAG)
        if dist.get_rank() == 0:
            with open(os.path.join(directory, META_FILE), "w") as f:
                json.dump({**(meta or {}), "world_size": dist.get_world_size()}, f)
        if also is not None:
            also(directory)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory))


def restore(engine: Any) -> dict[str, Any] | None:
    """Load the run's last checkpoint into ``engine`` (every rank); return the ``meta`` saved with it, or None.

    None when the run has no checkpoint yet, or its checkpoint holds no DeepSpeed shards.
    """
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as directory:
        if not os.path.isdir(os.path.join(directory, TAG)):
            return None
        with open(os.path.join(directory, META_FILE)) as f:
            meta = json.load(f)
        same_world = int(meta.get("world_size", 0)) == dist.get_world_size()
        if not same_world and engine.zero_optimization_stage() == 3:
            raise RuntimeError(f"the ZeRO-3 checkpoint {checkpoint.path} was saved by {meta.get('world_size')} ranks "
                               f"and cannot be loaded by {dist.get_world_size()} (each rank holds a share of the "
                               f"weights); run with {meta.get('world_size')} workers, or convert it to full weights "
                               f"with its zero_to_fp32.py")
        if not same_world and dist.get_rank() == 0:
            print(f"cuberay: checkpoint saved by {meta.get('world_size')} ranks, run has {dist.get_world_size()}: "
                  f"loading the DeepSpeed module weights only; the optimizer state starts afresh", flush=True)
        path, _ = engine.load_checkpoint(directory, tag=TAG, load_optimizer_states=same_world,
                                         load_lr_scheduler_states=same_world, load_module_only=not same_world)
    if path is None:
        raise RuntimeError(f"DeepSpeed found no checkpoint {TAG!r} in {checkpoint.path}; its files are incomplete")
    return meta
