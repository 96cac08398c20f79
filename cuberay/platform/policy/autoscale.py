"""In-cluster capacity on KubeRay: worker groups count up to their maxReplicas, the autoscaler adds the nodes.

On a KubeRay cluster the renderer hands the head the tenant's worker groups (JSON in
``CUBERAY_KUBE_WORKER_GROUPS``: group, pool, maxReplicas, per-node resources and labels).
Nodes a group may still add are *headroom*. Each tick the controller asks: would the
admission cycle admit more if the headroom nodes existed? It runs the same ``schedule`` on
the snapshot with headroom nodes added (and removed again); if some admitted gang lands on
headroom, the answer is a resource request for Ray's autoscaler: every worker of those gangs,
the new ones selected by ``cuberay.io/pool``, so the autoscaler adds nodes of the right groups.
The request always holds every admitted worker's bundle too, pinned to its node
(``ray.io/node-id``): between admission and the moment its workers start a node looks idle to
Ray, and the autoscaler keeps a node a request needs. Admission itself still only places on
nodes that exist; the job is admitted on the next cycle after the nodes join.

Pure: no Ray (the controller makes the one Ray call).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from cuberay.platform.policy.admission import schedule
from cuberay.platform.policy.cluster_state import ClusterState
from cuberay.platform.policy.decisions import Admit
from cuberay.platform.spec.resources import LABEL_POOL

ENV_WORKER_GROUPS = "CUBERAY_KUBE_WORKER_GROUPS"  # set on the head by `cuberay kube render`
HEADROOM_PREFIX = "autoscale:"
NODE_ID = "ray.io/node-id"  # every Ray node's own label (and every ledger node's)
NEW_NODES = "waiting for new nodes:"

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
        state.ledger.add_node(node_id, group.resources, {**group.labels, NODE_ID: node_id})
    try:
        yield extra
    finally:
        for node_id in extra:
            state.ledger.remove_node(node_id)


@dataclass(frozen=True)
class ScaleUp:
    """What to ask of Ray's autoscaler, and what each waiting gang waits for."""

    bundles: list[Bundle] = field(default_factory=list)
    workers: dict[str, dict[str, int]] = field(default_factory=dict)  # job -> worker group -> its workers there
    new_nodes: dict[str, int] = field(default_factory=dict)  # worker group -> nodes the request adds

    def reason(self, job_id: str, waiting: str) -> str:
        """Why ``job_id`` waits (``waiting``: the cycle's own reason), with the new nodes asked for it, if any."""
        if waiting.startswith(NEW_NODES):  # a reason kept from an earlier request: never repeat or keep it stale
            waiting = waiting.split("; ", 1)[-1]
        asked = self.workers.get(job_id)
        if not asked:
            return waiting
        groups = ", ".join(f"{_nodes(self.new_nodes.get(g, 0))} of worker group {g} (room for {w} of this gang's "
                           f"workers)" for g, w in sorted(asked.items()))
        return f"{NEW_NODES} asked Ray's autoscaler for {groups}; {waiting}"


def _nodes(n: int) -> str:
    return f"{n} new node{'s' if n != 1 else ''}"


def scale_up_request(state: ClusterState, groups: list[WorkerGroup], now: float) -> ScaleUp:
    """The autoscaler request: the bundles running work holds, each on its node (so the autoscaler never takes
    a node a gang was just admitted on before its workers start), plus what only headroom would fit."""
    if not groups:
        return ScaleUp()
    held: list[Bundle] = [(alloc.request_of(slot).to_ray(), {NODE_ID: slot.node_id})
                          for job_id, alloc in state.ledger.allocations.items() if job_id in state.running
                          for slot in alloc.slots]  # cuberay's own jobs: what other Ray work holds is not ours
    if not len(state.queue):
        return ScaleUp(held)
    with with_headroom(state, groups) as extra:
        if not extra:
            return ScaleUp(held)
        resume = state.resume_after  # a what-if cycle must not move where the real cycles resume
        try:
            decisions = schedule(state, now, explain=False).decisions
        finally:
            state.resume_after = resume
    admits = [d for d in decisions if isinstance(d, Admit) and any(n in extra for n in d.node_ids)]
    bundles, workers = list(held), {}
    new: dict[str, list[dict[str, float]]] = {}  # worker group -> the bundles it gets
    for d in admits:
        job = state.queue.get(d.job_id)
        if job is None:
            continue
        for node_id, member in zip(d.node_ids, job.member_requests(len(d.node_ids) - job.role_members)):
            group = extra.get(node_id)
            # a new node by its pool; a worker the what-if put on a node that exists, on that node
            bundles.append((member.to_ray(), {LABEL_POOL: group.pool} if group else {NODE_ID: node_id}))
            if group:
                new.setdefault(group.group, []).append(member.to_ray())
                mine = workers.setdefault(d.job_id, {})
                mine[group.group] = mine.get(group.group, 0) + 1
    room = {g.group: sum(1 for e in extra.values() if e.group == g.group) for g in groups}
    shapes = {g.group: g.resources for g in groups}
    return ScaleUp(bundles, workers, {g: min(room[g], packed_nodes(b, shapes[g])) for g, b in new.items()})


# Ray's autoscaler packs requested bundles onto a node by subtracting floats: twenty 0.1-CPU bundles leave
# 0.0999999999999994 of a 2-CPU node for the last one, which then gets a second node (the raylet counts in fixed
# point and runs all twenty on one; so does packed_nodes below). Sent a hair smaller, far below Ray's 0.0001
# resource unit, fractional amounts pack as they run.
PACKING_SLACK = 1e-9


def as_requested(bundle: Mapping[str, float]) -> dict[str, float]:
    """``bundle`` as sent to Ray's autoscaler: fractional amounts less PACKING_SLACK, whole ones as they are."""
    return {k: v - PACKING_SLACK if v != int(v) else v for k, v in bundle.items()}


def packed_nodes(bundles: list[dict[str, float]], shape: Mapping[str, float]) -> int:
    """How many nodes of ``shape`` hold ``bundles``, first fit largest first (how the autoscaler packs a
    request: it does not spread, so a spread gang's workers may share a new node)."""
    def share(bundle: dict[str, float]) -> float:  # the largest fraction of the node it takes
        return max((v / shape[k] for k, v in bundle.items() if shape.get(k)), default=0.0)

    free: list[dict[str, float]] = []
    for bundle in sorted(bundles, key=share, reverse=True):
        # Only what the shape counts: a worker's accelerator_type marker is matched by the group's labels.
        counted = {k: v for k, v in bundle.items() if k in shape}
        node = next((n for n in free if all(n[k] + 1e-9 >= v for k, v in counted.items())), None)
        if node is None:
            node = dict(shape)
            free.append(node)
        for k, v in counted.items():
            node[k] -= v
    return len(free)
