"""In-cluster capacity on KubeRay: worker groups count up to their maxReplicas, the autoscaler adds the nodes.

On a KubeRay cluster the renderer hands the head the tenant's worker groups (JSON in
``CUBERAY_KUBE_WORKER_GROUPS``: group, pool, maxReplicas, per-node resources and labels).
Nodes a group may still add are *headroom*. Each tick the controller asks: would the
admission cycle admit more if the headroom nodes existed? It runs the same ``schedule`` on
the snapshot with headroom nodes added (and removed again); if some admitted gang lands on
headroom, the answer is a resource request for Ray's autoscaler: every running worker's
bundle plus every worker of those gangs, the new ones selected by ``cuberay.io/pool``, so the
autoscaler adds nodes of the right groups. Admission itself still only places on nodes that
exist; the job is admitted on the next cycle after the nodes join.

Pure: no Ray (the controller makes the one Ray call).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from cuberay.platform.policy.admission import schedule
from cuberay.platform.policy.cluster_state import ClusterState
from cuberay.platform.policy.decisions import Admit
from cuberay.platform.spec.resources import LABEL_POOL

ENV_WORKER_GROUPS = "CUBERAY_KUBE_WORKER_GROUPS"  # set on the head by `cuberay kube render`
HEADROOM_PREFIX = "autoscale:"

Bundle = tuple[dict[str, float], dict[str, str]]  # (Ray resources, label selector)


@dataclass(frozen=True)
class WorkerGroup:
    """A KubeRay worker group as the controller sees it: one node per replica."""

    group: str
    pool: str
    max_replicas: int
    resources: Mapping[str, float]
    labels: Mapping[str, str]


def parse_groups(text: str | None) -> list[WorkerGroup]:
    """The worker groups the renderer put in the head's environment (none when not on KubeRay)."""
    if not text:
        return []
    return [WorkerGroup(g["group"], g["pool"], int(g["max_replicas"]), dict(g["resources"]), dict(g["labels"]))
            for g in json.loads(text)]


def headroom(groups: list[WorkerGroup], nodes: Mapping[str, Any]) -> dict[str, WorkerGroup]:
    """Nodes each group may still add: maxReplicas minus the group's nodes that exist (by pool label)."""
    out: dict[str, WorkerGroup] = {}
    for group in groups:
        present = sum(1 for n in nodes.values() if n.labels.get(LABEL_POOL) == group.pool)
        for i in range(max(0, group.max_replicas - present)):
            out[f"{HEADROOM_PREFIX}{group.group}:{i}"] = group
    return out


@contextmanager
def with_headroom(state: ClusterState, groups: list[WorkerGroup]) -> Iterator[dict[str, WorkerGroup]]:
    """The snapshot with the headroom nodes added for the block (for submit checks and what-if cycles)."""
    extra = headroom(groups, state.ledger.nodes)
    for node_id, group in extra.items():
        state.ledger.add_node(node_id, group.resources, {**group.labels, "ray.io/node-id": node_id})
    try:
        yield extra
    finally:
        for node_id in extra:
            state.ledger.remove_node(node_id)


def scale_up_request(state: ClusterState, groups: list[WorkerGroup], now: float) -> list[Bundle]:
    """The autoscaler request that lets the next cycles admit what only headroom would fit; [] if none."""
    if not groups or not len(state.queue):
        return []
    with with_headroom(state, groups) as extra:
        if not extra:
            return []
        resume = state.resume_after  # a what-if cycle must not move where the real cycles resume
        try:
            decisions = schedule(state, now, explain=False).decisions
        finally:
            state.resume_after = resume
    admits = [d for d in decisions if isinstance(d, Admit)]
    if not any(n in extra for d in admits for n in d.node_ids):
        return []
    bundles: list[Bundle] = [(alloc.request.to_ray(), {}) for alloc in state.ledger.allocations.values()
                             for _ in alloc.slots]
    for d in admits:
        job = state.queue.get(d.job_id)
        if job is None:
            continue
        for node_id in d.node_ids:
            selector = {LABEL_POOL: extra[node_id].pool} if node_id in extra else {}
            bundles.append((job.worker.to_ray(), selector))
    return bundles
