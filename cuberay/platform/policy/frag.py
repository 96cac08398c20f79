"""Fragmentation-aware placement: the node whose GPU fragmentation grows least (FGD).

The idea of Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
Workloads with Fragmentation Gradient Descent" (USENIX ATC'23): a node's free
GPU capacity is *fragmented* for a kind of task when that task cannot use it
(the node lacks the CPU or memory the task needs, or the free share of every
card is below the task's fraction, or a whole-card task finds only partly used
cards). Weighted by how often each kind of task has been asked for recently,
that gives a node's expected fragmentation; a worker goes where placing it
grows the expected fragmentation least.

That measure looks one task ahead: a node short of CPUs for its cards counts
as fragmented only once it cannot take a single task more. A second term
(:func:`unfilled`) looks further: the GPU capacity each kind of task would
leave unused if the node were filled with copies of it (eight free cards and
40 free CPUs hold five 8-CPU one-card tasks, so three cards are lost to that
kind). It steers CPU-heavy tasks to nodes with CPUs to spare while there is
still time to, which is where most of the unallocated GPUs of a shared cluster
are lost (cards on nodes whose CPUs are gone).

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

from cuberay.platform.policy.mix import TaskClass, WorkloadMix
from cuberay.platform.policy.nodes import NodeState, pick_cards
from cuberay.platform.spec.resources import CPU, MEMORY, WorkerRequest

_EPS = 1e-9
# Weight of :func:`unfilled` beside the one-task fragmentation in a node's score. Chosen on the GPU-sharing
# benchmark at 1/5 scale, seeds 1-5, mean allocation at 100% demand: 0 -> 96.2%, 0.1 -> 97.9%,
# 0.25 -> 98.1%, 1 -> 97.8% (benchmarks/RESULTS.md).
UNFILLED_WEIGHT = 0.25


def fragmentation(cards: Sequence[float], cpu: float, memory: float, card: str | None,
                  classes: Sequence[TaskClass]) -> float:
    """Expected GPU capacity (in cards) of a node state that the mix's tasks cannot use.

    ``cards`` are the free shares of the node's cards; ``cpu``/``memory`` its free amounts.
    """
    return _measures(cards, cpu, memory, card, classes)[0]


def unfilled(cards: Sequence[float], cpu: float, memory: float, card: str | None,
             classes: Sequence[TaskClass]) -> float:
    """Expected GPU capacity (in cards) left unused if the node were filled with copies of each kind of task.

    A kind fits as many copies as both its cards and its CPUs and memory allow; the
    free capacity those copies do not take is lost to it.
    """
    return _measures(cards, cpu, memory, card, classes)[1]


def node_loss(cards: Sequence[float], cpu: float, memory: float, card: str | None,
              classes: Sequence[TaskClass]) -> float:
    """A node state's score: its expected fragmentation plus the weighted :func:`unfilled` capacity."""
    frag, left = _measures(cards, cpu, memory, card, classes)
    return frag + UNFILLED_WEIGHT * left


def _measures(cards: Sequence[float], cpu: float, memory: float, card: str | None,
              classes: Sequence[TaskClass]) -> tuple[float, float]:
    """(:func:`fragmentation`, :func:`unfilled`) in one pass over the classes (the scorer's inner loop)."""
    free = sum(cards)
    if free <= _EPS:
        return 0.0, 0.0
    whole = sum(1 for x in cards if x >= 1.0 - _EPS)
    parts = [x for x in cards if _EPS < x < 1.0 - _EPS]  # whole cards hold any share; empty ones nothing
    frag = left = 0.0
    for c in classes:
        w = c.weight
        if c.card != card:
            frag += w * free
            left += w * free
            continue
        d = c.gpus
        share = d < 1.0 - _EPS
        copies = (whole * int(1.0 / d + _EPS) + sum(int((x + _EPS) / d) for x in parts)) if share \
            else whole // int(round(d))
        if c.cpus > _EPS:
            copies = min(copies, int((cpu + _EPS) / c.cpus))
        if c.memory > _EPS:
            copies = min(copies, int((memory + _EPS) / c.memory))
        if copies == 0:  # not even one fits: every free share is lost to this kind
            lost = free
        else:  # shares cannot use remainders smaller than themselves; whole cards no partly used card
            lost = sum(x for x in parts if x + _EPS < d) if share else free - whole
        frag += w * lost
        left += w * (free - copies * d)
    return frag, left


class FragScorer:
    """Scores placing ``k`` workers of one request on candidate nodes; lower is better."""

    __slots__ = ("req", "classes", "table", "memo", "card", "need", "cpu", "mem")

    def __init__(self, req: WorkerRequest, mix: WorkloadMix | None, memo: dict | None = None) -> None:
        self.req = req
        mix = mix or WorkloadMix()
        self.classes = mix.classes_for(req)
        self.table = None if mix.classes else req  # before the mix has a table the request is its own
        self.memo = memo if memo is not None else {}
        self.card = req.card_resource
        self.need = req.resources.get(self.card, 0.0) if self.card else 0.0
        self.cpu = req.resources.get(CPU, 0.0)
        self.mem = req.resources.get(MEMORY, 0.0)

    def delta(self, node: NodeState, k: int = 1) -> tuple[float, float, float]:
        """(growth of the node's loss, GPU left, CPU left) after ``k`` workers go to ``node``.

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
        before = self._loss(state)
        for _ in range(k):
            if self.need > 0 and card == self.card:
                for idx, amount in pick_cards(cards, self.need):
                    cards[idx] -= amount
            cpu -= self.cpu
            mem -= self.mem
        after = node_loss(cards, cpu, mem, card, self.classes)
        return round(after - before, 9), round(sum(cards), 9), cpu

    def _loss(self, state: tuple) -> float:
        """A node state's loss before placing: the same for every request, so memoised per state."""
        key = (self.table, state)
        hit = self.memo.get(key)
        if hit is None:
            card, cards, cpu, mem = state
            hit = self.memo[key] = node_loss(cards, cpu, mem, card, self.classes)
        return hit


def frag_memo(ledger_cache: dict, mix: WorkloadMix | None) -> dict:
    """The memo of node-state scores for the current class table (dropped when the table changes)."""
    version = mix.version if mix is not None else -1
    key = ("frag-memo", id(mix))
    held = ledger_cache.get(key)
    if held is None or held[0] != version or len(held[1]) > 200_000:
        held = ledger_cache[key] = (version, {})
    return held[1]
