"""A tenant's Namespace, platform ConfigMap and RayCluster (``ray.io/v1``).

The RayCluster is the tenant's own Ray: a head that runs no work (``num-cpus: "0"``) but
the dashboard and the cuberay controller, and one worker group per node pool the tenant
may use, each pod one pool node, sized from the tenant's pool shares
(:mod:`cuberay.platform.policy.pool_shares`). Worker groups carry the Ray resources and labels the
controller's ledger reads (``cuberay.io/pool``, ``cuberay.io/rdma``, ``accelerator_type:<model>``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

import cuberay.platform.spec.resources as res
from cuberay.errors import SpecError
from cuberay.kuberay import labels as L
from cuberay.kuberay.manifest import Manifest
from cuberay.kuberay.quantities import pool_fabric, quantities
from cuberay.kuberay.render_topology import kueue_cluster_podset, volcano_cluster_labels
from cuberay.kuberay.storage import tenant_storage
from cuberay.platform.policy.pool_shares import PoolShare

CONFIGMAP = "cuberay-platform"
_BUILTIN = {res.CPU, res.MEMORY, res.GPU}  # KubeRay derives these from the container limits


@dataclass(frozen=True)
class RenderOptions:
    """Choices of one render (the platform file holds the rest)."""

    scheduler: L.Scheduler = L.Scheduler.kueue
    image: str = L.DEFAULT_IMAGE
    autoscaling: bool = True
    redis_address: str | None = None  # GCS fault tolerance with this external Redis (host:port)
    redis_password_secret: str | None = None  # Secret (key "password") in the tenant namespace
    head_cpu: str = "1"
    head_memory: str = "4Gi"
    # The platform's scheduler.driver_resource and max_drivers: every worker group offers that many drivers'
    # places, the head none, so job drivers run on workers (and outlive a head restart with --redis).
    drivers: tuple[str, int] | None = None


def namespace(platform: Any, tenant: Any) -> Manifest:
    obj = {"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": tenant.name, "labels": L.base_labels(platform.metadata.name, tenant.name)}}
    return Manifest(obj, [f"Tenant {tenant.name}: its namespace holds its RayCluster, jobs and services."])


def tenant_platform(platform: Any, tenant: Any, shares: list[PoolShare]) -> dict[str, Any]:
    """The platform file the tenant's controller reads: this tenant only, its pools at their max size."""
    data = {"apiVersion": platform.api_version, "kind": platform.kind,
            "metadata": platform.metadata.model_dump(mode="json", exclude_defaults=True),
            **platform.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)}
    data["metadata"]["name"] = platform.metadata.name
    data["spec"]["tenants"] = [t for t in data["spec"]["tenants"] if t["name"] == tenant.name]
    data["spec"].pop("default_tenant", None)  # one tenant: every job's, no default to name
    sizes = {s.pool.name: s.max_replicas for s in shares if s.max_replicas > 0}
    pools = [p for p in data["spec"].get("node_pools", []) if p["name"] in sizes]
    for pool in pools:
        pool["nodes"] = sizes[pool["name"]]
    data["spec"]["node_pools"] = pools
    for entry in data["spec"]["tenants"]:
        entry.pop("pools", None)  # every pool in this file is the tenant's
        if "pool_quotas" in entry:
            entry["pool_quotas"] = {k: v for k, v in entry["pool_quotas"].items() if k in sizes}
    _check_loads(data, tenant.name)
    return data


def _check_loads(data: dict[str, Any], tenant: str) -> None:
    """The controller must be able to start on this file: fail the render, not the pod."""
    from cuberay.platform.spec import load_platform

    try:
        load_platform(data)
    except SpecError as exc:
        raise SpecError(f"tenant {tenant!r}: its Ray cluster could not start its controller, because the tenant's "
                        f"own platform file is invalid: {exc.reason}. Usually a pool node is larger than the "
                        f"tenant's max there (so it gets no worker group) while it is guaranteed resources of that "
                        f"pool; raise its max, lower the guarantee, or declare smaller nodes",
                        path=f"spec.tenants.{tenant}") from None


def platform_configmap(platform: Any, tenant: Any, shares: list[PoolShare]) -> Manifest:
    text = yaml.safe_dump(tenant_platform(platform, tenant, shares), sort_keys=False)
    obj = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": CONFIGMAP, "namespace": tenant.name,
                        "labels": L.base_labels(platform.metadata.name, tenant.name)},
           "data": {L.PLATFORM_KEY: text}}
    return Manifest(obj, ["The platform file the controller on the head reads: this tenant only, and its node",
                          "pools sized to the worker groups' maxReplicas."])


def ray_resources(share: PoolShare) -> dict[str, str]:
    """Ray resources a worker group declares beyond CPU/GPU/memory (which KubeRay takes from limits)."""
    offer = share.pool.resources._request()
    out = {k: _num(v) for k, v in offer.resources.items() if k not in _BUILTIN}
    if offer.accelerator:
        out[f"accelerator_type:{offer.accelerator}"] = "1"  # Ray's marker; the ledger turns it into a label
    return out


def ray_labels(share: PoolShare) -> dict[str, str]:
    """Ray node labels of the group: the pool's, minus ``ray.io/*`` (reserved by Ray, which sets them)."""
    return {k: v for k, v in share.pool.node_labels().items() if not k.startswith("ray.io/")}


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _tolerations(pool: Any) -> list[dict[str, Any]]:
    out = []
    for taint in pool.taints:
        key, value, effect = L.taint_parts(taint)
        item = {"key": key, "operator": "Equal" if value else "Exists", "effect": effect}
        if value:
            item["value"] = value
        out.append(item)
    return out


def worker_group(share: PoolShare, opts: RenderOptions, labels: dict[str, str],
                 volumes: list[dict[str, Any]], mounts: list[dict[str, Any]],
                 annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pool = share.pool
    fabric = pool_fabric(pool)
    limits = quantities(pool.node_resources(), fabric)
    container: dict[str, Any] = {"name": "ray-worker", "image": opts.image,
                                 "resources": {"requests": dict(limits), "limits": dict(limits)}}
    pod_volumes, pod_mounts = list(volumes), list(mounts)
    if fabric or pool.node_resources().get(res.GPU, 0) > 0:
        # NCCL and Ray's object store want a large /dev/shm; the default 64Mi is not enough.
        pod_volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
        pod_mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    if fabric:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}  # RDMA pins memory
    if pod_mounts:
        container["volumeMounts"] = pod_mounts
    spec: dict[str, Any] = {"containers": [container], "nodeSelector": {res.LABEL_POOL: pool.name}}
    if tolerations := _tolerations(pool):
        spec["tolerations"] = tolerations
    if pod_volumes:
        spec["volumes"] = pod_volumes
    group: dict[str, Any] = {
        "groupName": L.group_name(pool.name),
        "replicas": share.min_replicas,
        "minReplicas": share.min_replicas,
        "maxReplicas": share.max_replicas,
        "rayStartParams": {},
    }
    resources = ray_resources(share)
    if opts.drivers:
        resources[opts.drivers[0]] = str(opts.drivers[1])
    if resources:
        group["resources"] = resources
    if ray_lbls := ray_labels(share):
        group["labels"] = ray_lbls
    meta: dict[str, Any] = {"labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(annotations)  # Kueue's pod-set topology request
    group["template"] = {"metadata": meta, "spec": spec}
    return group


def worker_groups_env(shares: list[PoolShare]) -> str:
    """What the controller counts as admissible capacity: each group up to maxReplicas nodes."""
    groups = [{"group": L.group_name(s.pool.name), "pool": s.pool.name, "max_replicas": s.max_replicas,
               "resources": s.pool.node_resources().as_dict(), "labels": s.pool.node_labels()}
              for s in shares if s.max_replicas > 0]
    return json.dumps(groups, sort_keys=True, separators=(",", ":"))


# cuberay's web console and HTTP API on the head (cuberay/console/): a container port, so KubeRay's head Service
# carries it too; reached with `kubectl port-forward`, which keeps the browser's origin 127.0.0.1 (the server
# answers only as 127.0.0.1 or localhost) and needs no NetworkPolicy opening.
CONSOLE_PORT = 8266
_START = ("nohup sh -c 'for i in $(seq 1 60); do cuberay up --address 127.0.0.1:6379 --platform "
          f"{L.CONFIG_DIR}/{L.PLATFORM_KEY} --console-port {CONSOLE_PORT} && exit 0; sleep 5; done' "
          ">/tmp/cuberay-up.log 2>&1 &")


def head_group(opts: RenderOptions, labels: dict[str, str], volumes: list[dict[str, Any]],
               mounts: list[dict[str, Any]], env: list[dict[str, str]], *, start_controller: bool,
               config_map: str = CONFIGMAP) -> dict[str, Any]:
    amounts = {"cpu": opts.head_cpu, "memory": opts.head_memory}
    container: dict[str, Any] = {
        "name": "ray-head", "image": opts.image,
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "ports": [{"name": "gcs-server", "containerPort": 6379}, {"name": "dashboard", "containerPort": 8265},
                  {"name": "client", "containerPort": 10001}],
        "env": env,
        "volumeMounts": [{"name": "cuberay-config", "mountPath": L.CONFIG_DIR, "readOnly": True}, *mounts],
    }
    if start_controller:
        container["ports"].append({"name": "console", "containerPort": CONSOLE_PORT})
        # After `ray start`: install the controller (a detached actor) once the GCS answers.
        container["lifecycle"] = {"postStart": {"exec": {"command": ["/bin/sh", "-c", _START]}}}
    return {
        # No work on the head: it runs the GCS, the dashboard, the controller and job drivers.
        "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
        "template": {"metadata": {"labels": dict(labels)},
                     "spec": {"containers": [container],
                              "volumes": [{"name": "cuberay-config", "configMap": {"name": config_map}},
                                          *volumes]}},
    }


def cluster_spec(tenant: Any, shares: list[PoolShare], opts: RenderOptions, labels: dict[str, str], *,
                 start_controller: bool = True, config_map: str = CONFIGMAP,
                 autoscaling: bool | None = None, worker_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The RayClusterSpec shared by the tenant's RayCluster, RayJobs and RayServices."""
    volumes, mounts = tenant_storage(tenant)
    env = [{"name": "CUBERAY_PLATFORM", "value": f"{L.CONFIG_DIR}/{L.PLATFORM_KEY}"},
           {"name": L.ENV_WORKER_GROUPS, "value": worker_groups_env(shares)}]
    scaling = opts.autoscaling if autoscaling is None else autoscaling
    spec: dict[str, Any] = {"rayVersion": L.RAY_VERSION}
    if scaling:
        spec["enableInTreeAutoscaling"] = True
        spec["autoscalerOptions"] = {"version": "v2", "upscalingMode": "Default", "idleTimeoutSeconds": 60}
    spec["authOptions"] = {"mode": "token"}
    if opts.redis_address:
        ft: dict[str, Any] = {"redisAddress": opts.redis_address}
        if opts.redis_password_secret:
            ft["redisPassword"] = {"valueFrom": {"secretKeyRef": {"name": opts.redis_password_secret,
                                                                  "key": "password"}}}
        spec["gcsFaultToleranceOptions"] = ft
    spec["headGroupSpec"] = head_group(opts, labels, volumes, mounts, env, start_controller=start_controller,
                                       config_map=config_map)
    spec["workerGroupSpecs"] = [worker_group(s, opts, labels, volumes, mounts, worker_annotations)
                                for s in shares if s.max_replicas > 0]
    return spec


def queue_labels(platform: Any, tenant: Any, opts: RenderOptions) -> dict[str, str]:
    """The labels that put an object in the tenant's queue (on the RayCluster/RayJob metadata)."""
    plat = platform.metadata.name
    if opts.scheduler == L.Scheduler.kueue:
        return {L.KUEUE_QUEUE: tenant.name, L.KUEUE_PRIORITY: L.priority_class(plat, tenant.priority)}
    if opts.scheduler == L.Scheduler.volcano:
        return {L.VOLCANO_QUEUE: tenant.name, L.RAY_PRIORITY_CLASS: L.priority_class(plat, tenant.priority)}
    return {}


def raycluster(platform: Any, tenant: Any, shares: list[PoolShare], opts: RenderOptions) -> Manifest:
    pod_labels = L.base_labels(platform.metadata.name, tenant.name)
    near = volcano_cluster_labels(platform) if opts.scheduler == L.Scheduler.volcano else {}
    metadata: dict[str, Any] = {"name": tenant.name, "namespace": tenant.name,
                                "labels": {**pod_labels, **queue_labels(platform, tenant, opts), **near}}
    if opts.scheduler == L.Scheduler.kueue and opts.autoscaling:
        metadata["annotations"] = {L.KUEUE_ELASTIC: "true"}
    podset = kueue_cluster_podset(platform) if opts.scheduler == L.Scheduler.kueue else {}
    obj = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": metadata,
           "spec": cluster_spec(tenant, shares, opts, pod_labels, worker_annotations=podset)}
    manifest = Manifest(obj, _cluster_header(tenant, shares, opts))
    groups = [s for s in shares if s.max_replicas > 0]
    for i, share in enumerate(groups):
        where = ("spec", "workerGroupSpecs", i)
        manifest.note((*where, "minReplicas"), f"whole {share.pool.name} nodes the pool guarantee "
                                               f"({_fmt(share.guaranteed, share)}) pays for")
        manifest.note((*where, "maxReplicas"), f"whole nodes within the pool max ({_fmt(share.max, share)}) "
                                               f"and the pool size ({share.pool.nodes})")
    return manifest


def _fmt(vector: Any, share: PoolShare) -> str:
    return ", ".join(f"{k} {v}" for k, v in quantities(vector, pool_fabric(share.pool)).items()) or "nothing"


def _cluster_header(tenant: Any, shares: list[PoolShare], opts: RenderOptions) -> list[str]:
    lines = [f"The Ray cluster of tenant {tenant.name}. The head runs no work (num-cpus 0): it runs the GCS, the",
             "dashboard, the cuberay controller (started after `ray start`) and job drivers. One worker group per",
             "node pool; each worker pod is one pool node, the Ray node the simulator and the local platform see."]
    lines += [f"cuberay's web console and HTTP API: port {CONSOLE_PORT} of the head and of its Service "
              f"{tenant.name}-head-svc.",
              f"Open it with `kubectl -n {tenant.name} port-forward svc/{tenant.name}-head-svc {CONSOLE_PORT}`, "
              f"then http://127.0.0.1:{CONSOLE_PORT}/ (sign in with the cluster token)."]
    if opts.autoscaling:
        lines.append("Ray's autoscaler (v2) adds workers between minReplicas and maxReplicas as jobs need them.")
    for share in shares:
        if share.max_replicas == 0:
            lines.append(f"No {share.pool.name} group: one {share.pool.name} node is more than the tenant's max "
                         f"there ({_fmt(share.max, share)}).")
    return lines
