"""Topology: named levels of closeness (block, rack, ..., host) read from node labels, and gangs placed by them.

A :class:`Topology` lists levels from widest to narrowest, each a node label
(``cuberay.io/block``, ``cuberay.io/rack``); the host is the narrowest level,
always there. A *domain* of a level is the set of nodes that share the values
of that level's label and of every wider one (rack ``r1`` of block ``b1`` is
not rack ``r1`` of block ``b2``). A node without a level's label belongs to no
domain of that level or of any narrower one but the host.

A job's :class:`Locality` asks for one level: ``required`` (the whole gang in
one domain of it, or it waits) or ``preferred`` (in one if any fits, else across
as few domains as possible, going up a level at a time). :func:`place_near`
places such a gang with the job's own placement policy inside the domains it
chooses (cuberay's rule: first what crosses the fewest levels, then the fewest
nodes, then the domain left with the least free); :func:`place_kueue` is
Kueue's documented algorithm (KEP-2724 "Computing the assignment": the lowest
level at or above the asked one where one domain fits, the best fit among
those domains, then ``BestFit`` down to the hosts: most free first, the last
domain of each level the tightest that holds the rest), the baseline the
simulator compares with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from cuberay.platform.policy.nodes import NodeState

HOST = "host"
HOST_LABEL = "ray.io/node-id"  # every ledger node has it (Ledger.add_node)
LABEL_RDMA_DOMAIN = "cuberay.io/rdma-domain"
REQUIRED, PREFERRED = "required", "preferred"
CUBERAY, KUEUE = "cuberay", "kueue"

Fits = Sequence[tuple[NodeState, int]]  # nodes with how many workers each holds now
Base = Callable[[Fits, int], "list[str] | None"]  # the job's own policy over some nodes, for n workers


@dataclass(frozen=True, slots=True)
class Topology:
    """Levels of closeness, widest first, each ``(name, node label)``; the host is below the last one.

    ``fill``: jobs without a locality of their own are placed as if they preferred the narrowest level (their
    policy inside the fullest domain that holds them), so that emptier domains stay whole for the gangs that
    ask for one.
    """

    levels: tuple[tuple[str, str], ...] = ()
    fill: bool = False

    @property
    def fill_level(self) -> Locality | None:
        """The locality ``fill`` gives jobs without one (None without ``fill`` or levels)."""
        return Locality(PREFERRED, self.levels[-1][0]) if self.fill and self.levels else None

    @property
    def names(self) -> tuple[str, ...]:
        return (*(name for name, _ in self.levels), HOST)

    @property
    def host_depth(self) -> int:
        return len(self.levels)

    def depth(self, level: str) -> int | None:
        """Index of ``level`` (0 = widest; the host is last), None if there is no such level."""
        names = self.names
        return names.index(level) if level in names else None

    def key(self, node: NodeState, depth: int) -> tuple[str, ...] | None:
        """The domain of ``node`` at ``depth``: its label values down to that level; None outside every domain."""
        if depth >= len(self.levels):
            return ("#" + node.id,)
        labels = node.labels
        out = []
        for _, label in self.levels[:depth + 1]:
            value = labels.get(label)
            if value is None:
                return None
            out.append(value)
        return tuple(out)

    def span(self, nodes: Iterable[NodeState]) -> int:
        """The narrowest depth at which one domain holds all ``nodes`` (-1: none, they cross the widest level)."""
        nodes = list(nodes)
        for depth in range(self.host_depth, -1, -1):
            keys = {self.key(n, depth) for n in nodes}
            if len(keys) == 1 and None not in keys:
                return depth
        return -1

    def describe(self, key: tuple[str, ...]) -> str:
        return key[0][1:] if key and key[0].startswith("#") else "/".join(key)


DEFAULT_TOPOLOGY = Topology((("rdma-domain", LABEL_RDMA_DOMAIN),))


@dataclass(frozen=True, slots=True)
class Locality:
    """A job's closeness: ``required`` or ``preferred`` inside one domain of ``level``.

    ``algorithm`` chooses who places it: ``cuberay`` (:func:`place_near`) or ``kueue`` (:func:`place_kueue`,
    the simulator's baseline).
    """

    mode: str
    level: str
    algorithm: str = CUBERAY

    def __post_init__(self) -> None:
        if self.mode not in (REQUIRED, PREFERRED):
            raise ValueError(f"topology mode {self.mode!r} is neither {REQUIRED} nor {PREFERRED}")

    @property
    def required(self) -> bool:
        return self.mode == REQUIRED

    def text(self) -> str:
        return f"{self.mode}: {self.level}"


def groups(fits: Fits, topo: Topology, depth: int) -> dict[tuple[str, ...], list[tuple[NodeState, int]]]:
    """The nodes of ``fits`` by their domain at ``depth`` (depth -1: one group of them all)."""
    if depth < 0:
        return {(): list(fits)}
    out: dict[tuple[str, ...], list[tuple[NodeState, int]]] = {}
    for node, k in fits:
        key = topo.key(node, depth)
        if key is not None:
            out.setdefault(key, []).append((node, k))
    return out


def room(members: Fits) -> int:
    return sum(k for _, k in members)


def place_near(fits: Fits, count: int, loc: Locality, topo: Topology, base: Base,
               free_left: Callable[[Fits, list[str]], float]) -> list[str] | None:
    """cuberay's placement of a gang with a locality (see the module doc); None if it cannot be placed now.

    ``base`` places with the job's own policy inside a set of nodes; ``free_left`` is what a domain has free
    (in the job's scoring resource) once a placement took its share.
    """
    asked = topo.depth(loc.level)
    if asked is None:
        return None
    found = _inside_one(groups(fits, topo, asked), count, topo, base, free_left)
    if found is not None or loc.required:
        return found
    for depth in range(asked - 1, -2, -1):
        best = None
        for key, members in sorted(groups(fits, topo, depth).items()):
            if room(members) < count:
                continue
            parts = _fewest(members, depth + 1, asked, count, topo)
            placed = _place_parts(parts, base) if parts else None
            if placed is None:
                continue
            cand = (_domains_used(placed, members, topo, depth + 1, asked), len(set(placed)),
                    free_left(members, placed), key)
            if best is None or cand < best[0]:
                best = (cand, placed)
        if best is not None:
            return best[1]
    return base(fits, count)


def _inside_one(by_domain, count: int, topo: Topology, base: Base, free_left) -> list[str] | None:
    best = None
    for key, members in sorted(by_domain.items()):
        if room(members) < count:
            continue
        placed = base(members, count)
        if placed is None:
            continue
        nodes = {n.id: n for n, _ in members}
        cand = (-topo.span(nodes[i] for i in set(placed)), len(set(placed)), free_left(members, placed), key)
        if best is None or cand < best[0]:
            best = (cand, placed)
    return best[1] if best else None


def _domains_used(placed: list[str], members: Fits, topo: Topology, first: int, last: int) -> tuple[int, ...]:
    """How many domains of each level from ``first`` to ``last`` the placement touches (fewest first)."""
    nodes = {n.id: n for n, _ in members}
    used = [nodes[i] for i in set(placed)]
    return tuple(len({topo.key(n, d) for n in used}) for d in range(first, last + 1))


def _fewest(members: Fits, depth: int, last: int, count: int, topo: Topology,
            bestfit_last: bool = True) -> list[tuple[list[tuple[NodeState, int]], int]]:
    """Split ``count`` workers over as few domains at ``depth`` as possible, and so on down to ``last``.

    Most room first; the last domain of each level is the tightest that holds the rest (Kueue's BestFit).
    Returns (nodes of a domain at ``last``, workers there) pairs, or [] when the members cannot hold them.
    """
    if depth > last:
        return [(list(members), count)]
    ranked = sorted(groups(members, topo, depth).items(), key=lambda kv: (-room(kv[1]), kv[0]))
    out: list[tuple[list[tuple[NodeState, int]], int]] = []
    left = count
    for i, (key, group) in enumerate(ranked):
        have = room(group)
        if have >= left:
            if bestfit_last:
                key, group = min(((k, g) for k, g in ranked[i:] if room(g) >= left), key=lambda kv: (room(kv[1]), kv[0]))
            inner = _fewest(group, depth + 1, last, left, topo, bestfit_last)
            return out + inner if inner else []
        if have == 0:
            continue
        inner = _fewest(group, depth + 1, last, have, topo, bestfit_last)
        if not inner:
            return []
        out += inner
        left -= have
    return []


def _place_parts(parts, base: Base) -> list[str] | None:
    out: list[str] = []
    for members, share in parts:
        placed = base(members, share)
        if placed is None:
            return None
        out += placed
    return out


def place_kueue(fits: Fits, count: int, loc: Locality, topo: Topology) -> list[str] | None:
    """Kueue's TAS assignment of a gang (KEP-2724, BestFit profile): see the module doc."""
    asked = topo.depth(loc.level)
    if asked is None:
        return None
    host = topo.host_depth
    for depth in range(asked, -2, -1):
        fitting = [(key, members) for key, members in groups(fits, topo, depth).items() if room(members) >= count]
        if fitting:
            _, members = min(fitting, key=lambda kv: (room(kv[1]), kv[0]))
            parts = _fewest(members, depth + 1, host, count, topo)
            return [n.id for group, share in parts for n, _ in group[:1] for _ in range(share)] if parts else None
        if loc.required:
            return None
    return None


def closest(fits: Fits, count: int, topo: Topology, level: str) -> tuple[str, int] | None:
    """The domain of ``level`` that holds the most of the gang's workers now, as (its name, how many)."""
    depth = topo.depth(level)
    if depth is None:
        return None
    best = None
    for key, members in groups(fits, topo, depth).items():
        cand = (room(members), topo.describe(key))
        if best is None or cand[0] > best[0] or (cand[0] == best[0] and cand[1] < best[1]):
            best = cand
    return (best[1], best[0]) if best else None
