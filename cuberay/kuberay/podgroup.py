"""The Volcano PodGroup KubeRay derives from a RayCluster or RayJob (KubeRay 1.7, ``volcano_scheduler.go``).

KubeRay (operator flag ``--batch-scheduler=volcano``) makes one PodGroup ``ray-<name>-pg`` per
RayCluster or RayJob, whose ``minMember`` is the gang Volcano starts all-or-nothing:

- autoscaling off: ``1 + sum(clamp(replicas, minReplicas, maxReplicas) * numOfHosts)``; its
  ``minResources`` use the raw ``replicas`` (KubeRay does not clamp there);
- autoscaling on: ``1 + sum(minReplicas * numOfHosts)``, resources at ``minReplicas``;
- suspended worker groups are skipped;
- pod resources are the sum of the containers' requests (limits where a request is missing);
- a RayJob adds its submitter (K8sJobMode: the submitter template, default 500m CPU and
  200Mi) to ``minResources`` but not to ``minMember``;
- ``spec.queue`` comes from the ``volcano.sh/queue-name`` label and ``spec.networkTopology``
  (``mode``, ``highestTierAllowed``) from ``volcano.sh/network-topology-mode`` and
  ``volcano.sh/network-topology-highest-tier-allowed``.

Reproduced here so a render can be checked against the gang floor it intends.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cuberay.platform.spec.resource_grammar import parse_quantity

SUBMITTER_DEFAULT = {"cpu": Decimal("0.5"), "memory": Decimal(200 * 2**20)}


NETWORK_MODE = "volcano.sh/network-topology-mode"
NETWORK_TIER = "volcano.sh/network-topology-highest-tier-allowed"
QUEUE = "volcano.sh/queue-name"


@dataclass(frozen=True)
class PodGroupFloor:
    name: str
    min_member: int
    min_resources: dict[str, Decimal]
    network_topology: dict[str, Any] | None = None
    queue: str | None = None


def _add(total: dict[str, Decimal], amounts: dict[str, Decimal], times: int = 1) -> None:
    for k, v in amounts.items():
        total[k] = total.get(k, Decimal(0)) + v * times


def pod_resources(template: dict[str, Any]) -> dict[str, Decimal]:
    """Sum of the containers' requests, falling back to limits per resource (initContainers ignored)."""
    out: dict[str, Decimal] = {}
    for container in (template.get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        amounts = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        _add(out, {k: parse_quantity(v) for k, v in amounts.items()})
    return out


def _nonzero(amounts: dict[str, Decimal]) -> dict[str, Decimal]:
    return {k: v for k, v in amounts.items() if v}


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def cluster_floor(spec: dict[str, Any]) -> tuple[int, dict[str, Decimal]]:
    """(minMember, minResources) of a RayClusterSpec."""
    autoscaling = spec.get("enableInTreeAutoscaling") is True
    members = 1
    resources = pod_resources(spec["headGroupSpec"]["template"])
    for group in spec.get("workerGroupSpecs") or []:
        if group.get("suspend"):
            continue
        hosts = group.get("numOfHosts", 1)
        low, high = group.get("minReplicas", 0), group.get("maxReplicas", 2**31 - 1)
        replicas = group.get("replicas", 0)
        if autoscaling:
            count, resource_count = low, low
        else:
            count, resource_count = _clamp(replicas, low, high), replicas
        members += count * hosts
        _add(resources, pod_resources(group["template"]), resource_count * hosts)
    return members, resources


def _network_topology(labels: dict[str, str]) -> dict[str, Any] | None:
    if NETWORK_MODE not in labels and NETWORK_TIER not in labels:
        return None
    out: dict[str, Any] = {}
    if NETWORK_MODE in labels:
        out["mode"] = labels[NETWORK_MODE]
    if NETWORK_TIER in labels:
        out["highestTierAllowed"] = int(labels[NETWORK_TIER])
    return out


def podgroup(obj: dict[str, Any]) -> PodGroupFloor:
    """The PodGroup KubeRay would create for a RayCluster or a RayJob (with rayClusterSpec)."""
    name = f"ray-{obj['metadata']['name']}-pg"
    spec = obj["spec"]
    labels = obj["metadata"].get("labels") or {}
    extra = {"network_topology": _network_topology(labels), "queue": labels.get(QUEUE)}
    if obj["kind"] == "RayCluster":
        members, resources = cluster_floor(spec)
        return PodGroupFloor(name, members, _nonzero(resources), **extra)
    if obj["kind"] == "RayJob":
        members, resources = cluster_floor(spec["rayClusterSpec"])
        if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
            template = spec.get("submitterPodTemplate")
            _add(resources, pod_resources(template) if template else SUBMITTER_DEFAULT)
        return PodGroupFloor(name, members, _nonzero(resources), **extra)
    raise ValueError(f"KubeRay makes PodGroups for RayCluster and RayJob, not {obj['kind']}")


def podgroup_object(obj: dict[str, Any]) -> dict[str, Any]:
    """That PodGroup as the object KubeRay writes (``scheduling.volcano.sh/v1beta1``), for checking it."""
    floor = podgroup(obj)
    spec: dict[str, Any] = {"minMember": floor.min_member,
                            "minResources": {k: str(v) for k, v in floor.min_resources.items()}}
    if floor.queue:
        spec["queue"] = floor.queue
    if floor.network_topology:
        spec["networkTopology"] = floor.network_topology
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": floor.name, "namespace": obj["metadata"].get("namespace", "default")}, "spec": spec}
