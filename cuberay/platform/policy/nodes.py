"""One node as admission sees it: what it has, what is free, per card, and how many workers fit on it.

Accelerators (GPU, NPU, ...) are tracked per physical card, because Ray gives a
fractional request a share of ONE card and a whole request whole cards; a node
with 0.5 free on each of two cards cannot take a 1-GPU worker. The ledger
(:mod:`cuberay.platform.policy.ledger`) keeps these nodes up to date; placement,
reservation, resizing and fragmentation scoring count workers on them here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from cuberay.platform.spec.resources import WorkerRequest

_EPS = 1e-9


@dataclass(slots=True)
class NodeState:
    """One node: what it has, what is free, and its labels."""

    id: str
    capacity: dict[str, float]
    labels: dict[str, str]
    free: dict[str, float]
    card_resource: str | None = None
    cards: list[float] = field(default_factory=list)
    alive: bool = True
    full_cards: int = 0  # cards with nothing allocated; kept in step with ``cards``

    def recount(self) -> None:
        self.full_cards = sum(1 for c in self.cards if c >= 1.0 - _EPS)

    def utilization(self, name: str) -> float:
        cap = self.capacity.get(name, 0.0)
        return 0.0 if cap <= 0 else 1.0 - self.free.get(name, 0.0) / cap

    def matches(self, selector: Mapping[str, str]) -> bool:
        labels = self.labels
        for key, want in selector.items():
            have = labels.get(key)
            if want.startswith("in(") and want.endswith(")"):
                if have not in {v.strip() for v in want[3:-1].split(",")}:
                    return False
            elif have != want:
                return False
        return True


def pick_cards(cards: list[float], amount: float) -> tuple[tuple[int, float], ...]:
    """Choose cards for one worker: whole free cards for amount >= 1, else the fullest card that fits."""
    if amount >= 1.0 - _EPS:
        need = int(round(amount))
        whole = [i for i, c in enumerate(cards) if c >= 1.0 - _EPS][:need]
        return tuple((i, 1.0) for i in whole) if len(whole) == need else ()
    best, best_free = -1, 2.0
    for i, c in enumerate(cards):
        if c + _EPS >= amount and c < best_free:
            best, best_free = i, c
    return ((best, amount),) if best >= 0 else ()


def workers_that_fit(node: NodeState, req: WorkerRequest, reserved: Mapping[str, float] | None = None,
                     empty: bool = False) -> int:
    """How many copies of ``req`` fit on ``node`` now (or on the empty node when ``empty``).

    ``reserved`` amounts (held for a blocked job) are not available.
    """
    return FitCounter(req, empty)(node, reserved)


class FitCounter:
    """``workers_that_fit`` for one request over many nodes, with the request's terms prepared once.

    This is the scheduler's innermost loop (every candidate job against every node).
    """

    __slots__ = ("items", "card", "need", "empty", "whole_cards")

    def __init__(self, req: WorkerRequest, empty: bool = False) -> None:
        self.card = req.card_resource
        self.need = req.resources.get(self.card, 0.0) if self.card else 0.0
        self.items = [(k, v) for k, v in req.resources.items() if v > 0 and k != self.card]
        self.empty = empty
        # Whole cards and nothing else (most GPU traces): the count is full_cards // whole_cards.
        self.whole_cards = int(round(self.need)) if (self.need >= 1.0 - _EPS and not self.items and not empty) else 0

    def __call__(self, node: NodeState, reserved: Mapping[str, float] | None = None) -> int:
        free = node.capacity if self.empty else node.free
        count = 1 << 30
        for k, v in self.items:
            avail = free.get(k, 0.0)
            if reserved:
                avail -= reserved.get(k, 0.0)
            n = int((avail + _EPS) / v)
            if n < count:
                count = n
                if count <= 0:
                    return 0
        need = self.need
        if need > 0:
            if node.card_resource != self.card:
                return 0
            held = reserved.get(self.card, 0.0) if reserved else 0.0
            skip = int(held + 1 - _EPS) if held > 0 else 0
            if need >= 1.0 - _EPS:
                whole = (len(node.cards) if self.empty else node.full_cards) - skip
                n = whole // int(round(need)) if whole > 0 else 0
            else:
                cards = [1.0] * len(node.cards) if self.empty else node.cards
                shares = sorted(cards, reverse=True)[skip:] if skip else cards
                n = sum(int((c + _EPS) / need) for c in shares)
            if n < count:
                count = n
        return max(count, 0)
