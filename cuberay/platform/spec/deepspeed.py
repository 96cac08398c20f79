"""The ``deepspeed:`` block of a TrainJob: a DeepSpeed JSON config (or a path to one), checked and merged.

Users bring the ``ds_config.json`` they already have. It is checked here for what would
otherwise fail late on every worker: unknown top-level keys (a typo DeepSpeed would ignore),
a ZeRO stage outside 0-3, offload settings that do not go together, fp16 and bf16 both on, and
the batch arithmetic DeepSpeed enforces, ``train_batch_size = micro-batch × gradient
accumulation × world size`` (world size = the gang's workers, checked when the gang is fixed).
:func:`merged` lays it over cuberay's defaults at run time.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Mapping

from cuberay.platform.spec.load import FieldError

# DeepSpeed's top-level config keys (deepspeed/runtime/constants.py and the sub-configs' names).
KNOWN_KEYS = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer",
    "scheduler", "fp16", "bf16", "bfloat16", "amp", "zero_optimization", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "gradient_clipping", "prescale_gradients", "gradient_predivide_factor",
    "sparse_gradients", "steps_per_print", "wall_clock_breakdown", "memory_breakdown", "dump_state",
    "activation_checkpointing", "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet",
    "comms_logger", "communication_data_type", "seq_parallel_communication_data_type", "data_types",
    "checkpoint", "aio", "elasticity", "autotuning", "compression_training", "data_efficiency",
    "curriculum_learning", "pipeline", "torch_autocast", "nebula", "monitor_config",
    "load_universal_checkpoint", "use_node_local_storage", "disable_allgather", "sparse_attention",
    "zero_allow_comm_data_type_fp32", "eigenvalue", "progressive_layer_drop", "quantize_training",
    "hybrid_engine", "weight_quantization", "graph_harvesting", "timers", "use_data_before_expert_parallelism",
})
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
# What cuberay adds under the user's config: torch optimizers are fine under ZeRO 1-2 (DeepSpeed's own are
# CUDA kernels), and DeepSpeed's per-step log lines would drown the job log.
DEFAULTS: dict[str, Any] = {"zero_allow_untested_optimizer": True, "steps_per_print": 1_000_000,
                            "wall_clock_breakdown": False}


def read(value: Any) -> Any:
    """A path (``ds_config.json``, ``~`` expanded) becomes the dict it holds; anything else passes."""
    if not isinstance(value, str):
        return value
    path = Path(value).expanduser()
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise FieldError(["deepspeed"], f"cannot read the DeepSpeed config {value!r} ({err.strerror}); give a "
                                        f"path to a ds_config.json here or the config itself as a mapping") from None
    except ValueError as err:
        raise FieldError(["deepspeed"], f"{value!r} is not JSON ({err}); fix the file") from None
    if not isinstance(data, dict):
        raise FieldError(["deepspeed"], f"{value!r} holds a {type(data).__name__}, not a JSON object")
    return data


def check(config: Mapping[str, Any], world_size: int | None) -> None:
    """Raise FieldError for what DeepSpeed would refuse (or silently ignore)."""
    unknown = sorted(set(config) - KNOWN_KEYS)
    if unknown:
        raise FieldError(["deepspeed", unknown[0]], f"unknown DeepSpeed key {unknown[0]!r}; DeepSpeed ignores "
                                                    f"unknown keys, so a typo would go unnoticed. Known keys "
                                                    f"include train_batch_size, train_micro_batch_size_per_gpu, "
                                                    f"gradient_accumulation_steps, zero_optimization, fp16, bf16, "
                                                    f"optimizer, scheduler")
    _check_zero(config.get("zero_optimization") or {})
    enabled = [k for k in ("fp16", "bf16", "bfloat16") if _enabled(config.get(k))]
    if len(enabled) > 1:
        raise FieldError(["deepspeed", enabled[1]], f"{' and '.join(enabled)} are both enabled; choose one "
                                                    f"precision (bf16 on Ampere or newer, else fp16)")
    _check_batch(config, world_size)


def _enabled(block: Any) -> bool:
    return isinstance(block, Mapping) and bool(block.get("enabled", False))


def _check_zero(zero: Any) -> None:
    if not isinstance(zero, Mapping):
        raise FieldError(["deepspeed", "zero_optimization"], "must be a mapping, e.g. {stage: 2}")
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise FieldError(["deepspeed", "zero_optimization", "stage"],
                         f"ZeRO stage {stage!r} does not exist; use 0 (off), 1 (optimizer state), "
                         f"2 (+ gradients) or 3 (+ parameters)")
    for block in ("offload_optimizer", "offload_param"):
        offload = zero.get(block)
        if offload is None:
            continue
        device = offload.get("device", "none") if isinstance(offload, Mapping) else offload
        if device not in OFFLOAD_DEVICES:
            raise FieldError(["deepspeed", "zero_optimization", block, "device"],
                             f"offload device {device!r} is not one of {', '.join(OFFLOAD_DEVICES)}")
        if device != "none" and block == "offload_optimizer" and stage == 0:
            raise FieldError(["deepspeed", "zero_optimization", block],
                             "offloading the optimizer needs ZeRO stage 1, 2 or 3; raise the stage")
        if device != "none" and block == "offload_param" and stage != 3:
            raise FieldError(["deepspeed", "zero_optimization", block],
                             f"offloading parameters needs ZeRO stage 3 (this is stage {stage}); set stage: 3 "
                             f"or offload only the optimizer")


def _check_batch(config: Mapping[str, Any], world: int | None) -> None:
    names = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    values = {}
    for name in names:
        if name in config:
            v = config[name]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise FieldError(["deepspeed", name], f"{name} must be a whole number >= 1, not {v!r}")
            values[name] = v
    total, micro, accum = (values.get(n) for n in names)
    if total is None or world is None:
        return
    rule = "train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x workers"
    if micro is not None and accum is not None and total != micro * accum * world:
        raise FieldError(["deepspeed", "train_batch_size"],
                         f"{total} != {micro} x {accum} x {world} workers = {micro * accum * world}; "
                         f"DeepSpeed requires {rule}. Fix one of the three, or drop train_batch_size")
    per_step = (micro or 1) * (accum or 1) * world
    if (micro is None) != (accum is None) and total % per_step:
        raise FieldError(["deepspeed", "train_batch_size"],
                         f"{total} is not a multiple of {per_step} ({'micro-batch' if micro else 'accumulation'} "
                         f"x {world} workers); DeepSpeed requires {rule}")


def merged(config: Mapping[str, Any]) -> dict[str, Any]:
    """The user's config laid over :data:`DEFAULTS` (nested mappings merged key by key)."""
    out = copy.deepcopy(DEFAULTS)
    _deep_update(out, config)
    return out


def _deep_update(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
