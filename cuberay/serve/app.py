"""``cuberay.serve.app:build``: the Serve application builder named by every cuberay app's config."""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve import Application
from ray.serve.deployment import Deployment

from cuberay.serve.config import AppPlan, VersionPlan
from cuberay.serve.multiplex import MultiplexedModels
from cuberay.serve.predictor import TorchPredictor
from cuberay.serve.router import Router
from cuberay.serve.torch_model import import_object


def _version(version: VersionPlan) -> Application:
    options = {"name": version.name, "ray_actor_options": version.ray_actor_options, **version.replicas}
    if version.engine == "torch":
        return TorchPredictor.options(**options).bind(version.checkpoint, version.factory, version.config,
                                                      version.name)
    target: Any = import_object(version.import_path or "")
    if isinstance(target, Application):  # the driver checks this first (cuberay.serve.graph.problem)
        raise TypeError(f"{version.import_path} is a bound application; list its graph's deployments under "
                        f"the version's deployments, and cuberay deploys it as written")
    deployment = target if isinstance(target, Deployment) else serve.deployment(target)
    return deployment.options(**options).bind()


def build(args: dict[str, Any]) -> Application:
    """The app of ``args["plan"]`` (an ``AppPlan`` as a dict)."""
    plan = AppPlan.from_args(args["plan"])
    if plan.multiplex:
        first = plan.versions[0]
        sources = {v.name: {"checkpoint": v.checkpoint, "factory": v.factory, "config": v.config}
                   for v in plan.versions}
        return MultiplexedModels.options(user_config=plan.traffic, ray_actor_options=first.ray_actor_options,
                                         **first.replicas).bind(plan.name, sources)
    # A bound application runs as its own Serve app (VersionPlan.app): the router calls it by its app name.
    handles = {v.name: v.app["name"] if v.app else _version(v) for v in plan.versions}
    return Router.options(user_config=plan.traffic, ray_actor_options=plan.router_actor_options).bind(
        plan.name, handles)
