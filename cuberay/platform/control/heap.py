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

A backlog that never empties would keep frozen forever whatever died in a reference
cycle after it was frozen. So every ``RELEASE_EVERY_S`` while frozen the keeper
unfreezes, runs one full collection and freezes again: one pause of the size freezing
avoids (150–240 ms for a 100,000-job queue's 540,000 objects on 2 loaded cores,
0.1–0.8 s in the live controller) every five minutes instead of about every second,
under 0.3 % of the time, and frozen garbage lives five minutes at most.
"""

from __future__ import annotations

import gc
import time
from typing import Protocol

FREEZE_EVERY_ADDS = 10_000  # jobs queued since the last freeze that make the next one worth it
RELEASE_EVERY_S = 300.0  # while frozen, how often one full collection looks at the frozen objects again


class Queue(Protocol):
    """What the keeper reads of the admission queue (cuberay.platform.policy.queue.JobQueue)."""

    adds: int  # jobs queued since it was made

    def __len__(self) -> int: ...


class HeapKeeper:
    """Call :meth:`tend` once per tick with the admission queue."""

    def __init__(self) -> None:
        self.frozen_at_adds: int | None = None  # the queue's ``adds`` at the last freeze; None: nothing frozen
        self.seen_at: float | None = None  # when a full collection last saw every frozen object (monotonic s)
        self.freezes = 0
        self.releases = 0
        self.last_release_s = 0.0  # how long the last release held the interpreter

    def tend(self, queue: Queue, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        since = queue.adds - (self.frozen_at_adds if self.frozen_at_adds is not None else 0)
        if self.seen_at is not None and len(queue) and now - self.seen_at >= RELEASE_EVERY_S:
            self._release(queue, now)  # first: a queue growing at every tick would put it off for ever
        elif len(queue) >= FREEZE_EVERY_ADDS and since >= FREEZE_EVERY_ADDS:
            gc.collect(1)
            gc.freeze()
            self.frozen_at_adds = queue.adds
            self.seen_at = now if self.seen_at is None else self.seen_at
            self.freezes += 1
        elif self.frozen_at_adds is not None and not len(queue):
            gc.unfreeze()
            self.frozen_at_adds = self.seen_at = None

    def _release(self, queue: Queue, now: float) -> None:
        """One full collection over everything, frozen objects included, then freeze what is still alive."""
        start = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.last_release_s = time.perf_counter() - start
        self.frozen_at_adds, self.seen_at = queue.adds, now
        self.releases += 1
