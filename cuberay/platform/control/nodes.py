"""The controller's view of Ray's nodes: ledger nodes from ``ray.nodes()``, and foreign usage.

``live_nodes`` reads alive nodes, their schedulable resources and labels.
``ForeignUsage`` reconciles the ledger with what Ray actually has reserved:
whatever a node uses beyond cuberay's own allocations (placement groups and
actors started outside cuberay, a lagging placement group of a job that just
ended) is held in the ledger as a pseudo-allocation, so admission never hands
out capacity Ray cannot give. Only the excess over cuberay's allocations is
counted, so a job that has not reserved yet is never counted twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.spec.resources import LABEL_ACCELERATOR, Resources, WorkerRequest

FOREIGN_PREFIX = "ray-foreign:"
_SKIP_PREFIXES = ("node:", "accelerator_type:")
_SKIP_NAMES = frozenset({"object_store_memory"})
_EPS = 1e-6


@dataclass(frozen=True)
class LiveNode:
    id: str
    capacity: dict[str, float]
    labels: dict[str, str]
    draining: bool = False  # being drained (Ray's autoscaler removing it as idle, or an operator): no new work


def schedulable(resources: Mapping[str, float]) -> dict[str, float]:
    """Resources the ledger tracks: no node:/accelerator_type: markers, object store, or PG-derived names."""
    return {k: float(v) for k, v in resources.items()
            if v and not k.startswith(_SKIP_PREFIXES) and k not in _SKIP_NAMES and "_group_" not in k}


def node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    """The node's Ray labels, plus ray.io/accelerator-type from an ``accelerator_type:X`` resource."""
    labels = {str(k): str(v) for k, v in (node.get("Labels") or {}).items()}
    for key in node.get("Resources") or {}:
        if key.startswith("accelerator_type:"):
            labels.setdefault(LABEL_ACCELERATOR, key.split(":", 1)[1])
    labels.setdefault("ray.io/node-id", node["NodeID"])
    return labels


def live_nodes(nodes: list[Mapping[str, Any]]) -> dict[str, LiveNode]:
    """Alive nodes of a ``ray.nodes()`` answer, by node id."""
    return {n["NodeID"]: LiveNode(n["NodeID"], schedulable(n.get("Resources") or {}), node_labels(n),
                                  bool(n.get("Draining")))
            for n in nodes if n.get("Alive")}


def is_foreign(job_id: str) -> bool:
    return job_id.startswith(FOREIGN_PREFIX)


class ForeignUsage:
    """Pseudo-allocations for capacity Ray reports used beyond cuberay's allocations, per node."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def clear(self) -> None:
        for job_id in [j for j in self.ledger.allocations if is_foreign(j)]:
            self.ledger.release(job_id)

    def update(self, available: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
        """Re-hold foreign usage from Ray's available resources per node; returns what is held."""
        self.clear()
        ours = self._ours()
        held: dict[str, dict[str, float]] = {}
        for node_id, node in self.ledger.nodes.items():
            if node_id not in available:
                continue
            free_in_ray = schedulable(available[node_id])
            extra = {}
            for name, cap in node.capacity.items():
                used = cap - free_in_ray.get(name, 0.0)
                excess = used - ours.get(node_id, {}).get(name, 0.0)
                if excess > _EPS:
                    extra[name] = min(excess, node.free.get(name, 0.0))
            extra = {k: v for k, v in extra.items() if v > _EPS}
            if extra and self._hold(node_id, extra):
                held[node_id] = extra
        return held

    def _ours(self) -> dict[str, dict[str, float]]:
        per_node: dict[str, dict[str, float]] = {}
        for alloc in self.ledger.allocations.values():
            for slot in alloc.slots:
                mine = per_node.setdefault(slot.node_id, {})
                for k, v in alloc.request_of(slot).resources.items():
                    mine[k] = mine.get(k, 0.0) + v
        return per_node

    def _hold(self, node_id: str, amounts: dict[str, float]) -> bool:
        """Hold ``amounts`` on the node: whole cards in one pseudo-worker, a card fraction in another."""
        card = self.ledger.nodes[node_id].card_resource
        parts: list[dict[str, float]] = [dict(amounts)]
        if card and card in amounts:
            whole = math.floor(amounts[card] + _EPS)
            fraction = amounts[card] - whole
            parts[0][card] = whole
            if fraction > _EPS:
                parts.append({card: fraction})
        ok = False
        for i, part in enumerate(parts):
            request = WorkerRequest(Resources({k: v for k, v in part.items() if v > _EPS}))
            if not request.resources:
                continue
            for attempt in (request, _without(request, card)):
                if not attempt.resources:
                    continue
                try:
                    self.ledger.allocate(f"{FOREIGN_PREFIX}{node_id}:{i}", attempt, [node_id])
                    ok = True
                    break
                except ValueError:
                    # The ledger's cards are split differently from Ray's (a cuberay job has not
                    # reserved yet): hold the rest without the cards rather than nothing.
                    continue
        return ok


def _without(request: WorkerRequest, card: str | None) -> WorkerRequest:
    return WorkerRequest(Resources({k: v for k, v in request.resources.items() if k != card}))
