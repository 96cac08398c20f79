"""The declarative Serve config of one cuberay app (pure: dicts in, dicts out, no Ray).

An app is one entry of ``ServeDeploySchema.applications`` (the same shape KubeRay's
RayService takes as ``serveConfigV2``). Its ``import_path`` is the builder
``cuberay.serve.app:build``, its ``args`` the whole ``AppPlan``; the traffic config
(weights, mirror, rate limit) is the ``user_config`` of the ingress deployment, so
a new set of weights is a config change that Serve applies with ``reconfigure``
in the running replicas, with no restart. A version that is a bound application
(``module:app``) is deployed as written, as an app of its own beside this one
(``VersionPlan.app``, named by ``graph_app_name``, no route), with per-deployment
overrides; the router reaches it by its app handle.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

# The entry-level operations are the serving policy's (the controller writes Serve's config with them).
from cuberay.platform.policy.serving import companions, merged, traffic_of, with_traffic  # noqa: F401 (re-exported)

BUILDER = "cuberay.serve.app:build"
ROUTER, MODELS = "router", "models"  # ingress deployment names: split over handles, or multiplexed
NODE_ID_LABEL = "ray.io/node-id"
MODEL_FILE = "model.pt"  # what a checkpoint directory holds (see cuberay.serve.torch_model)


@dataclass(frozen=True)
class VersionPlan:
    """One version, resolved: where its model is and how its replicas run."""

    name: str
    engine: str = "torch"                    # torch | custom
    checkpoint: str | None = None           # torch: checkpoint directory
    factory: str | None = None              # torch: "module:function" building the module
    config: dict = field(default_factory=dict)   # torch: the factory's argument (the TrainJob config)
    import_path: str | None = None          # custom: a Serve deployment or class, "module:name"; or a bound app
    replicas: dict = field(default_factory=lambda: {"num_replicas": 1})  # or {"autoscaling_config": {...}}
    ray_actor_options: dict = field(default_factory=dict)
    app: dict | None = None                 # a bound app: its own Serve app entry (see graph_app_name)


def graph_app_name(serve_name: str, version: str) -> str:
    """The Serve app of a bound-application version: its deployments keep their names, apart per version."""
    return f"{serve_name}.{version}"  # "." is in no cuberay name, so no app's name is another's version's


@dataclass(frozen=True)
class AppPlan:
    """A whole app: its versions, its traffic config and where the router runs."""

    name: str
    route_prefix: str
    versions: tuple[VersionPlan, ...]
    traffic: dict                           # the ingress user_config, see cuberay.serve.traffic.Policy
    router_actor_options: dict = field(default_factory=dict)
    multiplex: bool = False

    @property
    def ingress(self) -> str:
        return MODELS if self.multiplex else ROUTER

    def to_args(self) -> dict:
        return asdict(self)

    @classmethod
    def from_args(cls, args: dict) -> AppPlan:
        versions = tuple(VersionPlan(**v) for v in args["versions"])
        return cls(**{**args, "versions": versions})


def can_multiplex(versions: tuple[VersionPlan, ...]) -> bool:
    """Checkpoints of one model class with the same replica settings can share one deployment."""
    first = versions[0]
    return all(v.engine == "torch" and v.factory == first.factory and v.config == first.config
               and v.replicas == first.replicas and v.ray_actor_options == first.ray_actor_options
               for v in versions)


def node_selector(node_ids: list[str]) -> dict[str, str]:
    """``label_selector`` that keeps replicas on these nodes (Ray's ``in(...)`` label syntax)."""
    return {NODE_ID_LABEL: f"in({','.join(sorted(set(node_ids)))})"}


def app_config(plan: AppPlan) -> dict[str, Any]:
    """The app's entry of a ServeDeploySchema."""
    return {
        "name": plan.name,
        "route_prefix": plan.route_prefix,
        "import_path": BUILDER,
        "args": {"plan": plan.to_args()},
        "deployments": [{"name": plan.ingress, "user_config": copy.deepcopy(plan.traffic)}],
    }
