"""A user's own DeepSpeed training script, run unchanged by every worker of a command gang.

Written as for the ``deepspeed`` launcher or ``torchrun``: ``deepspeed.init_distributed``
reads ``RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT`` from the environment (a
cuberay command gang sets them), and ``deepspeed.initialize`` builds the ZeRO engine, its
optimizer and a distributed data loader from the DeepSpeed config: ``--deepspeed_config
ds_config.json``, or one built from ``--zero-stage``/``--micro-batch``/``--lr``. No ssh, no
hostfile. On CPU the ranks talk over gloo (``--backend``).

It trains an MLP on scikit-learn's bundled digits (offline) and exits non-zero when the
world DeepSpeed sees is not the one in the environment or the last epoch's mean loss is not
below ``--target-loss``. Run: ``python -m cuberay.examples.ds_train --zero-stage 2``
(configs/jobs/train-deepspeed-command.yaml).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import deepspeed
import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)),
                        help="set by the deepspeed launcher; LOCAL_RANK in the environment otherwise")
    parser.add_argument("--backend", default="gloo", help="torch.distributed backend (nccl on GPUs)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--zero-stage", type=int, default=2)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--target-loss", type=float, default=0.5)
    parser = deepspeed.add_config_arguments(parser)  # --deepspeed, --deepspeed_config
    return parser.parse_args(argv)


def ds_config(args: argparse.Namespace) -> dict[str, Any]:
    if args.deepspeed_config:
        with open(args.deepspeed_config) as f:
            return json.load(f)
    return {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": args.zero_stage},
        # torch's AdamW: DeepSpeed's fused Adam is a CUDA kernel.
        "optimizer": {"type": "AdamW", "params": {"lr": args.lr, "torch_adam": True}},
        "steps_per_print": 1_000_000,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.backend == "gloo":
        # On CPUs DeepSpeed compiles a shared-memory all-reduce kernel on first use (40 s of a 2-core machine)
        # that only its inference path calls; training all-reduces through torch.distributed.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend=args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if (rank, world) != (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])):
        raise SystemExit(f"DeepSpeed sees rank {rank} of {world}, the environment says "
                         f"{os.environ['RANK']} of {os.environ['WORLD_SIZE']}")
    torch.manual_seed(0)
    digits = load_digits()
    data = TensorDataset(torch.tensor(digits.data / 16.0, dtype=torch.float32),
                         torch.tensor(digits.target, dtype=torch.long))
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    engine, _, loader, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters(),
                                                training_data=data, config=ds_config(args))
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        losses = []
        for x, y in loader:
            loss = loss_fn(engine(x), y)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        mean = torch.tensor([sum(losses) / len(losses)])
        dist.all_reduce(mean)
        mean_loss = mean.item() / world
        if rank == 0:
            print(f"epoch {epoch} loss {mean_loss:.3f}", flush=True)
    print(f"ds_train ok rank={rank} world={world} local_rank={args.local_rank} "
          f"zero={engine.zero_optimization_stage()} loss={mean_loss:.3f}", flush=True)
    if mean_loss >= args.target_loss:
        print(f"loss {mean_loss:.3f} is not below {args.target_loss}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
