"""Gang placement policies: choose one node per worker, or say the gang does not fit.

All or nothing: a policy returns a node for every worker or ``None``.

- ``pack``: fewest nodes, then most-allocated (busiest) nodes first, so cards of
  one job share a node (an 8-GPU all-reduce inside one node is far faster than
  across nodes) and free nodes stay whole for big gangs.
- ``spread``: least-allocated first, re-scored after every worker (CubeStudio's
  RequestedToCapacityRatio shape: utilisation 0 -> score 10, 100 -> 0).
- ``strict_pack``: every worker on one node. ``strict_spread``: distinct nodes.
- ``auto``: jobs that use accelerators pack, CPU-only jobs spread; RDMA jobs
  prefer nodes of one ``cuberay.io/rdma-domain``.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Mapping, Sequence

from cuberay.platform.policy.ledger import FitCounter, NodeState, workers_that_fit
from cuberay.platform.spec.common import Placement  # noqa: F401 (policy code names it from here)
from cuberay.platform.spec.resources import CPU, MEMORY, WorkerRequest

LABEL_RDMA_DOMAIN = "cuberay.io/rdma-domain"

Reserved = Mapping[str, Mapping[str, float]]  # node id -> amounts held for a blocked job


def score_key(req: WorkerRequest) -> tuple[str, ...]:
    """Resources whose utilisation scores a node for this request."""
    card = req.card_resource
    return (card,) if card else (CPU, MEMORY)


def utilization(node: NodeState, keys: Sequence[str], extra: float = 0.0, req: WorkerRequest | None = None) -> float:
    """Mean used fraction over ``keys``, counting ``extra`` more workers of ``req``."""
    total, n = 0.0, 0
    for k in keys:
        cap = node.capacity.get(k, 0.0)
        if cap <= 0:
            continue
        used = cap - node.free.get(k, 0.0) + (extra * req.resources.get(k, 0.0) if req else 0.0)
        total += used / cap
        n += 1
    return total / n if n else 0.0


def place(nodes: Iterable[NodeState], req: WorkerRequest, count: int, policy: Placement | str,
          *, reserved: Reserved | None = None, empty: bool = False) -> list[str] | None:
    """Return one node id per worker, or ``None`` if the gang cannot be placed now.

    ``reserved`` holds amounts other jobs may not use; ``empty`` places on the
    nodes as if nothing ran (the "could it ever fit" check).
    """
    policy = Placement(policy).resolve(req)
    selector = req.node_selector()
    counter = FitCounter(req, empty)
    fits: list[tuple[NodeState, int]] = []
    room = 0
    whole, card = counter.whole_cards, counter.card
    for node in nodes:
        if not node.alive or (selector and not node.matches(selector)):
            continue
        held = reserved.get(node.id) if reserved else None
        if whole and held is None:  # the common case, inlined: this loop runs for every node
            k = node.full_cards // whole if node.card_resource == card else 0
        else:
            k = counter(node, held)
        if k > 0:
            fits.append((node, k))
            room += k
    if room < count:
        return None
    keys = score_key(req)
    if req.rdma_fabric and policy is Placement.PACK:
        return _pack_rdma(fits, req, count, keys, empty)
    return _POLICIES[policy](fits, req, count, keys, empty)


def _util(node: NodeState, keys: Sequence[str], empty: bool) -> float:
    return 0.0 if empty else utilization(node, keys)


def _strict_pack(fits, req, count, keys, empty) -> list[str] | None:
    best = None
    for node, k in fits:
        if k >= count:
            u = _util(node, keys, empty)
            if best is None or u > best[0]:
                best = (u, node.id)
    return [best[1]] * count if best else None


def _pack(fits, req, count, keys, empty) -> list[str] | None:
    one = _strict_pack(fits, req, count, keys, empty)
    if one:
        return one
    # Fewest nodes: take the nodes that hold the most workers first, busiest first on ties.
    ranked = sorted(fits, key=lambda nk: (-nk[1], -_util(nk[0], keys, empty), nk[0].id))
    out: list[str] = []
    for i, (node, k) in enumerate(ranked):
        need = count - len(out)
        if k >= need:
            # The last node: the busiest one left that holds the rest (best fit on ties), so that
            # emptier nodes stay whole for big gangs; the node count stays the same.
            last = max((nk for nk in ranked[i:] if nk[1] >= need),
                       key=lambda nk: (_util(nk[0], keys, empty), -nk[1]))
            return out + [last[0].id] * need
        out.extend([node.id] * k)
    return None


def _spread(fits, req, count, keys, empty) -> list[str] | None:
    # Heap of (utilisation after one more worker, node id); re-score after each pick.
    heap = [(_spread_score(n, keys, 0, req, empty), n.id, 0, k, n) for n, k in fits]
    heapq.heapify(heap)
    out: list[str] = []
    while heap and len(out) < count:
        _, nid, used, k, node = heapq.heappop(heap)
        out.append(nid)
        used += 1
        if used < k:
            heapq.heappush(heap, (_spread_score(node, keys, used, req, empty), nid, used, k, node))
    return out if len(out) == count else None


def _spread_score(node: NodeState, keys, used: int, req: WorkerRequest, empty: bool) -> float:
    base = 0.0 if empty else utilization(node, keys)
    step = 0.0
    for k in keys:
        cap = node.capacity.get(k, 0.0)
        if cap > 0:
            step += req.resources.get(k, 0.0) / cap
    return base + used * step / max(len(keys), 1)


def _strict_spread(fits, req, count, keys, empty) -> list[str] | None:
    if len(fits) < count:
        return None
    ranked = sorted(fits, key=lambda nk: (_util(nk[0], keys, empty), nk[0].id))
    return [n.id for n, _ in ranked[:count]]


def _pack_rdma(fits, req, count, keys, empty) -> list[str] | None:
    """Pack inside one RDMA domain when possible (busiest domain that fits), else pack anywhere."""
    domains: dict[str, list[tuple[NodeState, int]]] = {}
    for node, k in fits:
        domains.setdefault(node.labels.get(LABEL_RDMA_DOMAIN, ""), []).append((node, k))
    best = None
    for name, members in domains.items():
        if not name or sum(k for _, k in members) < count:
            continue
        placed = _pack(members, req, count, keys, empty)
        if placed:
            busy = sum(_util(n, keys, empty) for n, _ in members) / len(members)
            if best is None or (len(set(placed)), -busy) < (len(set(best[1])), -best[0]):
                best = (busy, placed)
    return best[1] if best else _pack(fits, req, count, keys, empty)


_POLICIES = {
    Placement.PACK: _pack,
    Placement.SPREAD: _spread,
    Placement.STRICT_PACK: _strict_pack,
    Placement.STRICT_SPREAD: _strict_spread,
}


def why_not(nodes: Iterable[NodeState], req: WorkerRequest, count: int, policy: Placement | str) -> str:
    """Explain why a gang can never be placed on these nodes even when they are empty."""
    nodes = [n for n in nodes if n.alive]
    policy = Placement(policy).resolve(req)
    selector = req.node_selector()
    matching = [n for n in nodes if n.matches(selector)] if selector else nodes
    if not matching:
        labels = ", ".join(f"{k}={v}" for k, v in selector.items())
        return (f"no node has the labels {labels}; remove the constraint or add nodes with these labels "
                f"(check the gpu type in resources.gpu and spec.node_selector)")
    per_node = max((workers_that_fit(n, req, empty=True) for n in matching), default=0)
    if per_node == 0:
        biggest = max(matching, key=lambda n: sum(n.capacity.values()))
        return (f"one worker needs {_fmt(req.resources)} but the largest matching node has "
                f"{_fmt(biggest.capacity)}; lower the per-worker resources")
    capacity = sum(workers_that_fit(n, req, empty=True) for n in matching)
    if policy is Placement.STRICT_PACK and per_node < count:
        return (f"strict_pack needs all {count} workers on one node but a node holds at most {per_node}; "
                f"lower workers to {per_node} or use placement pack")
    if policy is Placement.STRICT_SPREAD and len(matching) < count:
        return (f"strict_spread needs {count} distinct nodes but only {len(matching)} match; "
                f"lower workers or use placement spread")
    return (f"the gang of {count} workers x {_fmt(req.resources)} is larger than the cluster "
            f"(at most {capacity} such workers fit on empty nodes); lower workers or per-worker resources")


def _fmt(res: Mapping[str, float]) -> str:
    from cuberay.platform.spec.resources import format_resources

    return format_resources(res)
