"""From a ServeApp spec to what gets deployed: checkpoints found, replicas sized, nodes pinned.

Everything that can be wrong with the input is found here, before anything is
deployed: a missing checkpoint, a factory that cannot be found, vLLM not installed.
(Routes and app names are the controller's to check: at submit against the active
apps, at deploy against what Serve serves.)
``lookup`` is the controller's ``train_run`` (a run's id, config, entrypoint and
storage path), passed in so this module runs anywhere.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from cuberay.errors import NotFoundError, SpecError
from cuberay.platform.api.records import TrainRun
from cuberay.platform.spec.serve import LLMSettings, ModelRef, ServeApp, ServeVersion
from cuberay.serve import llm
from cuberay.serve.config import MODEL_FILE, AppPlan, VersionPlan, can_multiplex, graph_app_name, node_selector

TARGET_ONGOING_REQUESTS = 4  # per replica, before the autoscaler adds one
Lookup = Callable[[str, ModelRef], TrainRun]


def checkpoint_dir(storage_path: str, run_id: str) -> str:
    """The last checkpoint a Ray Train run wrote: the newest directory with model.pt under storage/run_id."""
    root = Path(storage_path) / run_id
    found = sorted(p.parent for p in root.glob(f"**/{MODEL_FILE}"))
    if not found:
        raise NotFoundError(f"run {run_id!r} SUCCEEDED but left no checkpoint with {MODEL_FILE} under {root}; "
                            f"its train function must report one (ray.train.report(..., checkpoint=...))")
    return str(found[-1])


def _torch_source(version: ServeVersion, tenant: str, lookup: Lookup) -> dict[str, Any]:
    ref = version.model
    assert isinstance(ref, ModelRef)
    if ref.checkpoint is not None:
        if not (Path(ref.checkpoint) / MODEL_FILE).is_file():
            raise NotFoundError(f"version {version.name!r}: checkpoint {ref.checkpoint} has no {MODEL_FILE}; "
                                f"point model.checkpoint at a checkpoint directory")
        if version.factory is None and not _holds_module(ref.checkpoint):
            raise SpecError(f"version {version.name!r}: a checkpoint directory needs factory "
                            f"('module:function' building the model)", path="spec.versions.factory")
        return {"checkpoint": ref.checkpoint, "factory": version.factory, "config": {}, "run": None}
    run = lookup(tenant, ref)
    factory = version.factory
    if factory is None:
        entry = run.entrypoint or ""
        if ":" not in entry:
            raise SpecError(f"version {version.name!r}: run {run.id} has no function entrypoint to find "
                            f"build_model in; set factory: 'module:function'", path="spec.versions.factory")
        factory = f"{entry.partition(':')[0]}:build_model"
    return {"checkpoint": checkpoint_dir(run.storage_path, run.id), "factory": factory,
            "config": dict(run.config or {}), "run": run.id}


def _holds_module(checkpoint: str) -> bool:
    """Whether model.pt is a whole pickled module (needs no factory); a cheap check of the file."""
    import torch

    saved = torch.load(Path(checkpoint) / MODEL_FILE, map_location="cpu", weights_only=False)
    return isinstance(saved, torch.nn.Module)


def render_sources(app: ServeApp) -> dict[str, dict[str, Any]]:
    """Sources for a manifest rendered without a platform: checkpoint directories as given (the cluster's
    paths, not checked here); a TrainJob run only a live platform can resolve."""
    out = {}
    for version in app.spec.versions:
        ref = version.model
        if version.resolved_engine != "torch" or not isinstance(ref, ModelRef):
            continue
        if ref.checkpoint is None or version.factory is None:
            raise SpecError(f"version {version.name!r}: model {ref.model_dump(exclude_none=True, exclude_defaults=True)}"
                            f" names a TrainJob run, which only a live platform resolves (`cuberay serve deploy`); "
                            f"to render it, give model.checkpoint (a directory the cluster sees) and factory",
                            path="spec.versions.model")
        out[version.name] = {"checkpoint": ref.checkpoint, "factory": version.factory, "config": {}, "run": None}
    return out


def sources(app: ServeApp, lookup: Lookup) -> dict[str, dict[str, Any]]:
    """Per torch version: checkpoint dir, factory, training config and run id. Raises before any deploy."""
    tenant = app.tenant or ""
    out = {}
    for version in app.spec.versions:
        if version.resolved_engine == "torch":
            out[version.name] = _torch_source(version, tenant, lookup)
    return out


def check_engines(app: ServeApp) -> None:
    if "vllm" in app.spec.engines:
        llm.require_vllm()


def actor_options(app: ServeApp, node_ids: list[str]) -> dict[str, Any]:
    """Ray actor options of one replica: the spec's per-replica resources, pinned to the allocated nodes."""
    ray_resources = app.worker_request().to_ray()
    options: dict[str, Any] = {"num_cpus": ray_resources.pop("CPU", 0.0)}
    if "GPU" in ray_resources:
        options["num_gpus"] = ray_resources.pop("GPU")
    if "memory" in ray_resources:
        options["memory"] = ray_resources.pop("memory")
    if ray_resources:
        options["resources"] = ray_resources
    if node_ids:
        options["label_selector"] = node_selector(node_ids)
    return options


def replica_caps(app: ServeApp, granted: int) -> dict[str, int]:
    """The most replicas each version may run when admission holds ``granted`` replica slots for the app.

    Every version gets its ``min``; the slots above the app's min (lent, reclaimable) go to the versions
    that can grow, the most-weighted first, up to each one's ``max``.
    """
    spare = max(0, granted - app.spec.min_workers)
    caps = {v.name: v.min_replicas for v in app.spec.versions}
    for version in sorted(app.spec.versions, key=lambda v: -v.weight):
        extra = min(spare, version.max_replicas - version.min_replicas)
        caps[version.name] += extra
        spare -= extra
    return caps


def _autoscaling(low: int, high: int) -> dict[str, Any]:
    if high > low:
        return {"autoscaling_config": {"min_replicas": low, "max_replicas": high,
                                       "target_ongoing_requests": TARGET_ONGOING_REQUESTS}}
    return {"num_replicas": low}


def _replicas(version: ServeVersion, cap: int) -> dict[str, Any]:
    """Serve's replica settings: fixed at ``min``, or autoscaling from ``min`` up to what admission granted."""
    return _autoscaling(version.min_replicas, cap)


def graph_caps(version: ServeVersion, cap: int) -> dict[str, int]:
    """The most replicas each deployment of a bound app's graph may run within its version's ``cap``: every
    deployment its min, the rest in the graph's order up to each one's max."""
    spare = max(0, cap - version.min_replicas)
    caps = {}
    for deployment in version.deployments:
        extra = min(spare, deployment.max_replicas - deployment.min_replicas)
        caps[deployment.name] = deployment.min_replicas + extra
        spare -= extra
    return caps


def runtime_env(app: ServeApp) -> dict[str, Any]:
    """The spec's runtime_env with its env as env_vars (what a Serve app entry's code runs in)."""
    env = dict(app.spec.runtime_env)
    if app.spec.env:
        env["env_vars"] = {**env.get("env_vars", {}), **app.spec.env}
    return env


def graph_entry(app: ServeApp, version: ServeVersion, cap: int, options: dict[str, Any]) -> dict[str, Any]:
    """A bound-application version as its own Serve app: the import path as written, and per deployment of
    its graph the replicas within ``cap``, the spec's resources and the pin to the allocated nodes."""
    caps = graph_caps(version, cap)
    deployments = []
    for deployment in version.deployments:
        item: dict[str, Any] = {"name": deployment.name, **deployment.options,
                                **_autoscaling(deployment.min_replicas, caps[deployment.name]),
                                "ray_actor_options": dict(options)}
        if deployment.user_config is not None:
            item["user_config"] = deployment.user_config
        if deployment.max_ongoing_requests is not None:
            item["max_ongoing_requests"] = deployment.max_ongoing_requests
        if deployment.target_ongoing_requests is not None and "autoscaling_config" in item:
            item["autoscaling_config"]["target_ongoing_requests"] = deployment.target_ongoing_requests
        deployments.append(item)
    entry: dict[str, Any] = {"name": graph_app_name(app.serve_name, version.name), "route_prefix": None,
                             "import_path": version.model, "deployments": deployments}
    if runtime_env(app):
        entry["runtime_env"] = runtime_env(app)
    return entry


def _granted(app: ServeApp, node_ids: list[str], grown: bool | None) -> int:
    if grown is None:
        return len(node_ids)
    return app.spec.max_workers if grown else app.spec.min_workers


def traffic(app: ServeApp, weights: dict[str, float] | None = None, ingress_replicas: int = 1) -> dict[str, Any]:
    """The ingress user_config: weights, mirror, rate limit, sticky header.

    Each ingress replica keeps its own token bucket and Serve spreads requests
    evenly over the replicas, so each gets its share of the app's limit.
    """
    spec = app.spec
    limit = spec.rate_limit
    share = max(1, ingress_replicas)
    return {"weights": dict(weights or spec.weights()),
            "mirror": spec.mirror.model_dump() if spec.mirror else None,
            "rate_limit": ({"requests_per_s": limit.requests_per_s / share,
                            "burst": max(1.0, (limit.burst or limit.requests_per_s) / share)}
                           if limit else None),
            "sticky_header": spec.sticky_header}


def app_plan(app: ServeApp, found: dict[str, dict[str, Any]], node_ids: list[str],
             grown: bool | None = None) -> AppPlan:
    """The plan of a torch/custom app. Replicas autoscale above their min only into the slots admission
    granted: one per entry of ``node_ids`` (``grown`` True: the max, False: the min, as without a platform)."""
    granted = _granted(app, node_ids, grown)
    caps = replica_caps(app, granted)
    options = actor_options(app, node_ids)
    versions = []
    for version in app.spec.versions:
        source = found.get(version.name, {})
        versions.append(VersionPlan(
            name=version.name, engine=version.resolved_engine, checkpoint=source.get("checkpoint"),
            factory=source.get("factory"), config=source.get("config") or {},
            import_path=version.model if isinstance(version.model, str) else None,
            replicas=_replicas(version, caps[version.name]), ray_actor_options=options,
            app=graph_entry(app, version, caps[version.name], options) if version.is_graph else None))
    multiplex = can_multiplex(tuple(versions))
    ingress_replicas = 1  # the router
    if multiplex:  # one deployment holds every version: it gets all the replicas admission held
        # Fixed at the slots held (the rate limit is shared out over these ingress replicas); a resize
        # changes the count and the shares together.
        ingress_replicas = min(max(granted, app.spec.min_workers), app.spec.max_workers)
        versions = [replace(v, replicas={"num_replicas": ingress_replicas}) for v in versions]
    router = {"num_cpus": 0}  # the router only forwards; it runs on the app's nodes without holding quota
    if node_ids:
        router["label_selector"] = node_selector(node_ids)
    return AppPlan(name=app.serve_name, route_prefix=app.spec.route_prefix, versions=tuple(versions),
                   traffic=traffic(app, ingress_replicas=ingress_replicas), router_actor_options=router,
                   multiplex=multiplex)


def llm_app(app: ServeApp, node_ids: list[str]) -> dict[str, Any]:
    """The declarative entry of a vLLM app (one LLMConfig per version, served by model name)."""
    options = actor_options(app, node_ids)
    caps = replica_caps(app, _granted(app, node_ids, None))
    configs = []
    for version in app.spec.versions:
        settings = version.llm or LLMSettings()
        assert isinstance(version.model, ModelRef) and version.model.source is not None
        configs.append(llm.llm_config_kwargs(
            version.name, version.model.source, tensor_parallel=settings.tensor_parallel,
            pipeline_parallel=settings.pipeline_parallel, max_model_len=settings.max_model_len,
            accelerator=settings.accelerator, replicas=_replicas(version, caps[version.name]),
            ray_actor_options=options, engine_kwargs=settings.engine_kwargs))
    return llm.app_config(app.serve_name, app.spec.route_prefix, configs)
