"""``cuberay kube render``: every manifest of a platform, as files.

One file per tenant (``<tenant>.yaml``: Namespace, platform ConfigMap, LocalQueue under
Kueue, RayCluster, and the NetworkPolicy, Role and RoleBinding that keep tenants apart) and one for the cluster-scoped objects (``cluster.yaml``: ResourceFlavors,
ClusterQueues and WorkloadPriorityClasses under Kueue, with its Topology when the platform declares
levels of closeness; HyperNodes, Queues and PriorityClasses under Volcano), plus a README of the scheduler settings the manifests need. Apply
``cluster.yaml`` first.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cuberay.kuberay import labels as L
from cuberay.kuberay.manifest import Manifest
from cuberay.kuberay.render_access import network_policy, tenant_rbac
from cuberay.kuberay.render_cluster import (
    RenderOptions,
    namespace,
    platform_configmap,
    raycluster,
)
from cuberay.kuberay.render_queues import (
    KUEUE_README,
    VOLCANO_README,
    kueue_cluster_objects,
    local_queue,
    volcano_cluster_objects,
)
from cuberay.kuberay.render_topology import KUEUE_NOTE, VOLCANO_NOTE, declared
from cuberay.platform.policy.pool_shares import platform_shares

CLUSTER_FILE = "cluster.yaml"


def tenant_manifests(platform: Any, tenant: Any, shares: list[Any], opts: RenderOptions) -> list[Manifest]:
    settings = platform.spec.scheduler
    if settings.driver_resource:  # the tenant's controller starts drivers: they go where the workers offer places
        opts = replace(opts, drivers=(settings.driver_resource, settings.max_drivers))
    out = [namespace(platform, tenant), platform_configmap(platform, tenant, shares)]
    if opts.scheduler == L.Scheduler.kueue:
        out.append(local_queue(platform, tenant))
    # Isolation first: the policy and RBAC are in place before the cluster's pods start.
    out += [network_policy(platform, tenant), *tenant_rbac(platform, tenant)]
    out.append(raycluster(platform, tenant, shares, opts))
    return out


def render_platform(platform: Any, opts: RenderOptions) -> dict[str, list[Manifest] | str]:
    """File name -> manifests (or README text), in apply order."""
    shares = platform_shares(platform)
    files: dict[str, list[Manifest] | str] = {}
    near = bool(declared(platform))
    if opts.scheduler == L.Scheduler.kueue:
        files[CLUSTER_FILE] = kueue_cluster_objects(platform, shares, opts)
        files["README.md"] = KUEUE_README + (KUEUE_NOTE if near else "")
    elif opts.scheduler == L.Scheduler.volcano:
        files[CLUSTER_FILE] = volcano_cluster_objects(platform, shares, opts)
        files["README.md"] = VOLCANO_README + (VOLCANO_NOTE if near else "")
    for tenant in platform.tenants:
        files[f"{tenant.name}.yaml"] = tenant_manifests(platform, tenant, shares[tenant.name], opts)
    return files


def all_manifests(files: dict[str, list[Manifest] | str]) -> list[Manifest]:
    return [m for content in files.values() if not isinstance(content, str) for m in content]
