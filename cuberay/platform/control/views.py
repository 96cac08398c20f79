"""The controller's read-only API: job records, the queue, tenants, nodes, logs, health.

A mixin of :class:`cuberay.platform.control.controller.Controller`: these calls
change nothing. Those marked ``READS`` run on the actor's reads thread, so an
admission cycle in progress never delays them: they read the store and the last
published :class:`~cuberay.platform.control.snapshot.Snapshot`, never the live
admission state (control/snapshot.py says why). ``logs`` runs on a group of its own
(``LOGS``), whose file and Jobs API reads go to threads: a follower waiting on a slow
read holds neither the admission loop nor the reads thread.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from typing import Any

import ray

from cuberay.platform.control import access
from cuberay.platform.control import logs as job_logs
from cuberay.platform.control.records import LogChunk, QueueEntry, TenantUsage
from cuberay.platform.control.snapshot import READS, Snapshot
from cuberay.platform.control.store import EventRecord, JobRecord
from cuberay.platform.policy.states import JobState

ACTIVE = (JobState.QUEUED, JobState.PREEMPTED, JobState.ADMITTED, JobState.RUNNING)


class Views:
    """Read-only calls; the controller supplies store, snapshot, drivers, platform, _ticks and _authorize."""

    snapshot: Snapshot

    @ray.method(concurrency_group=READS)
    async def status(self, ref: str, user: str | None = None) -> JobRecord:
        rec = self.store.find_job(ref)
        self._authorize(rec, user, access.READ)
        return self._live(rec, self.snapshot)

    @staticmethod
    def _live(rec: JobRecord, snapshot: Snapshot) -> JobRecord:
        reason = snapshot.waits.get(rec.id)
        return rec.model_copy(update={"reason": reason}) if reason and not rec.state.is_terminal else rec

    @ray.method(concurrency_group=READS)
    async def list_jobs(self, tenant: str | None = None, states: list[str] | None = None,
                        limit: int | None = None) -> list[JobRecord]:
        snapshot = self.snapshot
        return [self._live(r, snapshot) for r in self.store.list_jobs(tenant, states, limit)]

    @ray.method(concurrency_group=READS)
    async def events(self, job_id: str | None = None, limit: int | None = 100) -> list[EventRecord]:
        return self.store.events(job_id, limit)

    @ray.method(concurrency_group=job_logs.LOGS)
    async def logs(self, ref: str, user: str | None = None, attempt: int | None = None, offset: int = 0,
                   limit: int = job_logs.CHUNK) -> LogChunk:
        """Up to ``limit`` bytes of one attempt's log (None: the latest) from byte ``offset`` (control/logs.py)."""
        rec = self.store.find_job(ref)
        self._authorize(rec, user, access.READ)
        launcher = self.drivers.launcher
        sources = job_logs.Sources(self.tenant_storage(rec.tenant), launcher.driver_log, launcher.logs)
        return await asyncio.to_thread(job_logs.read, rec, attempt, offset, limit, sources)

    # ------------------------------------------------------------------ API: views

    @ray.method(concurrency_group=READS)
    async def queue(self, tenant: str | None = None) -> list[QueueEntry]:
        snapshot = self.snapshot
        return snapshot.queue_entries({r.id: r for r in self.store.list_jobs(tenant, ACTIVE)}, tenant)

    @ray.method(concurrency_group=READS)
    async def tenants(self) -> list[TenantUsage]:
        return list(self.snapshot.tenants)

    @ray.method(concurrency_group=READS)
    async def running(self) -> dict[str, list[str]]:
        """Job id -> node id per worker, for every job holding an allocation (as of the last tick)."""
        return dict(self.snapshot.allocations)

    @ray.method(concurrency_group=READS)
    async def nodes(self) -> list[dict[str, Any]]:
        """The ledger's nodes: capacity, free (after cuberay and foreign use), labels (as of the last tick)."""
        return list(self.snapshot.nodes)

    @ray.method(concurrency_group=READS)
    async def ping(self) -> dict[str, Any]:
        return {"platform": self.platform.metadata.name, "database": self.store.url,
                "dashboard_url": self.drivers.launcher.dashboard_url, "ticks": self._ticks,
                "snapshot": {"ticks": self.snapshot.ticks, "age_s": round(time.time() - self.snapshot.time, 3),
                             "build_ms": round(self.snapshot.build_ms, 1)},
                "gc_frozen_objects": gc.get_freeze_count(),
                "drivers": self.drivers.info(),
                "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    async def dashboard_url(self) -> str:
        return self.drivers.launcher.dashboard_url

    async def platform_spec(self) -> dict[str, Any]:
        return self.platform.model_dump(mode="json")
