"""The platform's topology on Kubernetes: Kueue's Topology and pod-set annotations, Volcano's HyperNodes and the
network-topology labels KubeRay turns into the PodGroup's ``networkTopology``.

Only a platform file that declares ``spec.topology`` gets these. Its levels, widest first, become
Kueue's ``Topology`` (``kueue.x-k8s.io/v1beta2``) with ``kubernetes.io/hostname`` as the lowest
level, and every ResourceFlavor names it (``topologyName``), so Kueue's topology-aware scheduling
(TAS) places the pods. A job's ``topology: {required|preferred: LEVEL}`` becomes the
``kueue.x-k8s.io/podset-{required,preferred}-topology`` annotation on its worker pod template.

Volcano reads the tree as HyperNodes (``topology.volcano.sh/v1alpha1``): one per domain found in
the node pools' labels, tier 1 the narrowest level (its members are the nodes with the domain's
labels), each wider tier's members the HyperNodes below it. A job's request becomes
``volcano.sh/network-topology-mode`` (``hard`` for required, ``soft`` for preferred) and
``volcano.sh/network-topology-highest-tier-allowed`` (the level's tier) on the RayJob, which
KubeRay copies to the PodGroup's ``networkTopology``. The host has no tier there: a request for
the host level is left to the in-cluster controller (and said so in a note).

A tenant's RayCluster hosts many jobs: its worker groups prefer one domain of the narrowest level
(Kueue's preferred annotation, Volcano's soft mode at tier 1), so the tenant's nodes sit close while
the in-cluster controller places each job by its own request.
"""

from __future__ import annotations

import re
from typing import Any

from cuberay.kuberay import labels as L
from cuberay.kuberay.manifest import Manifest

HOSTNAME = "kubernetes.io/hostname"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
VOLCANO_MODE = "volcano.sh/network-topology-mode"
VOLCANO_TIER = "volcano.sh/network-topology-highest-tier-allowed"


def declared(platform: Any) -> list[tuple[str, str]]:
    """(name, node label) of the platform's declared levels, widest first; [] without ``spec.topology``."""
    topo = platform.spec.topology
    return [] if topo is None else list(topo.level_pairs())


def topology_name(platform: Any) -> str:
    return f"{platform.metadata.name}-topology"


def level_label(platform: Any, level: str) -> str | None:
    """The node label of ``level`` on Kubernetes (the host: kubernetes.io/hostname); None if it is no level."""
    if level == "host":
        return HOSTNAME
    return dict(declared(platform)).get(level)


def tier(platform: Any, level: str) -> int | None:
    """Volcano's tier of ``level``: 1 for the narrowest declared level, one more per level up; None for the host."""
    names = [name for name, _ in declared(platform)]
    return len(names) - names.index(level) if level in names else None


# ---------------------------------------------------------------- Kueue

def kueue_topology(platform: Any) -> Manifest:
    levels = [{"nodeLabel": label} for _, label in declared(platform)] + [{"nodeLabel": HOSTNAME}]
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
           "metadata": {"name": topology_name(platform), "labels": L.base_labels(platform.metadata.name)},
           "spec": {"levels": levels}}
    names = ", ".join(name for name, _ in declared(platform))
    return Manifest(obj, [f"The levels of closeness of the platform's nodes ({names}, then the host), widest first, for",
                          "Kueue's topology-aware scheduling; every ResourceFlavor below names it (topologyName)."])


def kueue_podset(platform: Any, request: Any) -> dict[str, str]:
    """The pod template annotation for a job's topology request (empty without one)."""
    if request is None:
        return {}
    label = level_label(platform, request.level)
    if label is None:
        return {}
    return {KUEUE_REQUIRED if request.mode == "required" else KUEUE_PREFERRED: label}


def kueue_cluster_podset(platform: Any) -> dict[str, str]:
    """A tenant RayCluster's worker groups prefer one domain of the narrowest level."""
    levels = declared(platform)
    return {KUEUE_PREFERRED: levels[-1][1]} if levels else {}


# ---------------------------------------------------------------- Volcano

def volcano_labels(platform: Any, request: Any) -> dict[str, str]:
    """The RayJob/RayCluster labels KubeRay turns into the PodGroup's networkTopology (empty without a tier)."""
    if request is None:
        return {}
    t = tier(platform, request.level)
    if t is None:
        return {}
    return {VOLCANO_MODE: "hard" if request.mode == "required" else "soft", VOLCANO_TIER: str(t)}


def volcano_cluster_labels(platform: Any) -> dict[str, str]:
    return {VOLCANO_MODE: "soft", VOLCANO_TIER: "1"} if declared(platform) else {}


def _dns(text: str) -> str:
    name = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.")
    return name[:253].strip("-.") or "domain"


def hypernodes(platform: Any) -> list[Manifest]:
    """One HyperNode per domain the node pools' labels name, narrowest tier first."""
    levels = declared(platform)
    if not levels:
        return []
    plat = platform.metadata.name
    paths: dict[int, dict[tuple[str, ...], set[tuple[str, ...]]]] = {d: {} for d in range(len(levels))}
    for pool in platform.spec.node_pools:
        labels = pool.node_labels()
        values: list[str] = []
        for depth, (_, label) in enumerate(levels):
            if label not in labels:
                break
            values.append(labels[label])
            paths[depth].setdefault(tuple(values), set())
            if depth:
                paths[depth - 1][tuple(values[:-1])].add(tuple(values))
    out = []
    for depth in range(len(levels) - 1, -1, -1):
        name, label = levels[depth]
        t = len(levels) - depth
        for path, children in sorted(paths[depth].items()):
            if depth == len(levels) - 1:
                match = {lbl: value for (_, lbl), value in zip(levels, path)}
                members = [{"type": "Node", "selector": {"labelMatch": {"matchLabels": match}}}]
            else:
                members = [{"type": "HyperNode", "selector": {"exactMatch": {"name": _hypernode(plat, levels, c)}}}
                           for c in sorted(children)]
            obj = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
                   "metadata": {"name": _hypernode(plat, levels, path), "labels": L.base_labels(plat)},
                   "spec": {"tier": t, "tierName": name, "members": members}}
            out.append(Manifest(obj, [f"{name} {'/'.join(path)} (tier {t}): "
                                      + ("the nodes labelled " + ", ".join(f"{k}={v}" for k, v in
                                                                           members[0]["selector"]["labelMatch"]
                                                                           ["matchLabels"].items())
                                         if depth == len(levels) - 1 else
                                         f"the {levels[depth + 1][0]}s below it")]))
    return out


def _hypernode(plat: str, levels: list[tuple[str, str]], path: tuple[str, ...]) -> str:
    return _dns(f"{plat}-{levels[len(path) - 1][0]}-{'-'.join(path)}")


KUEUE_NOTE = """
## Topology-aware scheduling

The platform declares levels of closeness, so `cluster.yaml` also holds a Kueue `Topology` and every
`ResourceFlavor` names it (`topologyName`): Kueue's topology-aware scheduling (the `TopologyAwareScheduling`
feature gate, beta and on by default since Kueue v0.14) places the pods. Label every node with its level
labels (and `kubernetes.io/hostname`, which Kubernetes sets). Jobs asking `topology: {required: LEVEL}` carry
`kueue.x-k8s.io/podset-required-topology` on their worker pods, `preferred` the preferred annotation; a
tenant's RayCluster prefers one domain of the narrowest level.
"""

VOLCANO_NOTE = """
## Network-topology-aware scheduling

The platform declares levels of closeness, so `cluster.yaml` also holds Volcano `HyperNode`s (tier 1 the
narrowest level, each wider tier the HyperNodes below it). Enable Volcano's network-topology-aware
scheduling (the `network-topology-aware` plugin in the scheduler configuration). Jobs asking
`topology: {required|preferred: LEVEL}` carry `volcano.sh/network-topology-mode` (hard/soft) and
`volcano.sh/network-topology-highest-tier-allowed` (the level's tier), which KubeRay copies to the
PodGroup's `networkTopology`; a tenant's RayCluster is soft at tier 1.
"""
