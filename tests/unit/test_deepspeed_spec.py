"""The deepspeed: block: a DeepSpeed JSON config or a path to one, checked with clear errors, merged with defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cuberay.errors import SpecError
from cuberay.platform.spec import load_spec


def job(deepspeed: Any, workers: Any = 2) -> Any:
    return load_spec({"apiVersion": "cuberay.io/v1alpha1", "kind": "TrainJob", "metadata": {"name": "ds"},
                      "spec": {"workers": workers, "entrypoint": "cuberay.examples.digits:train_func",
                               "backend": "deepspeed", "deepspeed": deepspeed}})


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_every_zero_stage_with_offload_and_precision(stage: int) -> None:
    config = {"zero_optimization": {"stage": stage}, "bf16": {"enabled": True},
              "train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4}
    if stage:
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if stage == 3:
        config["zero_optimization"]["offload_param"] = {"device": "cpu"}
    merged = job(config).spec.deepspeed_config()
    assert merged["zero_optimization"] == config["zero_optimization"]
    assert merged["zero_allow_untested_optimizer"] is True and merged["train_batch_size"] == 64


def test_a_path_to_ds_config_json_is_read(tmp_path: Path) -> None:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}, "steps_per_print": 5}))
    spec = job(str(path)).spec
    assert spec.deepspeed == {"zero_optimization": {"stage": 2}, "steps_per_print": 5}
    assert spec.deepspeed_config()["steps_per_print"] == 5  # the user's value beats the default
    with pytest.raises(SpecError, match="cannot read the DeepSpeed config"):
        job(str(tmp_path / "missing.json"))


@pytest.mark.parametrize(("config", "match"), [
    ({"zero_optimisation": {"stage": 2}}, "unknown DeepSpeed key 'zero_optimisation'"),
    ({"zero_optimization": {"stage": 4}}, "ZeRO stage 4 does not exist"),
    ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, "fp16 and bf16 are both enabled"),
    ({"train_batch_size": 60, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4},
     r"60 != 8 x 4 x 2 workers = 64"),
    ({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 8}, "not a multiple of 16"),
    ({"train_micro_batch_size_per_gpu": 0}, "whole number >= 1"),
    ({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}, "needs ZeRO stage 3"),
    ({"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "gpu"}}}, "not one of none, cpu, nvme"),
])
def test_what_deepspeed_would_refuse_is_a_spec_error(config: dict, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        job(config)


def test_elastic_gang_skips_the_world_size_check() -> None:
    config = {"train_batch_size": 60, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4}
    assert job(config, workers={"min": 2, "max": 4}).spec.deepspeed_config()["train_batch_size"] == 60


def test_torch_backend_has_no_deepspeed_config() -> None:
    spec = load_spec({"apiVersion": "cuberay.io/v1alpha1", "kind": "TrainJob", "metadata": {"name": "d"},
                      "spec": {"entrypoint": "cuberay.examples.digits:train_func"}}).spec
    assert spec.deepspeed_config() is None
