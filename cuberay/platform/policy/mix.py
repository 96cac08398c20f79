"""The mix of recent worker requests a cluster has seen: what the fragmentation scorer weighs.

Kept on the ledger and fed by every submission (``ClusterState.submit``), so the
placement scorer reads a ready table instead of recomputing it per decision.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from cuberay.platform.spec.resources import CPU, MEMORY, WorkerRequest

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class TaskClass:
    """One kind of GPU task of the recent mix: per-worker demand and its weight (share of requests)."""

    weight: float
    card: str
    gpus: float      # per worker: a share below 1 of one card, or whole cards
    cpus: float
    memory: float


def _class_key(req: WorkerRequest) -> tuple | None:
    card = req.card_resource
    if card is None:
        return None
    gpus = req.resources.get(card, 0.0)
    # Shares in steps of 0.05 (0.49 and 0.5 are one kind), CPUs to whole cores: a bounded table.
    g = round(gpus * 20) / 20 if gpus < 1.0 - _EPS else float(round(gpus))
    return card, max(g, 0.05), float(round(req.resources.get(CPU, 0.0)))


class WorkloadMix:
    """The distribution of recent worker requests, kept incrementally (a sliding window of requests).

    ``observe`` is O(1); the class table (:attr:`classes`, the ``max_classes``
    most frequent GPU kinds with their weights) is rebuilt after ``refresh``
    new requests, or sooner while the window is still filling.
    """

    def __init__(self, window: int = 4096, max_classes: int = 64, refresh: int = 256) -> None:
        self.window = window
        self.max_classes = max_classes
        self.refresh = refresh
        self._recent: deque[tuple[tuple, float]] = deque()
        self._counts: dict[tuple, float] = {}
        self._memory: dict[tuple, float] = {}
        self._pending = 0
        self._seen = 0
        self.classes: tuple[TaskClass, ...] = ()
        self.version = 0  # bumped whenever ``classes`` changes (scores memoised against it)

    def observe(self, req: WorkerRequest, workers: int = 1) -> None:
        """Count one submitted gang (each worker is a request of this kind)."""
        key = _class_key(req)
        if key is None:
            return
        n = float(max(workers, 1))
        self._recent.append((key, n))
        self._counts[key] = self._counts.get(key, 0.0) + n
        self._memory[key] = req.resources.get(MEMORY, 0.0)
        while len(self._recent) > self.window:
            old, m = self._recent.popleft()
            left = self._counts[old] - m
            if left <= _EPS:
                del self._counts[old]
                self._memory.pop(old, None)
            else:
                self._counts[old] = left
        self._pending += 1
        self._seen += 1
        # Rebuild at 1, 2, 4, ... requests while the window fills, then every ``refresh``.
        if self._pending >= min(self.refresh, self._seen) or not self.classes:
            self._rebuild()

    def _rebuild(self) -> None:
        top = sorted(self._counts.items(), key=lambda kv: (-kv[1], kv[0]))[: self.max_classes]
        total = sum(c for _, c in top) or 1.0
        self.classes = tuple(TaskClass(c / total, card, g, cpus, self._memory.get((card, g, cpus), 0.0))
                             for (card, g, cpus), c in top)
        self._pending = 0
        self.version += 1

    def classes_for(self, req: WorkerRequest) -> tuple[TaskClass, ...]:
        """The table, or the request itself as the only kind before anything was observed."""
        if self.classes:
            return self.classes
        key = _class_key(req)
        if key is None:
            return ()
        card, g, cpus = key
        return (TaskClass(1.0, card, g, cpus, req.resources.get(MEMORY, 0.0)),)
