"""The whole queue, read a page at a time: what `cuberay queue -o json` and ``client.queue()`` return.

A page costs the same at any backlog; the whole queue at 100,000 jobs is 100 of them, read one after the other
while jobs end and are admitted, so it is never one instant's queue. Two moves would lose a job between two
reads: one that ends ahead of the next page shifts every row after it up, so the page boundary's row would be
skipped; one admitted from the unread part moves to the running rows already read. So the pages overlap by
``OVERLAP`` rows (as many jobs as could end between two reads of a page), and the running rows are read again at
the end: a job admitted meanwhile is listed as running, one that ended meanwhile is left out.
"""

from __future__ import annotations

from typing import Any

from cuberay.platform.api.records import MAX_PAGE, QueueEntry
from cuberay.platform.policy.states import JobState

OVERLAP = 100  # rows each page repeats of the one before


def walk(api: Any, tenant: str | None = None, offset: int = 0, page: int = MAX_PAGE,
         overlap: int = OVERLAP) -> list[QueueEntry]:
    """Every entry of the queue (of ``tenant``) from row ``offset`` on: running jobs, then waiting ones in order."""
    seen: dict[str, QueueEntry] = {}
    at = offset
    while True:
        got = api.queue_page(tenant=tenant, offset=at, limit=page)
        for entry in got.entries:
            seen[entry.job_id] = entry  # the later read of a repeated row is the fresher one
        if at + page >= got.total:
            break
        at += page - overlap
    if offset:  # a walk from further on never held the running rows at the front
        return list(seen.values())
    running = _running(api, tenant, page)
    waiting = [e for e in seen.values() if JobState(e.state).is_waiting and e.job_id not in running]
    return list(running.values()) + waiting


def _running(api: Any, tenant: str | None, page: int) -> dict[str, QueueEntry]:
    out: dict[str, QueueEntry] = {}
    at = 0
    while True:
        got = api.queue_page(tenant=tenant, state="running", offset=at, limit=page)
        out.update((e.job_id, e) for e in got.entries)
        at += page
        if at >= got.total:
            return out
