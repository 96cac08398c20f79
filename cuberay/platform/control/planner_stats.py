"""Keeps the database's query-planner statistics fresh as the jobs table grows.

SQLite keeps none unless asked (``ANALYZE``). Without them it takes a tenant filter for a selective one: a Jobs
page for a member of every tenant sorted the whole table to serve 50 rows (0.4-0.6 s at 100,000 jobs; 30-50 ms
with statistics, benchmarks/RESULTS.md). PostgreSQL's autovacuum analyzes on its own, but late for a table that
doubled within minutes, and only where an operator left it on. So the controller refreshes them itself: at its
start and whenever it has doubled the jobs table since (``Store.statistics_due``, a counter: no query). Only the
jobs table: the pages' plans depend on it, and a database shared with other software keeps its own.

On SQLite the refresh runs on the controller's loop, the one thread that writes: ``ANALYZE`` writes, and a
write committed from another thread between a transaction's read and its write fails that transaction ("database
is locked"). It costs about 1 ms per 1,000 jobs (benchmarks/bench_pages.py), once per doubling. On PostgreSQL it
runs in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

log = logging.getLogger(__name__)

RETRY_AFTER_S = 600.0  # after a failed refresh: pages are only slower without one, so no hurry and no log flood


class StatisticsKeeper:
    """Call :meth:`tend` once per tick, on the controller's loop."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.refreshes = 0
        self.failed_at: float | None = None  # when the failed refresh started (monotonic s)
        self._started_at = 0.0
        self._task: asyncio.Task | None = None

    def tend(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if (self._task is not None and not self._task.done()) or not self.store.statistics_due():
            return
        if self.failed_at is not None and now - self.failed_at < RETRY_AFTER_S:
            return
        self._started_at, added = now, self.store.jobs_added
        if not self.store.statistics_in_thread:
            try:
                rows = self.store.refresh_statistics()
            except Exception as err:  # noqa: BLE001 - pages get slower, nothing else: say so and go on
                self._finished(added, None, err)
            else:
                self._finished(added, rows, None)
            return
        self._task = asyncio.get_running_loop().create_task(asyncio.to_thread(self.store.refresh_statistics))
        self._task.add_done_callback(lambda task: self._task_done(added, task))

    def _task_done(self, added: int, task: asyncio.Task) -> None:
        if not task.cancelled():
            err = task.exception()
            self._finished(added, None if err else task.result(), err)

    def _finished(self, added: int, rows: int | None, err: BaseException | None) -> None:
        """On the loop, the thread that counts the jobs added: a thread's update could lose one of its adds."""
        if err is not None:
            self.failed_at = self._started_at
            log.warning("cuberay could not refresh the database's planner statistics (pages over many jobs may "
                        "be slow; it tries again in %.0f s): %s", RETRY_AFTER_S, err)
        else:
            self.store.statistics_refreshed(rows, added)
            self.failed_at = None
            self.refreshes += 1
