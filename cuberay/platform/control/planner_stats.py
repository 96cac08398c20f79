"""Keeps the database's query-planner statistics fresh as the jobs table grows.

SQLite keeps none unless asked (``ANALYZE``). Without them it takes a tenant filter for a selective one: a Jobs
page for a member of every tenant sorted the whole table to serve 50 rows (0.4-0.6 s at 100,000 jobs; 20-40 ms
with statistics, benchmarks/RESULTS.md). PostgreSQL's autovacuum analyzes on its own, but late for a table that
doubled within minutes, and only where an operator left it on. So the controller refreshes them itself: once at
its start and whenever the jobs table has doubled since (``Store.refresh_statistics``), checking at most once a
minute, in a thread, outside the admission lock.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

CHECK_EVERY_S = 60.0  # how often the controller asks whether the statistics are due (a count of the jobs)


class StatisticsKeeper:
    """Call :meth:`tend` once per tick, on the controller's loop."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.checked_at: float | None = None  # monotonic s
        self.refreshes = 0
        self._task: asyncio.Task | None = None

    def tend(self, now: float) -> None:
        if self._task is not None and not self._task.done():
            return
        if self.checked_at is not None and now - self.checked_at < CHECK_EVERY_S:
            return
        self.checked_at = now
        self._task = asyncio.get_running_loop().create_task(asyncio.to_thread(self.store.refresh_statistics))
        self._task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        if task.cancelled():
            return
        if task.exception() is not None:  # pages get slower, nothing else: say so and try at the next check
            log.warning("cuberay could not refresh the database's planner statistics: %s", task.exception())
        elif task.result():
            self.refreshes += 1
