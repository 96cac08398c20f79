"""Function-mode training: a user's train loop under Ray Train V2's TorchTrainer (or the trainer of another
framework, :mod:`cuberay.train.trainers`).

Worker i is pinned to ``node_ids[i]``: Ray Train V2's ``ScalingConfig.label_selector``
takes one selector per worker (ray/train/v2/api/config.py: a list must have
``num_workers`` entries), and Train turns it into the ``bundle_label_selector`` of
its placement group, bundle i on node i. So the admitted allocation, including
several workers on one node (repeat the node id), is enforced by Ray exactly.

Ray Train numbers ranks itself, grouping workers by node: worker i's bundle is on
``node_ids[i]``, but its world rank follows Train's order. Nothing here relies
on rank i being on node i.
"""

from __future__ import annotations

import functools
import glob
import importlib
import os
import tempfile
from typing import Any, Callable, Mapping

import ray.train
from ray.train import FailureConfig, RunConfig, ScalingConfig

from cuberay.errors import JobFailedError, SpecError
from cuberay.train import nccl, usage
from cuberay.train.trainers import framework_kwargs, trainer_class

# Ray Train's controller takes a worker's report at its next poll of the workers, every 2 s by default, and the
# worker's next report waits for that, so a short job that reports each epoch spends much of its time waiting.
# cuberay polls every POLL_S unless the job's env or the node sets the interval; the driver passes it on to the
# controller (Ray Train propagates it from the driver's environment).
POLL_ENV, POLL_S = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", 0.5


def load_entrypoint(entrypoint: str) -> Callable[..., Any]:
    """Import ``"pkg.module:func"`` and return the function."""
    module_name, sep, attr = entrypoint.partition(":")
    if not sep or not module_name or not attr:
        raise SpecError(f"entrypoint {entrypoint!r} is not \"pkg.module:function\"; write e.g. "
                        f"\"cuberay.examples.digits:train_func\"")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise SpecError(f"entrypoint {entrypoint!r}: cannot import {module_name!r} ({err}); "
                        f"ship the code with the job's working_dir or install it") from err
    func = getattr(module, attr, None)
    if not callable(func):
        raise SpecError(f"entrypoint {entrypoint!r}: {module_name} has no function {attr!r}")
    return func


def with_node_env(func: Callable[..., Any], user_env: Mapping[str, str], use_rdma: bool,
                  rdma_fabric: str | None, use_gpu: bool, job_id: str | None, config: dict) -> Any:
    """Run ``func(config)`` on a Train worker after setting NCCL's environment from this worker's node.

    NCCL reads its environment when the first communicator is created, at the first collective in the
    train loop (DDP's broadcast), so setting it here is in time. With GPUs NCCL also writes its INFO
    lines to a file, which is read at the end to say which transport it chose. With a ``job_id`` the
    worker's peak CPU and memory go to the controller when the loop returns.
    """
    env = nccl.worker_nccl_env(ray.util.get_node_ip_address(), rdma_fabric=rdma_fabric, use_rdma=use_rdma,
                               user_env=user_env)
    for name, value in env.items():
        if name not in user_env:
            os.environ[name] = value
    log_dir = None
    if use_gpu and "NCCL_DEBUG_FILE" not in os.environ:
        log_dir = tempfile.mkdtemp(prefix="cuberay-nccl-")
        os.environ["NCCL_DEBUG_FILE"] = os.path.join(log_dir, "nccl.%h.%p.log")
    sampler = usage.PeakSampler().start() if job_id else None
    try:
        result = func(config)
    finally:
        if log_dir is not None:
            _say_transport(log_dir)
    if sampler is not None:
        usage.report(job_id, ray.train.get_context().get_world_rank(), *sampler.stop())
    return result


def _say_transport(log_dir: str) -> None:
    lines: list[str] = []
    for path in glob.glob(os.path.join(log_dir, "nccl.*.log")):
        with open(path, errors="replace") as f:
            lines.extend(f)
    transport = nccl.parse_transport(lines)
    rank = ray.train.get_context().get_world_rank()
    print(f"cuberay: rank {rank} NCCL transport: {transport or 'not reported (no NCCL collective ran)'}",
          flush=True)


def scaling_config(node_ids: list[str], resources_per_worker: dict[str, float],
                   use_gpu: bool) -> ScalingConfig:
    """One worker per entry of ``node_ids``, each pinned to that node by label."""
    if not node_ids:
        raise ValueError("run_train_function needs at least one node id (one per worker)")
    return ScalingConfig(
        num_workers=len(node_ids), use_gpu=use_gpu, resources_per_worker=dict(resources_per_worker),
        label_selector=[{"ray.io/node-id": node_id} for node_id in node_ids],
    )


def run_train_function(entrypoint: str, *, config: dict, node_ids: list[str],
                       resources_per_worker: dict[str, float], use_gpu: bool, storage_path: str,
                       name: str, max_failures: int = 0,
                       deepspeed_config: dict | None = None, callbacks: list | None = None,
                       env: Mapping[str, str] | None = None, rdma_fabric: str | None = None,
                       job_id: str | None = None, backend: str = "torch") -> dict:
    """Train ``entrypoint`` on one worker per node id under ``backend``'s Ray Train trainer; return metrics and
    checkpoint path.

    Returns ``{"metrics": <rank 0's last report>, "checkpoint_path": str | None,
    "path": <run directory>}``. A restarted run with the same ``name`` and
    ``storage_path`` resumes from its last checkpoint. Raises JobFailedError when
    training fails beyond ``max_failures`` restarts. ``callbacks`` are Ray Train
    ``UserCallback``s (the runner's reports checkpoints to the controller).
    """
    loop_config = dict(config)
    if deepspeed_config is not None:
        loop_config["deepspeed_config"] = deepspeed_config
    use_rdma = float(resources_per_worker.get("rdma", 0)) > 0
    os.environ.setdefault(POLL_ENV, (env or {}).get(POLL_ENV, str(POLL_S)))  # this process is the job's driver
    loop = functools.partial(with_node_env, load_entrypoint(entrypoint), dict(env or {}), use_rdma,
                             rdma_fabric, use_gpu, job_id)
    trainer = trainer_class(backend)(
        train_loop_per_worker=loop,
        train_loop_config=loop_config,
        **framework_kwargs(backend, use_gpu),
        scaling_config=scaling_config(node_ids, resources_per_worker, use_gpu),
        run_config=RunConfig(name=name, storage_path=storage_path,
                             failure_config=FailureConfig(max_failures=max_failures),
                             callbacks=list(callbacks or [])),
    )
    try:
        result = trainer.fit()
    except ray.train.TrainingFailedError as err:
        raise JobFailedError(
            f"training run {name!r} ({entrypoint}) failed after {max_failures} allowed "
            f"restart(s): {err}; read the worker logs in the Ray dashboard (Train tab), "
            f"or raise max_failures to retry from the last checkpoint") from err
    return {
        "metrics": dict(result.metrics or {}),
        "checkpoint_path": result.checkpoint.path if result.checkpoint else None,
        "path": result.path,
    }
