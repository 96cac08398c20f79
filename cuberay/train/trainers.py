"""Which Ray Train trainer runs a function-mode TrainJob, per framework (the spec's ``backend``).

Every one is a Ray Train V2 ``DataParallelTrainer``: the same train loop API, the same
``ScalingConfig`` (so worker i is pinned to node i exactly as for torch), the same checkpoints in
``RunConfig.storage_path`` and the same ``FailureConfig`` restarts. What differs is the framework's
own set-up before the loop runs: torch's process group (gloo on CPU, NCCL on GPUs), TensorFlow's
``TF_CONFIG`` for ``MultiWorkerMirroredStrategy``, XGBoost's and LightGBM's collective
communicators. Ray Train V2's Horovod trainer is deprecated and its JAX trainer wants TPUs or GPUs;
those frameworks come in through command mode (``mpi``, ``JAX_*``).

The trainer modules are imported only when their framework runs, so a cluster without TensorFlow
runs torch jobs as before.
"""

from __future__ import annotations

import importlib
from typing import Any

from cuberay.errors import SpecError

# backend -> (module, trainer class, what to install)
TRAINERS: dict[str, tuple[str, str, str]] = {
    "torch": ("ray.train.torch", "TorchTrainer", "torch"),
    "deepspeed": ("ray.train.torch", "TorchTrainer", "torch deepspeed"),
    "tensorflow": ("ray.train.tensorflow", "TensorflowTrainer", "tensorflow-cpu (or tensorflow on GPU nodes)"),
    "xgboost": ("ray.train.xgboost", "XGBoostTrainer", "xgboost-cpu (or xgboost on GPU nodes)"),
    "lightgbm": ("ray.train.lightgbm", "LightGBMTrainer", "lightgbm"),
}


def trainer_class(backend: str) -> Any:
    """The trainer class for ``backend``; a clear error when its framework is not installed."""
    if backend not in TRAINERS:
        raise SpecError(f"backend {backend!r} is not one of {', '.join(TRAINERS)}; pick one of them")
    module_name, class_name, install = TRAINERS[backend]
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise SpecError(f"backend {backend!r} needs {install} in the job's Python ({err}); add it to the "
                        f"image, or to the job's runtime_env pip list") from err
    return getattr(module, class_name)


def framework_kwargs(backend: str, use_gpu: bool) -> dict[str, Any]:
    """The trainer's framework-specific arguments (its backend config), beyond Ray's defaults."""
    if backend in ("torch", "deepspeed"):
        from ray.train.torch import TorchConfig

        # gloo on CPU; NCCL when workers hold GPUs (Ray's own default, said explicitly).
        return {"torch_config": TorchConfig(backend="nccl" if use_gpu else "gloo")}
    return {}
