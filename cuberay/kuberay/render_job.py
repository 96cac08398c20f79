"""Jobs on Kubernetes, in the form each kind's adapter names: a TrainJob or Task as a RayJob, a ServeApp as a
RayService (``ray.io/v1``).

A RayJob brings its own ephemeral Ray cluster, sized for the job's gang on the first of the
tenant's pools where one worker fits a node; the entrypoint installs the controller
(tenant-only platform file) and runs ``cuberay run`` on the job spec, both from a ConfigMap
mounted on the head, so the job goes through the same admission as on a local Ray.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

import yaml

from cuberay import kinds
from cuberay.errors import AdmissionError, SpecError
from cuberay.kuberay import labels as L
from cuberay.kuberay.manifest import Manifest
from cuberay.kuberay.render_cluster import (
    RenderOptions,
    cluster_spec,
    queue_labels,
    tenant_platform,
)
from cuberay.kuberay.render_topology import kueue_podset, volcano_labels
from cuberay.platform.policy.fit import check_job
from cuberay.platform.policy.pool_shares import PoolShare, tenant_shares

TTL_AFTER_FINISHED_S = 300


def _fits(worker: Any, share: PoolShare) -> int:
    """Workers of this request one node of the pool holds (0: none, or the labels do not match)."""
    labels = share.pool.node_labels()
    if any(labels.get(k) != v for k, v in worker.node_selector().items()):
        return 0
    node = share.node
    counts = [node.get(r, 0.0) / v for r, v in worker.resources.items() if v > 0]
    return max(0, math.floor(min(counts, default=0.0) + 1e-9))


def job_shares(platform: Any, tenant: Any, job: Any) -> list[PoolShare]:
    """The ephemeral cluster's worker groups: for the workers, and for each role of a gang with roles, the first
    pool where one member fits a node, sized for them; members of several roles on one pool add up.

    Raises:
        AdmissionError: no pool of the tenant has room for the workers or for a role's members.
    """
    groups = [("workers", job.worker_request(), job.min_workers, job.max_workers)]
    groups += [(f"roles.{name} members", request, count, count) for name, request, count, _ in job.role_requests()]
    sized: dict[str, tuple[PoolShare, int, int]] = {}  # pool name -> (share, nodes at least, nodes at most)
    for what, worker, least, most in groups:
        for share in tenant_shares(platform, tenant):
            per_node = _fits(worker, share)
            _, low, high = sized.get(share.pool.name, (share, 0, 0))
            if per_node == 0 or high + math.ceil(most / per_node) > share.pool.nodes:
                continue
            sized[share.pool.name] = (share, low + math.ceil(least / per_node), high + math.ceil(most / per_node))
            break
        else:
            raise AdmissionError(f"job {job.name!r}: no node pool of tenant {tenant.name!r} has nodes that hold its "
                                 f"{what} ({most}); lower the resources per member or add a pool")
    return [PoolShare(tenant.name, share.pool, share.node * low, share.node * high)
            for share, low, high in sized.values()]


def _job_configmap(platform: Any, tenant: Any, job: Any, shares: list[PoolShare], name: str) -> Manifest:
    data = {L.PLATFORM_KEY: yaml.safe_dump(tenant_platform(platform, tenant, tenant_shares(platform, tenant)),
                                           sort_keys=False),
            L.JOB_KEY: yaml.safe_dump({"apiVersion": job.api_version, "kind": job.kind,
                                       **job.model_dump(mode="json", by_alias=True, exclude_defaults=True)},
                                      sort_keys=False)}
    obj = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": tenant.name,
                        "labels": L.base_labels(platform.metadata.name, tenant.name)},
           "data": data}
    return Manifest(obj, [f"The job spec and the tenant's platform file, mounted on the head at {L.CONFIG_DIR}."])


def _metadata(platform: Any, tenant: Any, job: Any, opts: RenderOptions) -> dict[str, Any]:
    near = volcano_labels(platform, job.spec.topology) if opts.scheduler == L.Scheduler.volcano else {}
    return {"name": job.name, "namespace": tenant.name,
            "labels": {**L.base_labels(platform.metadata.name, tenant.name), **queue_labels(platform, tenant, opts),
                       **near}}


def _podset(platform: Any, job: Any, opts: RenderOptions) -> dict[str, str]:
    """The worker pods' topology request for Kueue (job.spec.topology)."""
    return kueue_podset(platform, job.spec.topology) if opts.scheduler == L.Scheduler.kueue else {}


def rayjob(platform: Any, job: Any, opts: RenderOptions) -> list[Manifest]:
    """A ConfigMap (job spec + platform file) and the RayJob that runs the job on its own cluster."""
    tenant = check_job(platform, job)
    shares = job_shares(platform, tenant, job)
    elastic = job.min_workers != job.max_workers
    config = f"{job.name}-cuberay"
    pod_labels = L.base_labels(platform.metadata.name, tenant.name)
    spec_cluster = cluster_spec(tenant, shares, opts, pod_labels, start_controller=False, config_map=config,
                                autoscaling=elastic, worker_annotations=_podset(platform, job, opts))
    platform_file = f"{L.CONFIG_DIR}/{L.PLATFORM_KEY}"
    entrypoint = (f'cuberay up --platform {platform_file} --address "$RAY_ADDRESS" && '
                  f"cuberay run {shlex.quote(f'{L.CONFIG_DIR}/{L.JOB_KEY}')}")
    spec: dict[str, Any] = {"entrypoint": entrypoint, "shutdownAfterJobFinishes": True,
                            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S}
    if job.max_runtime_s is not None:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(job.max_runtime_s))
    if job.spec.max_failures > 0:
        spec["backoffLimit"] = job.spec.max_failures
    spec["rayClusterSpec"] = spec_cluster
    metadata = _metadata(platform, tenant, job, opts)
    if elastic and opts.scheduler == L.Scheduler.kueue:
        metadata["annotations"] = {L.KUEUE_ELASTIC: "true"}
    obj = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": metadata, "spec": spec}
    manifest = Manifest(obj, [f"{job.kind} {job.name} of tenant {tenant.name} on its own Ray cluster, deleted "
                              f"{TTL_AFTER_FINISHED_S}s after the job ends."])
    manifest.note(("spec", "entrypoint"), "install the controller, then be the job's driver")
    _note_topology(manifest, platform, job, opts)
    if "activeDeadlineSeconds" in spec:
        manifest.note(("spec", "activeDeadlineSeconds"), f"max_runtime {job.spec.max_runtime}")
    if "backoffLimit" in spec:
        manifest.note(("spec", "backoffLimit"), "max_failures (each retry is a new cluster)")
    return [_job_configmap(platform, tenant, job, shares, config), manifest]


def _note_topology(manifest: Manifest, platform: Any, job: Any, opts: RenderOptions) -> None:
    request = job.spec.topology
    if request is None:
        return
    if opts.scheduler == L.Scheduler.volcano and request.level == "host":
        manifest.header.append(f"topology {request.mode}: host has no Volcano tier; the job's own controller keeps "
                               f"its workers on one host")
    elif opts.scheduler != L.Scheduler.none:
        manifest.header.append(f"topology {request.mode}: {request.level}, asked of "
                               f"{'Kueue (pod-set annotation)' if opts.scheduler == L.Scheduler.kueue else 'Volcano (network-topology labels)'}")


def serve_config_v2(app: Any) -> dict[str, Any]:
    """The Ray Serve config of a ServeApp (KubeRay's ``serveConfigV2``): the app as cuberay deploys it.

    The router and versions are built by ``cuberay.serve.app:build`` from the plan in ``args``; replicas
    autoscale up to each version's max inside the tenant's cluster.
    """
    from cuberay.serve import plan
    from cuberay.serve.config import app_config

    runtime_env = dict(app.spec.runtime_env)
    if app.spec.env:
        runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **app.spec.env}
    if "vllm" in app.spec.engines:
        entry = plan.llm_app(app, [])
    else:
        entry = app_config(plan.app_plan(app, plan.render_sources(app), [], grown=True))
    if runtime_env:
        entry["runtime_env"] = runtime_env
    from cuberay.serve.config import companions

    return {"applications": [entry, *companions(entry)]}  # bound-application versions are apps of their own


def rayservice(platform: Any, app: Any, opts: RenderOptions) -> list[Manifest]:
    """The RayService that serves a ServeApp on the tenant's pools."""
    tenant = check_job(platform, app)
    shares = job_shares(platform, tenant, app)
    pod_labels = L.base_labels(platform.metadata.name, tenant.name)
    config = f"{app.name}-cuberay"
    spec = {"serveConfigV2": yaml.safe_dump(serve_config_v2(app), sort_keys=False),
            "rayClusterConfig": cluster_spec(tenant, shares, opts, pod_labels, start_controller=False,
                                             config_map=config, autoscaling=True,
                                             worker_annotations=_podset(platform, app, opts))}
    metadata = _metadata(platform, tenant, app, opts)
    if opts.scheduler == L.Scheduler.kueue:
        metadata["annotations"] = {L.KUEUE_ELASTIC: "true"}
    obj = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": metadata, "spec": spec}
    manifest = Manifest(obj, [f"ServeApp {app.name} of tenant {tenant.name}. During an upgrade two clusters "
                              "exist at once, so the tenant's quota must allow about twice this one."])
    return [_job_configmap(platform, tenant, app, shares, config), manifest]


def render_job(platform: Any, job: Any, opts: RenderOptions) -> list[Manifest]:
    """The manifests of one job spec, in the form its kind's adapter names (a RayJob for TrainJob and Task, a
    RayService for ServeApp)."""
    kind = kinds.of(job.kind)
    if kind.render is None:
        forms = [k.name for k in kinds.registered() if k.render is not None]
        raise SpecError(f"{job.kind} {job.name!r} has no Kubernetes form in cuberay; render-job takes "
                        f"{', '.join(forms[:-1])} or {forms[-1]} (run a {job.kind} inside a tenant's RayCluster "
                        f"with `cuberay submit`)")
    return kinds.load_object(kind.render, f"the {kind.name} renderer")(platform, job, opts)

