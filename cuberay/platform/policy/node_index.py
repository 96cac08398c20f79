"""Nodes indexed by free capacity, kept by the ledger on every allocate and release.

Placement on a large cluster must not look at every node. Each node sits in one
bucket keyed by a coarse summary of what it has free: its accelerator resource,
how many whole cards are free, the largest free share of a partly used card
(in twentieths) and its free CPUs (in quarter octaves). A bucket's key bounds
what any node in it can hold, so a request skips every bucket that cannot take
one worker and reads nodes only from the others, in the order the placement
policy prefers (tightest first to pack, loosest first to spread). The bucket
count depends on the shapes of the nodes, not on how many there are.

The bound is one-sided: a node in a matching bucket may still not fit (memory,
custom resources, labels, a reservation), so placement checks each node it
reads exactly; a node in a skipped bucket never fits.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterator

from cuberay.platform.spec.resources import CPU

if TYPE_CHECKING:
    from cuberay.platform.policy.nodes import NodeState

_EPS = 1e-9
_NO_PART = -1
# Below this many nodes placement scans every node (cheap, and keeps the exact global order, ties by node id),
# so the ledger refreshes the index only when someone reads it instead of on every allocate and release.
INDEX_MIN_NODES = 512


def _cpu_q(free: float) -> int:
    return int(4 * math.log2(max(free, 0.0) + 1.0) + _EPS)


def _cpu_upper(q: int) -> float:
    """The most free CPU a node in CPU bucket ``q`` can have."""
    return 2.0 ** ((q + 1) / 4) - 1.0


def bucket_key(node: NodeState) -> tuple:
    part = _NO_PART
    for c in node.cards:
        if _EPS < c < 1.0 - _EPS:
            q = int(c * 20 + _EPS)
            if q > part:
                part = q
    return (node.card_resource or "", node.full_cards, part, _cpu_q(node.free.get(CPU, 0.0)))


class NodeIndex:
    """Buckets of nodes by free capacity; updated by the ledger after each change to a node."""

    def __init__(self) -> None:
        self.buckets: dict[tuple, dict[str, NodeState]] = {}
        self.where: dict[str, tuple] = {}

    def update(self, node: NodeState) -> None:
        key = bucket_key(node)
        old = self.where.get(node.id)
        if old == key:
            return
        if old is not None:
            self._drop(node.id, old)
        self.buckets.setdefault(key, {})[node.id] = node
        self.where[node.id] = key

    def remove(self, node_id: str) -> None:
        old = self.where.pop(node_id, None)
        if old is not None:
            self._drop(node_id, old)

    def _drop(self, node_id: str, key: tuple) -> None:
        bucket = self.buckets[key]
        del bucket[node_id]
        if not bucket:
            del self.buckets[key]

    def keys_for(self, card: str | None, need: float, cpus: float) -> list[tuple]:
        """Bucket keys whose nodes might hold one worker of ``need`` cards of ``card`` and ``cpus`` CPUs."""
        out = []
        for key in self.buckets:
            res, full, part, cq = key
            if cpus > _EPS and _cpu_upper(cq) + _EPS < cpus:
                continue
            if need > 0:
                if res != card:
                    continue
                if need >= 1.0 - _EPS:
                    if full + _EPS < round(need):
                        continue
                elif full == 0 and (part + 1) / 20 + _EPS < need:
                    continue
            out.append(key)
        return out

    @staticmethod
    def room(key: tuple) -> tuple:
        """How much a bucket's nodes have free, for ordering: cards first, then CPU."""
        _, full, part, cq = key
        return (full + max(part, 0) / 20, cq)

    def nodes(self, keys: list[tuple], per_bucket: int | None = None) -> Iterator[NodeState]:
        """Nodes of ``keys`` in that order, at most ``per_bucket`` of each."""
        for key in keys:
            bucket = self.buckets.get(key)
            if not bucket:
                continue
            if per_bucket is None:
                yield from bucket.values()
            else:
                for i, node in enumerate(bucket.values()):
                    if i >= per_bucket:
                        break
                    yield node
