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

Each trainer runs without two of Ray Train's default helpers that a cuberay run does not use, each an actor
process of its own per worker group (measured 2026-12-07 on 2 cores: about 1.5 s and 2 s of CPU, of a
2-worker digits run's 23 s): the dataset manager, when the job passes no Ray Datasets (cuberay passes none),
and the placement-group cleaner, a detached actor that polls the run's controller every second so that its
placement group is removed if the controller dies ungracefully. A cuberay run's controller belongs to the job's
driver: when either dies the Ray Job ends, and Ray removes the job's placement groups with it.
"""

from __future__ import annotations

import functools
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
    return _lean(getattr(module, class_name))


# Ray Train's default callbacks (ray.train.v2._internal.callbacks) that a cuberay run does without; see above.
UNUSED_CALLBACKS = ("DatasetsCallback", "PlacementGroupCleanerCallback")


@functools.cache
def _lean(trainer: type) -> type:
    """``trainer`` less the default callbacks in UNUSED_CALLBACKS (the dataset one only while no datasets are
    passed). A Ray release without the hook gets the trainer unchanged: the run is the same, only dearer."""
    if not hasattr(trainer, "_create_default_callbacks"):
        return trainer

    def _create_default_callbacks(self: Any) -> list:
        unused = set(UNUSED_CALLBACKS)
        if getattr(self, "datasets", None):
            unused.discard("DatasetsCallback")  # this run does pass Ray Datasets
        return [c for c in trainer._create_default_callbacks(self) if type(c).__name__ not in unused]

    # The same name and module in logs and the dashboard as Ray's own class.
    return type(trainer.__name__, (trainer,), {"_create_default_callbacks": _create_default_callbacks,
                                               "__module__": trainer.__module__,
                                               "__qualname__": trainer.__qualname__})


def framework_kwargs(backend: str, use_gpu: bool) -> dict[str, Any]:
    """The trainer's framework-specific arguments (its backend config), beyond Ray's defaults."""
    if backend in ("torch", "deepspeed"):
        from ray.train.torch import TorchConfig

        # gloo on CPU; NCCL when workers hold GPUs (Ray's own default, said explicitly).
        return {"torch_config": TorchConfig(backend="nccl" if use_gpu else "gloo")}
    return {}
