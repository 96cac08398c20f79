"""Keeping Python's cycle collector off the controller's back while a deep queue waits.

With 100,000 jobs queued the controller holds millions of objects, and CPython's
oldest-generation collection walks all of them (0.1–0.8 s on 2 cores, measured in
the controller during `benchmarks/bench_reads.py --backlog 100000`). It runs whenever
the objects that survived younger collections exceed a quarter of the old ones, which
a busy loop reaches about once a second: every such pass holds the interpreter lock,
so `status` and `queue` calls on the reads thread waited behind it (p99 over 200 ms).

The queued jobs themselves are long-lived and hold no reference cycles, so there is
nothing to collect among them. Once enough new jobs have arrived the keeper freezes
what is alive (``gc.freeze``: later collections skip it; objects still die by
reference count as usual), after a young-generation collection so little garbage is
frozen with it. When the queue is empty again it unfreezes, and the next full
collection, cheap at that size, sees everything once more.
"""

from __future__ import annotations

import gc

from cuberay.platform.policy.queue import JobQueue

FREEZE_EVERY_ADDS = 10_000  # jobs queued since the last freeze that make the next one worth it


class HeapKeeper:
    """Call :meth:`tend` once per tick with the admission queue."""

    def __init__(self) -> None:
        self.frozen_at_adds: int | None = None  # the queue's ``adds`` at the last freeze; None: nothing frozen
        self.freezes = 0

    def tend(self, queue: JobQueue) -> None:
        since = queue.adds - (self.frozen_at_adds if self.frozen_at_adds is not None else 0)
        if len(queue) >= FREEZE_EVERY_ADDS and since >= FREEZE_EVERY_ADDS:
            gc.collect(1)
            gc.freeze()
            self.frozen_at_adds = queue.adds
            self.freezes += 1
        elif self.frozen_at_adds is not None and not len(queue):
            gc.unfreeze()
            self.frozen_at_adds = None
