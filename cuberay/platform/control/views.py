"""The controller's read-only API: job records, the queue, tenants, nodes, logs, health.

A mixin of :class:`cuberay.platform.control.controller.Controller`: these calls
read the store and the admission state the controller owns and change nothing.
"""

from __future__ import annotations

import os
from typing import Any

import ray

from cuberay.platform.control import access
from cuberay.platform.control import convert as conv
from cuberay.platform.control.records import QueueEntry, TenantUsage
from cuberay.platform.control.store import EventRecord, JobRecord
from cuberay.platform.policy.admission import queue_order
from cuberay.platform.policy.states import JobState

ACTIVE = (JobState.QUEUED, JobState.PREEMPTED, JobState.ADMITTED, JobState.RUNNING)


class Views:
    """Read-only calls; the controller supplies store, state, ledger, waits, drivers, platform, _ticks and
    _authorize."""

    async def status(self, ref: str, user: str | None = None) -> JobRecord:
        rec = self.store.find_job(ref)
        self._authorize(rec, user, access.READ)
        return self._live(rec)

    def _live(self, rec: JobRecord) -> JobRecord:
        reason = self.waits.get(rec.id)
        return rec.model_copy(update={"reason": reason}) if reason and not rec.state.is_terminal else rec

    async def list_jobs(self, tenant: str | None = None, states: list[str] | None = None,
                        limit: int | None = None) -> list[JobRecord]:
        return [self._live(r) for r in self.store.list_jobs(tenant, states, limit)]

    async def events(self, job_id: str | None = None, limit: int | None = 100) -> list[EventRecord]:
        return self.store.events(job_id, limit)

    async def logs(self, ref: str, user: str | None = None) -> tuple[str, bool]:
        """(the current attempt's driver log, whether the job is terminal)."""
        rec = self.store.find_job(ref)
        self._authorize(rec, user, access.READ)
        if not rec.submission_id:
            return "", rec.state.is_terminal
        return await self.drivers.logs(rec.submission_id), rec.state.is_terminal

    # ------------------------------------------------------------------ API: views

    async def queue(self, tenant: str | None = None) -> list[QueueEntry]:
        records = {r.id: r for r in self.store.list_jobs(tenant, ACTIVE)}
        return conv.queue_entries(self.state, queue_order(self.state), records, self.waits, tenant)

    async def tenants(self) -> list[TenantUsage]:
        return conv.tenant_usages(self.platform, self.state)

    async def running(self) -> dict[str, list[str]]:
        """Job id -> node id per worker, for every job holding an allocation now."""
        return {job_id: run.allocation.node_ids for job_id, run in self.state.running.items()}

    async def nodes(self) -> list[dict[str, Any]]:
        """The ledger's nodes: capacity, free (after cuberay and foreign use), labels."""
        return [{"node_id": n.id, "capacity": dict(n.capacity), "free": dict(n.free), "labels": dict(n.labels)}
                for n in self.ledger.nodes.values()]

    async def ping(self) -> dict[str, Any]:
        return {"platform": self.platform.metadata.name, "database": self.store.url,
                "dashboard_url": self.drivers.launcher.dashboard_url, "ticks": self._ticks,
                "drivers": self.drivers.info(),
                "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    async def dashboard_url(self) -> str:
        return self.drivers.launcher.dashboard_url

    async def platform_spec(self) -> dict[str, Any]:
        return self.platform.model_dump(mode="json")
