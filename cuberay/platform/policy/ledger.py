"""The cluster model: nodes, capacity, labels, per-card accelerator shares, allocations.

Pure bookkeeping, no Ray: the live controller builds a ledger from Ray's nodes,
the simulator from a node list. Each node is a :class:`NodeState`
(:mod:`cuberay.platform.policy.nodes`, with the per-card rules); the ledger takes
and gives back workers' resources on them, all or nothing per job, and keeps the
totals and the free-capacity index in step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from cuberay.platform.policy.mix import WorkloadMix
from cuberay.platform.policy.node_index import INDEX_MIN_NODES, NodeIndex, bucket_key
from cuberay.platform.policy.nodes import NodeState, pick_cards
from cuberay.platform.policy.topology import DEFAULT_TOPOLOGY, Topology
from cuberay.platform.spec.resources import CARD_RESOURCES, Resources, WorkerRequest

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """Where one worker of a gang runs: a node and, for accelerators, which cards."""

    node_id: str
    cards: tuple[tuple[int, float], ...] = ()
    request: WorkerRequest | None = None  # a role member's own request; None: the allocation's


@dataclass(frozen=True, slots=True)
class Allocation:
    """The resources one admitted job holds: one slot per worker."""

    job_id: str
    request: WorkerRequest
    slots: tuple[WorkerSlot, ...]
    total: Resources = Resources()  # request x workers, filled in by the ledger

    @property
    def node_ids(self) -> list[str]:
        return [s.node_id for s in self.slots]

    def request_of(self, slot: WorkerSlot) -> WorkerRequest:
        """What ``slot`` holds: its role's request, or the workers'."""
        return slot.request or self.request


def _split_cards(capacity: Mapping[str, float]) -> tuple[str | None, int]:
    for name in CARD_RESOURCES:
        if capacity.get(name, 0.0) > 0:
            return name, int(capacity[name] + _EPS)
    return None, 0


class Ledger:
    """Nodes and allocations. Mutated only through allocate/release/restore/add/remove."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeState] = {}
        self.allocations: dict[str, Allocation] = {}
        self.total_capacity: dict[str, float] = {}
        self.total_free: dict[str, float] = {}
        self.version = 0  # bumped when the node set changes (for callers' caches)
        self.cache: dict[object, object] = {}  # facts about the node set only; cleared when it changes
        self._index = NodeIndex()  # nodes by free capacity, so placement reads a bounded set of them
        # Nodes changed since the index last saw them. A small cluster's placement scans every node and never
        # reads the index, so there it is brought up to date only when read (``index``), not per allocation.
        self._stale: dict[str, NodeState] = {}
        self._lazy_index = True
        self.changes = 0  # bumped on every change to any node's free capacity (for callers' memos)
        self.mix = WorkloadMix()  # recent requests, weighed by the fragmentation-aware placement
        self.rng = random.Random(0)  # the ``random`` placement's choices, reproducible per ledger
        self._topology = DEFAULT_TOPOLOGY  # levels of closeness the nodes' labels name (policy/topology.py)

    @property
    def topology(self) -> Topology:
        return self._topology

    @topology.setter
    def topology(self, topo: Topology) -> None:
        if topo != self._topology:
            self._topology = topo
            self.cache.clear()  # "could it ever fit" answers depend on the domains

    # -- nodes ---------------------------------------------------------------------
    def add_node(self, node_id: str, capacity: Mapping[str, float], labels: Mapping[str, str] | None = None) -> NodeState:
        """Add (or re-add) a node with nothing allocated on it."""
        if node_id in self.nodes:
            self.remove_node(node_id)
        cap = {k: float(v) for k, v in capacity.items() if v}
        card_resource, n_cards = _split_cards(cap)
        node = NodeState(node_id, cap, dict(labels or {}), dict(cap), card_resource, [1.0] * n_cards,
                         full_cards=n_cards)
        self.version += 1
        self.cache.clear()
        node.labels.setdefault("ray.io/node-id", node_id)
        self.nodes[node_id] = node
        self._resized()
        self._touched(node)
        for k, v in cap.items():
            self.total_capacity[k] = self.total_capacity.get(k, 0.0) + v
            self.total_free[k] = self.total_free.get(k, 0.0) + v
        return node

    def remove_node(self, node_id: str) -> list[str]:
        """Drop a node; returns the jobs that had workers on it (their allocations are released)."""
        node = self.nodes.get(node_id)
        if node is None:
            return []
        hit = [a.job_id for a in self.allocations.values() if any(s.node_id == node_id for s in a.slots)]
        for job_id in hit:
            self.release(job_id)
        for k, v in node.capacity.items():
            self.total_capacity[k] -= v
            self.total_free[k] -= v
        del self.nodes[node_id]
        self._stale.pop(node_id, None)
        self._index.remove(node_id)
        self._resized()
        self.version += 1
        self.cache.clear()
        return hit

    def set_alive(self, node_id: str, alive: bool) -> bool:
        """Open or close a node to new work (a draining node keeps what it holds); True if that changed."""
        node = self.nodes.get(node_id)
        if node is None or node.alive == alive:
            return False
        node.alive = alive
        self.version += 1
        self.cache.clear()
        self._touched(node)
        return True

    @property
    def index(self) -> NodeIndex:
        """The free-capacity index, up to date with every node."""
        if self._stale:
            for node in self._stale.values():
                self._index.update(node)
            self._stale.clear()
        return self._index

    def _resized(self) -> None:
        """The node set changed: large clusters keep the index current on every change, small ones on read."""
        lazy = len(self.nodes) < INDEX_MIN_NODES
        if not lazy and self._lazy_index:
            self.index  # noqa: B018 (brings the index up to date before it is kept eagerly)
        self._lazy_index = lazy

    def _touched(self, node: NodeState) -> None:
        self.changes += 1
        if self._lazy_index:
            self._stale[node.id] = node
        else:
            self._index.update(node)

    def alive_nodes(self) -> list[NodeState]:
        return [n for n in self.nodes.values() if n.alive]

    # -- allocations -----------------------------------------------------------------
    def allocate(self, job_id: str, request: WorkerRequest, node_ids: Iterable[str],
                 roles: Sequence[WorkerRequest] = ()) -> Allocation:
        """Take resources for one worker per entry of ``node_ids``; all or nothing. The last ``len(roles)`` entries
        are role members (a gang with roles), each taking its own request instead of ``request``."""
        if job_id in self.allocations:
            raise ValueError(f"job {job_id} already holds an allocation")
        node_ids = list(node_ids)
        missing = sorted({n for n in node_ids if n not in self.nodes})
        if missing:  # checked first: a KeyError halfway would leave the workers taken so far allocated
            raise ValueError(f"job {job_id} names nodes the ledger does not have: {', '.join(missing)}; "
                             f"place the job again on the current nodes")
        first_role = len(node_ids) - len(roles)
        wants: list[WorkerRequest | None] = [None] * first_role + list(roles)
        slots: list[WorkerSlot] = []
        try:
            for node_id, want in zip(node_ids, wants):
                slot = self._take(self.nodes[node_id], want or request)
                slots.append(slot if want is None else WorkerSlot(slot.node_id, slot.cards, want))
        except _NoFit:
            for slot in slots:
                self._give(slot, slot.request or request)
            raise ValueError(f"job {job_id} does not fit on nodes {list(node_ids)}") from None
        total = request.resources * first_role
        for want in roles:
            total = total + want.resources
        alloc = Allocation(job_id, request, tuple(slots), total)
        self.allocations[job_id] = alloc
        return alloc

    def resize(self, job_id: str, node_ids: Iterable[str]) -> Allocation:
        """Change a job's workers to one per entry of ``node_ids``; all or nothing.

        Workers on nodes that stay keep their slots (and cards): a running worker is not moved
        on paper. New workers are taken before removed ones are given back, so a failure leaves
        the allocation as it was.
        """
        old = self.allocations.get(job_id)
        if old is None:
            raise ValueError(f"job {job_id} holds no allocation to resize")
        if any(slot.request is not None for slot in old.slots):
            raise ValueError(f"job {job_id} is a gang with roles, which keeps its size")
        node_ids = list(node_ids)
        missing = sorted({n for n in node_ids if n not in self.nodes})
        if missing:
            raise ValueError(f"job {job_id} names nodes the ledger does not have: {', '.join(missing)}")
        kept: dict[str, list[WorkerSlot]] = {}
        for slot in old.slots:
            kept.setdefault(slot.node_id, []).append(slot)
        slots: list[WorkerSlot | None] = []
        for node_id in node_ids:
            here = kept.get(node_id)
            slots.append(here.pop(0) if here else None)
        taken: list[WorkerSlot] = []
        try:
            for i, slot in enumerate(slots):
                if slot is None:
                    slots[i] = self._take(self.nodes[node_ids[i]], old.request)
                    taken.append(slots[i])  # type: ignore[arg-type]
        except _NoFit:
            for slot in taken:
                self._give(slot, old.request)
            raise ValueError(f"job {job_id} does not fit on nodes {node_ids}") from None
        for rest in kept.values():
            for slot in rest:
                if slot.node_id in self.nodes:
                    self._give(slot, old.request)
        alloc = Allocation(job_id, old.request, tuple(slots), old.request.resources * len(slots))  # type: ignore[arg-type]
        self.allocations[job_id] = alloc
        return alloc

    def release(self, job_id: str) -> Allocation | None:
        """Give back everything a job holds; returns the allocation (None if it held nothing)."""
        alloc = self.allocations.pop(job_id, None)
        if alloc is not None:
            for slot in alloc.slots:
                if slot.node_id in self.nodes:
                    self._give(slot, alloc.request_of(slot))
        return alloc

    def restore(self, alloc: Allocation) -> None:
        """Put back an allocation exactly as it was (same cards); used to undo a release."""
        for slot in alloc.slots:
            node = self.nodes[slot.node_id]
            self._sub(node, alloc.request_of(slot).resources, skip=node.card_resource)
            for idx, amount in slot.cards:
                node.cards[idx] -= amount
                node.free[node.card_resource] -= amount  # type: ignore[index]
                self.total_free[node.card_resource] -= amount  # type: ignore[index]
            if slot.cards:
                node.recount()
            self._touched(node)
        self.allocations[alloc.job_id] = alloc

    def follow_cards(self, job_id: str, cards: Sequence[Sequence[int]]) -> bool:
        """Take the cards Ray gave each worker of a job (``ray.get_gpu_ids()``, one list per worker, in slot order).

        Ray, not cuberay, picks the physical card of each placement-group bundle;
        the ledger records the same cards so that later placements reason about
        the real shares. Returns False, and changes nothing, when the report does
        not fit what the ledger holds (a worker count or card count that differs,
        a card past the node's, or a share the other jobs on that card leave no room for).
        """
        alloc = self.allocations.get(job_id)
        if alloc is None or len(cards) != len(alloc.slots):
            return False
        self.release(job_id)
        new_slots = []
        for slot, ids in zip(alloc.slots, cards):
            node = self.nodes.get(slot.node_id)
            share = alloc.request_of(slot).resources
            amount = share.get(node.card_resource, 0.0) if node and node.card_resource else 0.0
            per = amount if amount < 1.0 - _EPS else 1.0
            if node is None or len(ids) != len(slot.cards) or not all(0 <= i < len(node.cards) for i in ids):
                self.restore(alloc)
                return False
            new_slots.append(WorkerSlot(slot.node_id, tuple((int(i), per) for i in ids), slot.request))
        moved = Allocation(job_id, alloc.request, tuple(new_slots), alloc.total)
        held: dict[tuple[str, int], float] = {}
        for slot in new_slots:
            for i, amount in slot.cards:
                held[(slot.node_id, i)] = held.get((slot.node_id, i), 0.0) + amount
        if any(self.nodes[n].cards[i] + _EPS < amount for (n, i), amount in held.items()):
            self.restore(alloc)
            return False
        self.restore(moved)
        return True

    def _sub(self, node: NodeState, res: Mapping[str, float], skip: str | None) -> None:
        free, total = node.free, self.total_free
        for k, v in res.items():
            if k != skip:
                free[k] = free.get(k, 0.0) - v
                total[k] = total.get(k, 0.0) - v

    def _take(self, node: NodeState, req: WorkerRequest) -> WorkerSlot:
        res = req.resources
        for k, v in res.items():
            if k != node.card_resource and node.free.get(k, 0.0) + _EPS < v:
                raise _NoFit
        cards: tuple[tuple[int, float], ...] = ()
        if node.card_resource and res.get(node.card_resource, 0.0) > 0:
            cards = pick_cards(node.cards, res[node.card_resource])
            if not cards:
                raise _NoFit
            for idx, amount in cards:
                node.cards[idx] -= amount
            node.recount()
            node.free[node.card_resource] -= res[node.card_resource]
            self.total_free[node.card_resource] -= res[node.card_resource]
        elif any(name in res for name in CARD_RESOURCES):
            raise _NoFit  # asks for an accelerator this node does not have
        self._sub(node, res, skip=node.card_resource)
        self._touched(node)
        return WorkerSlot(node.id, cards)

    def _give(self, slot: WorkerSlot, req: WorkerRequest) -> None:
        node = self.nodes[slot.node_id]
        for k, v in req.resources.items():
            if k != node.card_resource:
                node.free[k] = node.free.get(k, 0.0) + v
                self.total_free[k] = self.total_free.get(k, 0.0) + v
        for idx, amount in slot.cards:
            node.cards[idx] += amount
            node.free[node.card_resource] += amount  # type: ignore[index]
            self.total_free[node.card_resource] += amount  # type: ignore[index]
        if slot.cards:
            node.recount()
        self._touched(node)

    def check_invariants(self) -> None:
        """Raise AssertionError if any node, card or total is over-allocated (used by tests)."""
        for node in self.nodes.values():
            for k, v in node.free.items():
                assert v >= -1e-6, f"node {node.id} over-allocated on {k}: free {v}"
                assert v <= node.capacity.get(k, 0.0) + 1e-6, f"node {node.id} frees more {k} than it has"
            for i, c in enumerate(node.cards):
                assert -1e-6 <= c <= 1.0 + 1e-6, f"node {node.id} card {i} free share {c} out of [0, 1]"
            key = self.index.where.get(node.id)
            assert key == bucket_key(node) and node.id in self.index.buckets[key], \
                f"node {node.id} is indexed under {key}, not under its free capacity {bucket_key(node)}"
        assert set(self.index.where) == set(self.nodes), "the node index and the node set differ"


class _NoFit(Exception):
    pass
