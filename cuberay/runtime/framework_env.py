"""The names other frameworks' launchers set, for a command gang's worker: TensorFlow, JAX, Paddle, MLP.

A script written for Kubeflow's TFJob, for ``jax.distributed.initialize``, for PaddleJob or for the
RDMA article's ``MLP_*`` convention reads its rank and peers from these; cuberay sets them on every
worker of a command gang next to the PyTorchJob and Volcano names (:mod:`cuberay.runtime.env`), so the
script runs unchanged.

- ``TF_CONFIG`` (TensorFlow's multi-worker strategies): every worker is a ``worker`` task, index =
  rank, the cluster lists each worker's own ``ip:port`` (its ``endpoint``); worker 0 acts as chief,
  as ``MultiWorkerMirroredStrategy`` assumes when there is no chief task. A gang with roles (``tasks``:
  each member's task type and index, as TFJob's replica types) lists each type's endpoints under its
  name; an ``evaluator`` is left out of the cluster, as TensorFlow expects, and only told its own task.
- JAX: ``JAX_COORDINATOR_ADDRESS`` is read by ``jax.distributed.initialize()`` itself; the process
  count and id are not (JAX only auto-detects SLURM, MPI and TPU clusters), so a script passes
  ``num_processes=int(os.environ["JAX_NUM_PROCESSES"])`` and ``process_id=int(os.environ["JAX_PROCESS_ID"])``.
- Paddle's collective mode: ``PADDLE_TRAINER_ENDPOINTS`` (every worker's endpoint),
  ``PADDLE_CURRENT_ENDPOINT``, ``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ID``.
- ``MLP_*`` as the RDMA article maps them: ``MLP_WORKER_GPU=$GPU_NUM``, ``MLP_WORKER_NUM=$WORLD_SIZE``,
  ``MLP_ROLE_INDEX=$RANK``, ``MLP_WORKER_0_HOST=$MASTER_ADDR``, ``MLP_WORKER_0_PORT=$MASTER_PORT``.

Pure: no Ray import.
"""

from __future__ import annotations

import json

FRAMEWORK_NAMES = frozenset({
    "TF_CONFIG",
    "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
    "PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT", "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ID",
    "MLP_WORKER_GPU", "MLP_WORKER_NUM", "MLP_ROLE_INDEX", "MLP_WORKER_0_HOST", "MLP_WORKER_0_PORT",
})


def tf_config(rank: int, endpoints: list[str], tasks: list[tuple[str, int]] | None = None) -> str:
    """``TF_CONFIG`` for member ``rank`` of a gang whose members listen on ``endpoints``; ``tasks[i]`` is member
    i's (task type, index), None: every member a worker, index = rank."""
    tasks = tasks or [("worker", i) for i in range(len(endpoints))]
    cluster: dict[str, list[str]] = {}
    for (kind, _), endpoint in sorted(zip(tasks, endpoints), key=lambda pair: pair[0]):
        if kind != "evaluator":
            cluster.setdefault(kind, []).append(endpoint)
    kind, index = tasks[rank]
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}}, separators=(",", ":"))


def framework_env(*, rank: int, endpoints: list[str], master_addr: str, master_port: int,
                  coordinator_port: int, gpu_num: int, tasks: list[tuple[str, int]] | None = None) -> dict[str, str]:
    """Every name of :data:`FRAMEWORK_NAMES` for worker ``rank``; ``endpoints[i]`` is worker i's ``ip:port``.

    ``coordinator_port`` is JAX's coordinator on worker 0's node, apart from ``master_port`` so a
    script that uses both torch.distributed and JAX does not collide.
    """
    world = len(endpoints)
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside a world of {world} endpoints")
    return {
        "TF_CONFIG": tf_config(rank, endpoints, tasks),
        "JAX_COORDINATOR_ADDRESS": f"{master_addr}:{coordinator_port}",
        "JAX_NUM_PROCESSES": str(world),
        "JAX_PROCESS_ID": str(rank),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
        "PADDLE_CURRENT_ENDPOINT": endpoints[rank],
        "PADDLE_TRAINERS_NUM": str(world),
        "PADDLE_TRAINER_ID": str(rank),
        "MLP_WORKER_GPU": str(gpu_num),
        "MLP_WORKER_NUM": str(world),
        "MLP_ROLE_INDEX": str(rank),
        "MLP_WORKER_0_HOST": master_addr,
        "MLP_WORKER_0_PORT": str(master_port),
    }
