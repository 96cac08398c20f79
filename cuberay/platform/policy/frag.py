"""Fragmentation-aware placement: the node whose GPU fragmentation grows least (FGD).

The idea of Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
Workloads with Fragmentation Gradient Descent" (USENIX ATC'23): a node's free
GPU capacity is *fragmented* for a kind of task when that task cannot use it
(the node lacks the CPU or memory the task needs, or the free share of every
card is below the task's fraction, or a whole-card task finds only partly used
cards). Weighted by how often each kind of task has been asked for recently,
that gives a node's expected fragmentation; a worker goes where placing it
grows the expected fragmentation least.

The mix of recent requests (:class:`WorkloadMix`) lives on the ledger and is
updated on every submission; the class table the scorer reads is rebuilt from
it every few hundred requests, never per decision. Scores of identical node
states are memoised until the table changes, so scoring a bounded set of
candidate nodes costs microseconds each.

Cards are chosen as the ledger chooses them (:func:`pick_cards`: whole free
cards, or the fullest card that holds the share), so the score describes the
allocation that will really be made.
"""

from __future__ import annotations

from typing import Sequence

from cuberay.platform.policy.ledger import NodeState, pick_cards
from cuberay.platform.policy.mix import TaskClass, WorkloadMix
from cuberay.platform.spec.resources import CPU, MEMORY, WorkerRequest

_EPS = 1e-9


def fragmentation(cards: Sequence[float], cpu: float, memory: float, card: str | None,
                  classes: Sequence[TaskClass]) -> float:
    """Expected GPU capacity (in cards) of a node state that the mix's tasks cannot use.

    ``cards`` are the free shares of the node's cards; ``cpu``/``memory`` its free amounts.
    """
    free = sum(cards)
    if free <= _EPS:
        return 0.0
    total = 0.0
    for c in classes:
        if c.card != card or c.cpus > cpu + _EPS or c.memory > memory + _EPS:
            total += c.weight * free  # the task cannot run here at all: every free share is lost to it
            continue
        d = c.gpus
        if d < 1.0 - _EPS:
            if max(cards) + _EPS < d:
                total += c.weight * free
            else:
                total += c.weight * sum(x for x in cards if x + _EPS < d)
        else:
            whole = sum(1 for x in cards if x >= 1.0 - _EPS)
            if whole < d - _EPS:
                total += c.weight * free
            else:
                total += c.weight * sum(x for x in cards if x < 1.0 - _EPS)
    return total


class FragScorer:
    """Scores placing ``k`` workers of one request on candidate nodes; lower is better."""

    __slots__ = ("req", "classes", "memo", "card", "need", "cpu", "mem")

    def __init__(self, req: WorkerRequest, mix: WorkloadMix | None, memo: dict | None = None) -> None:
        self.req = req
        self.classes = (mix or WorkloadMix()).classes_for(req)
        self.memo = memo if memo is not None else {}
        self.card = req.card_resource
        self.need = req.resources.get(self.card, 0.0) if self.card else 0.0
        self.cpu = req.resources.get(CPU, 0.0)
        self.mem = req.resources.get(MEMORY, 0.0)

    def delta(self, node: NodeState, k: int = 1) -> tuple[float, float, float]:
        """(growth of expected fragmentation, GPU left, CPU left) after ``k`` workers go to ``node``.

        The second and third terms break ties best-fit style: the fuller node wins. Nodes in the
        same state score the same, so the answer is memoised per state and request.
        """
        free = node.free
        state = (node.card_resource, tuple(node.cards), free.get(CPU, 0.0), free.get(MEMORY, 0.0))
        key = (self.req, k, state)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._delta(state, k)
        return hit

    def _delta(self, state: tuple, k: int) -> tuple[float, float, float]:
        card, cards_t, cpu, mem = state
        cards = list(cards_t)
        before = fragmentation(cards, cpu, mem, card, self.classes)
        for _ in range(k):
            if self.need > 0 and card == self.card:
                for idx, amount in pick_cards(cards, self.need):
                    cards[idx] -= amount
            cpu -= self.cpu
            mem -= self.mem
        after = fragmentation(cards, cpu, mem, card, self.classes)
        return round(after - before, 9), round(sum(cards), 9), cpu


def frag_memo(ledger_cache: dict, mix: WorkloadMix | None) -> dict:
    """The memo of node-state scores for the current class table (dropped when the table changes)."""
    version = mix.version if mix is not None else -1
    key = ("frag-memo", id(mix))
    held = ledger_cache.get(key)
    if held is None or held[0] != version or len(held[1]) > 200_000:
        held = ledger_cache[key] = (version, {})
    return held[1]
