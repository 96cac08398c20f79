"""Quota objects between tenants: Kueue (``kueue.x-k8s.io/v1beta2``) or Volcano (``scheduling.volcano.sh/v1beta1``).

Kueue meters quota per ResourceFlavor, so each node pool is a flavor and each tenant's
ClusterQueue holds its pool shares (:mod:`cuberay.platform.policy.pool_shares`): ``nominalQuota`` = the
pool guarantee, ``borrowingLimit`` = pool max - pool guarantee, ``lendingLimit`` where the
platform file sets one. Volcano queues are cluster-wide: ``deserved`` = guaranteed,
``capability`` = max, ``guarantee`` = the gang floor the RayCluster always holds.

Both add the head pod to the tenant's quota: Kueue and Volcano count it, but the platform
file's quotas are for work (the head runs none).
"""

from __future__ import annotations

from typing import Any

import cuberay.platform.spec.resources as res
from cuberay.kuberay import labels as L
from cuberay.kuberay.manifest import Manifest
from cuberay.kuberay.quantities import k8s_names, pool_fabric, quantity, total
from cuberay.kuberay.render_cluster import RenderOptions
from cuberay.kuberay.render_topology import declared, hypernodes, kueue_topology, topology_name
from cuberay.platform.policy.pool_shares import PoolShare
from cuberay.platform.spec.resource_grammar import parse_cpu, parse_memory
from cuberay.platform.spec.resources import Resources

AUTOSCALER = Resources({res.CPU: 0.5, res.MEMORY: float(512 * 2**20)})  # KubeRay's sidecar default


def head_pod(opts: RenderOptions) -> Resources:
    """The head pod as written in the template (what KubeRay's PodGroup arithmetic counts)."""
    return Resources({res.CPU: float(parse_cpu(opts.head_cpu)), res.MEMORY: float(parse_memory(opts.head_memory))})


def head_overhead(opts: RenderOptions) -> Resources:
    """What the head costs in quota: its container plus the autoscaler sidecar KubeRay injects."""
    return head_pod(opts) + (AUTOSCALER if opts.autoscaling else Resources())


def _amounts(vector: Any, fabric: str | None = None) -> dict[str, str]:
    return {k: quantity(k, v) for k, v in k8s_names(vector, fabric).items()}


def _text(amounts: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in amounts.items()) or "nothing"


# ---------------------------------------------------------------- Kueue

def resource_flavor(platform: Any, pool: Any) -> Manifest:
    spec: dict[str, Any] = {"nodeLabels": {res.LABEL_POOL: pool.name}}
    taints = []
    for taint in pool.taints:
        key, value, effect = L.taint_parts(taint)
        taints.append({"key": key, **({"value": value} if value else {}), "effect": effect})
    if taints:
        spec["nodeTaints"] = taints
    if declared(platform):
        spec["topologyName"] = topology_name(platform)  # Kueue places the flavor's pods by the topology
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
           "metadata": {"name": L.flavor(platform.metadata.name, pool.name),
                        "labels": L.base_labels(platform.metadata.name)}, "spec": spec}
    node = _text(_amounts(pool.node_resources(), pool_fabric(pool)))
    return Manifest(obj, [f"Node pool {pool.name}: {pool.nodes} nodes of {node}. Label its nodes "
                          f"{res.LABEL_POOL}={pool.name}."])


def covered_resources(shares: list[PoolShare]) -> list[str]:
    """Every Kubernetes resource any of the tenant's pools offers, in a stable order."""
    seen: dict[str, None] = {}
    for share in shares:
        for name in k8s_names(share.capacity, pool_fabric(share.pool)):
            seen.setdefault(name, None)
    order = ["cpu", "memory"]
    return [n for n in order if n in seen] + sorted(n for n in seen if n not in order)


def _lending(share: PoolShare) -> dict[str, float]:
    return {} if share.lending is None else k8s_names(share.lending, pool_fabric(share.pool))


def cluster_queue(platform: Any, tenant: Any, shares: list[PoolShare], opts: RenderOptions) -> Manifest:
    plat = platform.metadata.name
    covered = covered_resources(shares)
    flavors, notes = [], []
    head_pool = next((i for i, s in enumerate(shares) if s.max_replicas > 0), 0)
    for i, share in enumerate(shares):
        fabric = pool_fabric(share.pool)
        extra = head_overhead(opts) if i == head_pool else Resources()
        nominal = k8s_names(share.guaranteed + extra, fabric)
        cap = k8s_names(share.max + extra, fabric)
        lend = _lending(share)
        resources = []
        for j, name in enumerate(covered):
            item: dict[str, Any] = {"name": name, "nominalQuota": quantity(name, nominal.get(name, 0.0)),
                                    "borrowingLimit": quantity(name, max(0.0, cap.get(name, 0.0) -
                                                                         nominal.get(name, 0.0)))}
            if name in lend:
                item["lendingLimit"] = quantity(name, lend[name])
            resources.append(item)
            notes.append(((i, j), name, share, i == head_pool))
        flavors.append({"name": L.flavor(plat, share.pool.name), "resources": resources})
    sched = platform.spec.scheduler
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
           "metadata": {"name": tenant.name, "labels": L.base_labels(plat, tenant.name)},
           "spec": {
               "cohortName": plat,
               "namespaceSelector": {"matchLabels": {L.NAMESPACE_NAME: tenant.name}},
               "queueingStrategy": "BestEffortFIFO" if sched.backfill else "StrictFIFO",
               "preemption": {"reclaimWithinCohort": "Any" if sched.reclaim else "Never",
                              "withinClusterQueue": "LowerPriority" if sched.preemption else "Never"},
               "resourceGroups": [{"coveredResources": covered, "flavors": flavors}]}}
    head = _text(_amounts(head_overhead(opts)))
    manifest = Manifest(obj, [
        f"Tenant {tenant.name}'s quota, per node pool (flavor), in cohort {plat}:",
        "  nominalQuota   = the tenant's guarantee in the pool (its cluster-wide guaranteed split over its pools",
        "                   in proportion to pool capacity, unless the platform file sets pool_quotas)",
        "  borrowingLimit = pool max - pool guarantee: what it may borrow from idle tenants of the cohort",
        "  reclaimWithinCohort Any: a tenant below its nominal quota takes it back from borrowers",
        f"The first pool's quota also holds the head pod ({head}); the platform file's quotas are for work."])
    for (i, j), name, share, has_head in notes:
        path = ("spec", "resourceGroups", 0, "flavors", i, "resources", j)
        g = k8s_names(share.guaranteed, pool_fabric(share.pool)).get(name, 0.0)
        m = k8s_names(share.max, pool_fabric(share.pool)).get(name, 0.0)
        plus = " + head" if has_head and name in ("cpu", "memory") else ""
        manifest.note((*path, "nominalQuota"), f"guaranteed {quantity(name, g)}{plus}")
        manifest.note((*path, "borrowingLimit"), f"pool max {quantity(name, m)} - guaranteed {quantity(name, g)}")
        if "lendingLimit" in flavors[i]["resources"][j]:
            manifest.note((*path, "lendingLimit"), "pool_quotas lending_limit: lent out at most, while idle")
    return manifest


def local_queue(platform: Any, tenant: Any) -> Manifest:
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
           "metadata": {"name": tenant.name, "namespace": tenant.name,
                        "labels": L.base_labels(platform.metadata.name, tenant.name)},
           "spec": {"clusterQueue": tenant.name}}
    return Manifest(obj, [f"Objects labelled {L.KUEUE_QUEUE}: {tenant.name} queue here, in ClusterQueue "
                          f"{tenant.name}."])


def priority_classes(platform: Any, kind: str) -> list[Manifest]:
    """One WorkloadPriorityClass (Kueue) or PriorityClass (Volcano) per distinct tenant priority."""
    plat = platform.metadata.name
    out = []
    for priority in sorted({t.priority for t in platform.tenants}, reverse=True):
        tenants = ", ".join(t.name for t in platform.tenants if t.priority == priority)
        name = L.priority_class(plat, priority)
        meta = {"name": name, "labels": L.base_labels(plat)}
        if kind == "WorkloadPriorityClass":
            obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": meta, "value": priority,
                   "description": f"cuberay tenant priority {priority} ({tenants})"}
        else:
            obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": meta,
                   "value": priority, "preemptionPolicy": "PreemptLowerPriority",
                   "description": f"cuberay tenant priority {priority} ({tenants})"}
        out.append(Manifest(obj, [f"Priority {priority} of tenants {tenants}."]))
    return out


def kueue_cluster_objects(platform: Any, all_shares: dict[str, list[PoolShare]],
                          opts: RenderOptions) -> list[Manifest]:
    topology = [kueue_topology(platform)] if declared(platform) else []
    flavors = [resource_flavor(platform, p) for p in platform.spec.node_pools]
    queues = [cluster_queue(platform, t, all_shares[t.name], opts) for t in platform.tenants]
    return [*topology, *flavors, *queues, *priority_classes(platform, "WorkloadPriorityClass")]


# ---------------------------------------------------------------- Volcano

def gang_floor(shares: list[PoolShare], opts: RenderOptions) -> tuple[int, dict[str, float]]:
    """(pods, Kubernetes resources) the tenant's RayCluster always holds: the head and the min workers."""
    pods = 1 + sum(s.min_replicas for s in shares if s.max_replicas > 0)
    vectors = [k8s_names(head_pod(opts))]
    vectors += [k8s_names(s.node * s.min_replicas, pool_fabric(s.pool)) for s in shares if s.max_replicas > 0]
    return pods, total(vectors)


def volcano_queue(platform: Any, tenant: Any, shares: list[PoolShare], opts: RenderOptions) -> Manifest:
    head = head_overhead(opts)
    fabrics = {pool_fabric(s.pool) for s in shares} - {None}
    fabric = next(iter(fabrics)) if len(fabrics) == 1 else None
    deserved = _amounts(tenant.guaranteed_resources() + head, fabric)
    spec: dict[str, Any] = {"reclaimable": True, "deserved": deserved}
    cap = tenant.max_resources()
    if cap is not None:
        spec["capability"] = _amounts(cap + head, fabric)
    _, floor = gang_floor(shares, opts)
    spec["guarantee"] = {"resource": {k: quantity(k, v) for k, v in floor.items()}}
    if tenant.priority >= 0:
        spec["priority"] = tenant.priority
    obj = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
           "metadata": {"name": tenant.name, "labels": L.base_labels(platform.metadata.name, tenant.name)},
           "spec": spec}
    manifest = Manifest(obj, [
        f"Tenant {tenant.name}'s queue (capacity plugin): deserved = guaranteed + the head pod, capability =",
        "max + the head pod, guarantee = the gang floor its RayCluster always holds (head + minReplicas workers),",
        "reclaimable: what it uses above deserved may be reclaimed by tenants below theirs."])
    manifest.note(("spec", "deserved"), f"guaranteed {_text(_amounts(tenant.guaranteed_resources(), fabric))}")
    if cap is not None:
        manifest.note(("spec", "capability"), f"max {_text(_amounts(cap, fabric))}")
    return manifest


def volcano_cluster_objects(platform: Any, all_shares: dict[str, list[PoolShare]],
                            opts: RenderOptions) -> list[Manifest]:
    queues = [volcano_queue(platform, t, all_shares[t.name], opts) for t in platform.tenants]
    return [*hypernodes(platform), *queues, *priority_classes(platform, "PriorityClass")]


VOLCANO_README = """# Volcano settings for these manifests

The RayClusters here carry `volcano.sh/queue-name: <tenant>` and `ray.io/priority-class-name`, and
`cluster.yaml` holds one Volcano `Queue` per tenant plus the `PriorityClass`es. Two settings outside
these files are needed.

## KubeRay operator

Run the operator with the Volcano batch scheduler, so it creates a PodGroup
(`ray-<cluster>-pg`, minMember = 1 + the workers' minReplicas) for every RayCluster and RayJob:

```bash
helm upgrade --install kuberay-operator kuberay/kuberay-operator --version 1.7.0 \\
  --set batchScheduler.name=volcano        # the operator flag --batch-scheduler=volcano
```

## Volcano scheduler

The queues use `deserved` / `capability` / `guarantee`, which is the **capacity** plugin; it replaces
`proportion` (never enable both). Add the `reclaim` action so a tenant below its `deserved` takes
capacity back from tenants above theirs. In the `volcano-scheduler-configmap`:

```yaml
actions: "enqueue, allocate, backfill, reclaim, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: capacity        # instead of proportion
  - name: nodeorder
  - name: binpack
```

The gang plugin keeps every RayCluster at or above its floor (head + minReplicas workers); workers the
autoscaler adds above minReplicas are outside the gang and are the first to be reclaimed.
"""

KUEUE_README = """# Kueue settings for these manifests

`cluster.yaml` holds one `ResourceFlavor` per node pool, one `ClusterQueue` per tenant (all in one
cohort, so idle quota is lent and reclaimed) and the `WorkloadPriorityClass`es; each tenant file holds a
`LocalQueue`. Kueue needs no KubeRay operator flag: it admits RayClusters and RayJobs whole by toggling
`spec.suspend`.

- Kueue v0.19 with the `ray.io/raycluster`, `ray.io/rayjob` and `ray.io/rayservice` integrations (on by default).
- Autoscaling RayClusters carry `kueue.x-k8s.io/elastic-job: "true"`; enable the feature gate
  `ElasticJobsViaWorkloadSlices` on the Kueue controller, or render with `--no-autoscaling`.
- Label each node of a pool `cuberay.io/pool=<pool>`; the flavors select nodes by it.
"""
