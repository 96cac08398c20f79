"""Command-mode check of a gang: a gloo all-reduce that reads only CubeStudio's env names.

Run by every worker of a command gang (``python -m cuberay.examples.allreduce``).
Each rank contributes ``rank + 1``; the sum must be ``W * (W + 1) / 2``. It reads
``RANK WORLD_SIZE MASTER_ADDR MASTER_PORT`` and nothing cuberay-specific, as an
existing CubeStudio script would (``CUBERAY_NODE_ID`` is only printed if present).
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(
        "gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        rank=rank, world_size=world, timeout=timedelta(seconds=60),
    )
    try:
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        total = int(value.item())
        expected = world * (world + 1) // 2
        assert total == expected, f"all_reduce gave {total}, expected {expected}"
    finally:
        dist.destroy_process_group()
    node = os.environ.get("CUBERAY_NODE_ID") or socket.gethostname()
    print(f"allreduce ok rank={rank} world={world} sum={total} node={node}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
