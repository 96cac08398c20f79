"""How spread out a replay's gangs were placed, and what that cost them (:mod:`.distance`).

Each start (and each resize) of a gang is measured against the topology: the
narrowest domain holding all its workers, and the narrowest one that could on
the empty cluster (its ideal). Gangs that no host holds ("multi-host") are
counted per level: the share of their starts inside one domain of it.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.nodes import FitCounter
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.topology import Topology
from cuberay.platform.sim.distance import DistanceCost, ideal_depth
from cuberay.platform.sim.trace import TraceJob
from cuberay.platform.spec.resources import WorkerRequest


class Spread:
    """The distance cost of each placement, and counts of where multi-host gangs landed."""

    def __init__(self, ledger: Ledger, distance: DistanceCost | None) -> None:
        self.ledger = ledger
        self.distance = distance
        self._ideal: dict[tuple[WorkerRequest, int], int] = {}
        self.starts = 0
        self.factor_sum = 0.0
        self.multi_host = 0
        self.inside: Counter[str] = Counter()
        self._topo: Topology | None = None

    @property
    def topo(self) -> Topology:
        """The ledger's levels that some node carries a label for. A level no node is labelled with (the RDMA
        domain on a cluster without RDMA, say) holds no gang, so crossing it costs nothing and counts nowhere."""
        if self._topo is None:
            topo, nodes = self.ledger.topology, self.ledger.nodes.values()
            carried = {label for n in nodes for label in n.labels}
            self._topo = Topology(tuple(lv for lv in topo.levels if lv[1] in carried), topo.fill)
        return self._topo

    def ideal(self, worker: WorkerRequest, workers: int) -> int:
        key = (worker, workers)
        hit = self._ideal.get(key)
        if hit is None:
            count = FitCounter(worker, empty=True)
            nodes = list(self.ledger.nodes.values())
            per_node = {n.id: count(n) for n in nodes}
            hit = self._ideal[key] = ideal_depth(nodes, self.topo, per_node, workers)
        return hit

    def factor(self, job: JobRequest, trace: TraceJob, node_ids: Sequence[str]) -> tuple[float, int, int]:
        """(run-time multiplier, span depth, ideal depth) of a placement."""
        topo = self.topo
        span = topo.span(self.ledger.nodes[n] for n in set(node_ids))
        ideal = self.ideal(job.worker, len(node_ids))
        if self.distance is None:
            return 1.0, span, ideal
        return self.distance.slowdown(topo, span, ideal, dict(trace.slowdown) if trace.slowdown else None), span, ideal

    def started(self, job: JobRequest, trace: TraceJob, node_ids: Sequence[str]) -> float:
        factor, span, ideal = self.factor(job, trace, node_ids)
        topo = self.topo
        self.starts += 1
        self.factor_sum += factor
        if ideal < topo.host_depth:
            self.multi_host += 1
            for depth, name in enumerate(topo.names[:-1]):
                if span >= depth:
                    self.inside[name] += 1
        return factor

    def resized(self, job: JobRequest, trace: TraceJob, node_ids: Sequence[str]) -> float:
        return self.factor(job, trace, node_ids)[0]

    def report(self) -> dict[str, float]:
        out: dict[str, float] = {"multi_host_starts": float(self.multi_host),
                                 "mean_slowdown": self.factor_sum / self.starts if self.starts else 1.0}
        for name in self.topo.names[:-1]:
            out[f"in_one_{name}"] = self.inside[name] / self.multi_host if self.multi_host else 0.0
        return out
