"""The environment a distributed worker sees: CubeStudio's names, computed once.

Existing CubeStudio scripts read ``RANK WORLD_SIZE MASTER_ADDR MASTER_PORT GPU_NUM``
(PyTorchJob), ``VC_TASK_INDEX VC_WORKER_NUM VC_WORKER_HOSTS`` (Volcano) and the
``KFJ_*`` task identity (see reference/cubestudio.md §1.2-1.4). cuberay sets all
of them, so those scripts run unchanged under a Ray placement group.

Decisions, and why:

- One worker per bundle, as one pod per replica in CubeStudio: ``LOCAL_RANK`` is
  always 0, ``WORLD_SIZE``/``NNODES``/``VC_WORKER_NUM`` count workers (the OSS
  PyTorchJob meaning, pods not processes), ``NODE_RANK`` = ``RANK``. Scripts that
  start several processes per worker pass ``--nproc_per_node=$GPU_NUM`` to torchrun.
- ``GPU_NUM`` is the number of cards a worker touches: whole counts as they are,
  a fraction (``0.5``: a shared card) rounds *up* to 1, because scripts use it as
  ``nproc_per_node`` and 0 would start nothing; 0 GPUs gives ``0``.
- 0 GPUs: CubeStudio sets ``NVIDIA_VISIBLE_DEVICES=none``, which only the container
  runtime reads when a container starts, so it would do nothing here. Ray 2.60 no
  longer blanks ``CUDA_VISIBLE_DEVICES`` for zero-GPU actors (ray#54868), so a
  CPU worker on a GPU node would see every card. cuberay therefore sets
  ``CUDA_VISIBLE_DEVICES=""`` for 0-GPU workers. With GPUs, Ray sets
  ``CUDA_VISIBLE_DEVICES`` to the cards it assigned and cuberay leaves it alone.
- Layers, lowest first (:func:`compose_env`): soft defaults (``NCCL_DEBUG=INFO``,
  ``PYTHONUNBUFFERED=1`` so output streams) < the worker process's own environment
  < platform facts (``KFJ_*``, ``GPU_NUM``, ...) < the user's ``env`` < topology
  names (rank, world, master, ``VC_*``, and the other frameworks' ``TF_CONFIG``, ``JAX_*``,
  ``PADDLE_*``, ``MLP_*`` of :mod:`cuberay.runtime.framework_env`), which nobody may override
  because a wrong rank hangs the whole gang.

Pure: no Ray import.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Mapping

from cuberay.platform.api.records import JobIdentity
from cuberay.runtime.framework_env import FRAMEWORK_NAMES, framework_env

# Names that describe the gang itself; user env cannot override them.
TOPOLOGY_NAMES = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "NNODES",
    "VC_TASK_INDEX", "VC_WORKER_NUM", "VC_WORKER_HOSTS",
}) | FRAMEWORK_NAMES
# Defaults that yield even to the worker process's inherited environment.
SOFT_DEFAULTS: dict[str, str] = {"NCCL_DEBUG": "INFO", "PYTHONUNBUFFERED": "1"}
# The Ray node id the worker runs on (read from Ray inside the worker), for logs and tests.
NODE_ID_NAME = "CUBERAY_NODE_ID"


def gpu_num(gpus_per_worker: float) -> int:
    """``GPU_NUM`` for a per-worker GPU amount: whole cards, a shared card counts as 1."""
    if gpus_per_worker < 0 or math.isnan(gpus_per_worker):
        raise ValueError(f"gpus_per_worker must be >= 0, got {gpus_per_worker!r}")
    return math.ceil(gpus_per_worker)


def identity_env(job: JobIdentity) -> dict[str, str]:
    """The ``KFJ_*`` task identity and ``USERNAME`` (CubeStudio §1.2), plus ``CUBERAY_*``."""
    return {
        "KFJ_TASK_ID": job.job_id,
        "KFJ_TASK_NAME": job.name,
        "KFJ_RUN_ID": job.run_id,
        "KFJ_CREATOR": job.user,
        "KFJ_RUNNER": job.user,
        "KFJ_TASK_PROJECT_NAME": job.tenant,
        "KFJ_TASK_RESOURCE_CPU": job.cpu,
        "KFJ_TASK_RESOURCE_MEMORY": job.memory,
        "KFJ_TASK_RESOURCE_GPU": job.gpu,
        "KFJ_TASK_RESOURCE_RDMA": job.rdma,
        "KFJ_NAMESPACE": job.namespace or job.tenant,
        "KFJ_PIPELINE_NAME": job.name,
        "KFJ_ENVIRONMENT": job.environment,
        "USERNAME": job.user,
        # cuberay's own names, for code written against cuberay rather than CubeStudio.
        "CUBERAY_JOB_ID": job.job_id,
        "CUBERAY_JOB_KIND": job.kind,
        "CUBERAY_TENANT": job.tenant,
    }


def topology_env(*, rank: int, world_size: int, master_addr: str, master_port: int,
                 hosts: list[str]) -> dict[str, str]:
    """Rank and world names in both the PyTorchJob and the Volcano spelling."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of {world_size} workers")
    if len(hosts) != world_size:
        raise ValueError(f"{len(hosts)} hosts given for a world of {world_size} workers")
    return {
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "WORLD_SIZE": str(world_size),
        "NODE_RANK": str(rank),
        "NNODES": str(world_size),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "VC_TASK_INDEX": str(rank),
        "VC_WORKER_NUM": str(world_size),
        "VC_WORKER_HOSTS": ",".join(hosts),
    }


def worker_env(*, rank: int, world_size: int, master_addr: str, master_port: int,
               hosts: list[str], gpus_per_worker: float, job: JobIdentity,
               node_id: str = "", endpoints: list[str] | None = None,
               coordinator_port: int | None = None, tasks: list[tuple[str, int]] | None = None) -> dict[str, str]:
    """Every name cuberay sets for one worker (layer them with :func:`compose_env`).

    ``endpoints[i]`` is worker i's own ``ip:port`` (TensorFlow's and Paddle's peers) and
    ``coordinator_port`` JAX's on worker 0. The other frameworks' names come only with ``endpoints``
    (a command gang): a small job's one process keeps a ``TF_CONFIG`` of its own. ``tasks`` are a gang with
    roles' TensorFlow task types (:func:`cuberay.runtime.framework_env.tf_config`).
    """
    env = dict(SOFT_DEFAULTS)
    env.update(identity_env(job))
    env["GPU_NUM"] = str(gpu_num(gpus_per_worker))
    if gpus_per_worker == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""
    if node_id:
        env[NODE_ID_NAME] = node_id
    env.update(topology_env(rank=rank, world_size=world_size, master_addr=master_addr,
                            master_port=master_port, hosts=hosts))
    if endpoints is not None:
        env.update(framework_env(rank=rank, endpoints=endpoints, master_addr=master_addr,
                                 master_port=master_port, coordinator_port=coordinator_port or master_port,
                                 gpu_num=gpu_num(gpus_per_worker), tasks=tasks))
    return env


def compose_env(worker: Mapping[str, str], *, base: Mapping[str, str],
                user: Mapping[str, str]) -> dict[str, str]:
    """Layer soft defaults < ``base`` (inherited) < platform < ``user`` < topology."""
    soft = {k: v for k, v in worker.items() if k in SOFT_DEFAULTS}
    topology = {k: v for k, v in worker.items() if k in TOPOLOGY_NAMES}
    platform = {k: v for k, v in worker.items() if k not in soft and k not in topology}
    # `python` in a command is the interpreter cuberay runs under (with the job's libraries), not
    # whichever one a Ray worker's PATH happens to find first.
    here = os.path.dirname(sys.executable)
    path = base.get("PATH", "")
    first = path.split(os.pathsep)[0]
    inherited = {**base, "PATH": path if first == here else os.pathsep.join(filter(None, [here, path]))}
    return {**soft, **inherited, **platform, **user, **topology}
