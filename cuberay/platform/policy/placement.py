"""Gang placement policies: choose one node per worker, or say the gang does not fit.

All or nothing: a policy returns a node for every worker or ``None``.

- ``pack``: fewest nodes, then most-allocated (busiest) nodes first, so cards of
  one job share a node (an 8-GPU all-reduce inside one node is far faster than
  across nodes) and free nodes stay whole for big gangs.
- ``spread``: least-allocated first, re-scored after every worker (CubeStudio's
  RequestedToCapacityRatio shape: utilisation 0 -> score 10, 100 -> 0).
- ``strict_pack``: every worker on one node. ``strict_spread``: distinct nodes.
- ``frag``: the node where the worker grows the cluster's expected GPU
  fragmentation least under the recent request mix (:mod:`.frag`); a gang that
  no single node holds packs.
- ``best_fit``: the node left with the least free GPU and CPU.
- ``random``: any node that fits (a baseline for comparisons).
- ``auto``: jobs that use accelerators use ``frag``; so does a CPU-only job of
  one worker (spreading is about a gang's workers, not about where one pod
  lands: spread single pods leave no node with room for a large one). CPU-only
  gangs spread. CPU-only work keeps to nodes without accelerators while those
  can hold it, and once those are full goes where it strands the fewest cards
  (``frag``); on a cluster without such nodes gangs spread; RDMA jobs prefer
  nodes of one ``cuberay.io/rdma-domain``.

A job with a locality (``topology: {required|preferred: LEVEL}``) is placed with
its policy inside the domains :mod:`.topology` chooses.

On a large cluster (``INDEX_MIN_NODES``) the nodes are read from the ledger's
free-capacity index (:mod:`.node_index`), a bounded number per decision.
"""

from __future__ import annotations

import heapq
import random
from typing import Iterable, Mapping, Sequence

from cuberay.platform.policy.frag import FragScorer, frag_memo
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.node_index import INDEX_MIN_NODES
from cuberay.platform.policy.nodes import FitCounter, NodeState
from cuberay.platform.policy.topology import (
    KUEUE,
    LABEL_RDMA_DOMAIN,
    Locality,
    Topology,
    place_kueue,
    place_near,
)
from cuberay.platform.spec.common import Placement  # noqa: F401 (policy code names it from here)
from cuberay.platform.spec.resources import CPU, MEMORY, WorkerRequest

CANDIDATES = 32          # nodes that fit, read from the index before a policy chooses among them
FRAG_CANDIDATES = 96     # frag scores more of them, ...
FRAG_PER_BUCKET = 4      # ... a few of each kind of node state
RANDOM_DRAWS = 64        # ``random`` draws this many nodes before it lists every node that fits
_EPS = 1e-9

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


def place(nodes: Ledger | Iterable[NodeState], req: WorkerRequest, count: int, policy: Placement | str,
          *, reserved: Reserved | None = None, empty: bool = False, near: Locality | None = None,
          topology: Topology | None = None) -> list[str] | None:
    """Return one node id per worker, or ``None`` if the gang cannot be placed now.

    ``nodes`` is the ledger (then a large cluster is read through its free-capacity
    index, and ``frag`` weighs the ledger's recent request mix) or any nodes.
    ``reserved`` holds amounts other jobs may not use; ``empty`` places on the
    nodes as if nothing ran (the "could it ever fit" check). ``near`` is the
    job's locality, over ``topology`` (default: the ledger's).
    """
    asked = Placement(policy)
    policy = asked.resolve(req)
    if asked is Placement.AUTO and policy is Placement.SPREAD and count == 1:
        policy = Placement.FRAG  # one pod: the node it strands least on (best fit on plain nodes), not the emptiest
    ledger = nodes if isinstance(nodes, Ledger) else None
    topo = topology if topology is not None else (ledger.topology if ledger is not None else None)
    if near is None and topo is not None and policy in _FILLING:
        near = topo.fill_level
    near = near if topo is not None else None
    counter = FitCounter(req, empty)
    avoid_gpu = asked in (Placement.AUTO, Placement.FRAG) and not req.card_resource
    if policy is Placement.RANDOM and ledger is not None and count == 1 and not empty and near is None:
        drawn = _draw(ledger, req, counter, reserved, avoid_gpu)
        if drawn is not None:
            return [drawn]
    if ledger is not None and not empty and len(ledger.nodes) >= INDEX_MIN_NODES:
        # Domains are compared whole (every node with room): the index's few tightest candidates may all lie
        # outside every domain of the level, and a required job would then wait with room elsewhere.
        if near is not None and (count > 1 or near.required):
            fits = _scan_fits(_indexed_nodes(ledger, req), req, counter, reserved)
        else:
            fits = _indexed_fits(ledger, req, count, policy, counter, reserved, avoid_gpu)
    else:
        fits = _scan_fits(ledger.nodes.values() if ledger is not None else nodes, req, counter, reserved)
    if sum(k for _, k in fits) < count:
        return None
    keys = score_key(req)

    def base(subset, n: int) -> list[str] | None:
        pol = policy
        if avoid_gpu:  # CPU-only work stays off accelerator nodes while the others (of this domain) hold it
            subset, pol = _plain_first(subset, n, pol, asked)
        if req.rdma_fabric and pol in (Placement.PACK, Placement.FRAG):
            return _pack_rdma(subset, req, n, keys, empty)
        if pol is Placement.FRAG:
            mix = ledger.mix if ledger is not None else None
            memo = frag_memo(ledger.cache, mix) if ledger is not None else None
            return _frag(subset, req, n, keys, empty, FragScorer(req, mix, memo))
        if pol is Placement.RANDOM:
            return _random(subset, n, ledger.rng if ledger is not None else random.Random(0))
        return _POLICIES[pol](subset, req, n, keys, empty)

    if near is None:
        return base(fits, count)
    if near.algorithm == KUEUE:
        if avoid_gpu:
            fits, _ = _plain_first(fits, count, policy, asked)
        return place_kueue(fits, count, near, topo)  # type: ignore[arg-type]
    per = req.resources.get(keys[0], 0.0)

    def free_left(members, placed: list[str]) -> float:
        have = sum((n.capacity if empty else n.free).get(keys[0], 0.0) for n, _ in members)
        return round(have - per * len(placed), 9)

    return place_near(fits, count, near, topo, base, free_left)  # type: ignore[arg-type]


def _plain_first(fits, count: int, policy: Placement, asked: Placement) -> tuple[list, Placement]:
    """CPU-only work keeps to the nodes without accelerators while they hold it; once they are full, ``auto``
    goes where it strands the fewest cards (``frag``). Applied per domain when the job has a locality, so a gang
    that one rack's accelerator nodes hold is not refused because no rack's plain nodes do."""
    plain = [(n, k) for n, k in fits if not n.card_resource]
    if sum(k for _, k in plain) >= count:
        return plain, policy
    if asked is Placement.AUTO and plain:
        return list(fits), Placement.FRAG
    return list(fits), policy


def _draw(ledger: Ledger, req: WorkerRequest, counter: FitCounter, reserved: Reserved | None,
          avoid_gpu: bool) -> str | None:
    """A node drawn uniformly from those that fit one worker (draws until one fits; None after many misses)."""
    key = ("node-list",)
    ids = ledger.cache.get(key)
    if ids is None:
        ids = ledger.cache[key] = list(ledger.nodes)
    selector = req.node_selector()
    for _ in range(RANDOM_DRAWS):
        node = ledger.nodes[ids[ledger.rng.randrange(len(ids))]]
        if not node.alive or (selector and not node.matches(selector)) or (avoid_gpu and node.card_resource):
            continue
        if counter(node, reserved.get(node.id) if reserved else None) > 0:
            return node.id
    return None  # the caller falls back to choosing among the nodes that fit (from the index when large)


def _scan_fits(nodes: Iterable[NodeState], req: WorkerRequest, counter: FitCounter,
               reserved: Reserved | None) -> list[tuple[NodeState, int]]:
    """Every node that holds at least one worker now, with how many."""
    selector = req.node_selector()
    fits: list[tuple[NodeState, int]] = []
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
    return fits


def _indexed_nodes(ledger: Ledger, req: WorkerRequest) -> Iterable[NodeState]:
    """Every node the free-capacity index says might hold one worker of ``req``."""
    counter = FitCounter(req)
    return ledger.index.nodes(ledger.index.keys_for(counter.card, counter.need, req.resources.get(CPU, 0.0)))


def _indexed_fits(ledger: Ledger, req: WorkerRequest, count: int, policy: Placement, counter: FitCounter,
                  reserved: Reserved | None, avoid_gpu: bool) -> list[tuple[NodeState, int]]:
    """A bounded set of nodes that fit, read from the ledger's free-capacity index.

    First nodes that might hold the whole gang, in the order the policy prefers
    (tightest first; loosest first to spread), until ``CANDIDATES`` of them fit
    (``frag``: a few of every bucket, so every kind of node state is scored);
    then, only if those cannot hold the gang, more nodes until they can.
    """
    index = ledger.index
    need, cpus = counter.need, req.resources.get(CPU, 0.0)
    loose_first = policy in (Placement.SPREAD, Placement.STRICT_SPREAD)

    def ordered(keys: list[tuple], loose: bool) -> list[tuple]:
        keys.sort(key=index.room, reverse=loose)
        if avoid_gpu:
            keys.sort(key=lambda k: k[0] != "")  # stable: nodes without cards first
        return keys

    one_node = count > 1 and policy in (Placement.PACK, Placement.STRICT_PACK, Placement.FRAG, Placement.BEST_FIT)
    if one_node:  # first the nodes that might hold the whole gang
        first = ordered(index.keys_for(counter.card, need * count if need >= 1.0 - _EPS else need,
                                       cpus * count), loose_first)
    else:
        first = ordered(index.keys_for(counter.card, need, cpus), loose_first)
    frag = policy is Placement.FRAG
    limit = FRAG_CANDIDATES if frag else CANDIDATES
    selector = req.node_selector()
    fits: list[tuple[NodeState, int]] = []
    seen: set[str] = set()
    room = 0

    def take(keys: list[tuple], per_bucket: int | None, enough) -> None:
        nonlocal room
        for node in index.nodes(keys, per_bucket):
            if node.id in seen or not node.alive or (selector and not node.matches(selector)):
                continue
            seen.add(node.id)
            k = counter(node, reserved.get(node.id) if reserved else None)
            if k > 0:
                fits.append((node, k))
                room += k
                if enough():
                    return

    take(first, FRAG_PER_BUCKET if frag else None, lambda: len(fits) >= limit)
    wanted = count if policy is Placement.STRICT_SPREAD else 1
    if room < count or len(fits) < wanted:
        # A gang no node holds: the roomiest nodes first, so that it spans as few as it can.
        rest = ordered(index.keys_for(counter.card, need, cpus), loose_first or one_node)
        take(rest, None, lambda: room >= count and len(fits) >= wanted)
    return fits


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


def _frag(fits, req, count, keys, empty, scorer: FragScorer) -> list[str] | None:
    """The node where the gang's workers grow expected fragmentation least; gangs no node holds pack."""
    if empty:
        return _pack(fits, req, count, keys, empty)  # "could it ever fit": any placement answers
    best = None
    for node, k in fits:
        if k >= count:
            grow, gpu_left, cpu_left = scorer.delta(node, count)
            cand = (grow, gpu_left, cpu_left, node.id)
            if best is None or cand < best:
                best = cand
    if best is not None:
        return [best[3]] * count
    return _pack(fits, req, count, keys, empty)


def _best_fit(fits, req, count, keys, empty) -> list[str] | None:
    """The node left with the least free (sum of free fractions over GPU and CPU) that holds the gang."""
    best = None
    for node, k in fits:
        if k >= count:
            left = 0.0
            for name in (req.card_resource or CPU, CPU) if req.card_resource else (CPU, MEMORY):
                cap = node.capacity.get(name, 0.0)
                if cap > 0:
                    have = cap if empty else node.free.get(name, 0.0)
                    left += (have - count * req.resources.get(name, 0.0)) / cap
            cand = (round(left, 9), node.id)
            if best is None or cand < best:
                best = cand
    return [best[1]] * count if best else _pack(fits, req, count, keys, empty)


def _random(fits, count: int, rng: random.Random) -> list[str] | None:
    """Each worker on a node drawn uniformly from those with room left (a baseline for comparisons)."""
    pool = [[node.id, k] for node, k in fits]
    out: list[str] = []
    while len(out) < count and pool:
        i = rng.randrange(len(pool))
        out.append(pool[i][0])
        pool[i][1] -= 1
        if pool[i][1] == 0:
            pool[i] = pool[-1]
            pool.pop()
    return out if len(out) == count else None


_FILLING = (Placement.PACK, Placement.FRAG, Placement.BEST_FIT)  # policies that fill a domain before the next

_POLICIES = {
    Placement.PACK: _pack,
    Placement.SPREAD: _spread,
    Placement.STRICT_PACK: _strict_pack,
    Placement.STRICT_SPREAD: _strict_spread,
    Placement.BEST_FIT: _best_fit,
}
