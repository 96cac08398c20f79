"""The controller's read-only API: job records, the queue, tenants, nodes, logs, health.

A mixin of :class:`cuberay.platform.control.controller.Controller`: these calls
change nothing. Those declared ``reads`` (cuberay/platform/api/endpoints.py) run on
the actor's reads thread, so an admission cycle in progress never delays them: they
read the store and the last published :class:`~cuberay.platform.control.snapshot.Snapshot`,
never the live admission state (control/snapshot.py says why). ``logs`` is one of them;
its file and Jobs API reads go to a thread pool of their own (control/logs.py): a follower
waiting on a slow read holds a slot of the group, not the admission loop nor a thread the
other reads need. Lists hold only what
the caller may read; the shared views (queue, tenants, nodes) show every tenant's
names, sizes and reasons, as a shared queue does, and never a spec, env or log.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

from cuberay import kinds
from cuberay.errors import AdmissionError, SpecError
from cuberay.platform.api.records import (
    MAX_PAGE,
    EventRecord,
    JobPage,
    JobRecord,
    LogChunk,
    QueueEntry,
    QueuePage,
    TenantUsage,
    TrialsPage,
)
from cuberay.platform.control import convert as conv
from cuberay.platform.control import logs as job_logs
from cuberay.platform.control.endpoint import endpoint
from cuberay.platform.control.guard import Principal
from cuberay.platform.control.snapshot import Snapshot
from cuberay.platform.control.store_pages import JobFilter, QueueRow, check_page, readable_by
from cuberay.platform.spec import load_spec


class Views:
    """Read-only calls; the controller supplies store, snapshot, drivers, platform, guard and _ticks."""

    snapshot: Snapshot

    @endpoint
    async def status(self, who: Principal, ref: str) -> JobRecord:
        return self._live(who.target, self.snapshot)

    @staticmethod
    def _live(rec: JobRecord, snapshot: Snapshot) -> JobRecord:
        reason = snapshot.waits.get(rec.id)
        return rec.model_copy(update={"reason": reason}) if reason and not rec.state.is_terminal else rec

    @endpoint
    async def list_jobs(self, who: Principal, tenant: str | None = None, states: list[str] | None = None,
                        limit: int | None = None) -> list[JobRecord]:
        """At most ``MAX_PAGE`` records: an answer of every job behind a deep backlog (seconds of records and specs)
        would hold a reads thread and every later read; past that, the caller pages (``job_page``)."""
        visible = _visible(self, who)
        if limit is not None:
            check_page(0, limit)
        else:
            wanted = JobFilter(tenant, states=tuple(states) if states else None)
            matching = self.store.count_jobs(wanted, visible)
            if matching > MAX_PAGE:
                raise SpecError(f"{matching:,} jobs match and list_jobs answers at most {MAX_PAGE:,} at once: give "
                                f"a limit (the newest that many), narrow it by tenant or state, or page through "
                                f"them with job_page")
        snapshot = self.snapshot
        return [self._live(r, snapshot) for r in self.store.list_jobs(tenant, states, limit, visible)]

    @endpoint
    async def job_page(self, who: Principal, tenant: str | None = None, user: str | None = None,
                       kinds: list[str] | None = None, states: list[str] | None = None, name: str | None = None,
                       since: float | None = None, offset: int = 0, limit: int = 50) -> JobPage:
        wanted = JobFilter(tenant, user, tuple(kinds) if kinds else None, tuple(states) if states else None,
                           name, since)
        total, records = self.store.job_page(wanted, offset, limit, _visible(self, who))
        snapshot = self.snapshot
        return JobPage(total=total, offset=offset, records=[self._live(r, snapshot) for r in records])

    @endpoint
    async def trials(self, who: Principal, ref: str) -> TrialsPage:
        rec = who.target
        attempt, trials = self.store.trials(rec.id)
        objective = kinds.of(rec.kind).objective(load_spec(rec.spec))
        metric, mode = objective if objective else (None, None)
        return TrialsPage(job_id=rec.id, attempt=attempt, metric=metric, mode=mode, trials=trials)

    @endpoint
    async def events(self, who: Principal, job_id: str | None = None, limit: int | None = 100) -> list[EventRecord]:
        if job_id is not None:
            return self.store.events(who.target.id, limit)
        return self.store.events(None, limit, _visible(self, who))

    @endpoint
    async def event_counts(self, who: Principal, since: float) -> dict[str, int]:
        return self.store.event_counts(since, _visible(self, who))

    @endpoint
    async def logs(self, who: Principal, ref: str, attempt: int | None = None, offset: int = 0,
                   limit: int = job_logs.CHUNK) -> LogChunk:
        """Up to ``limit`` bytes of one attempt's log (None: the latest) from byte ``offset`` (control/logs.py)."""
        rec = who.target
        launcher = self.drivers.launcher
        sources = job_logs.Sources(self._tenant_storage(rec.tenant), launcher.driver_log, launcher.logs)
        return await job_logs.read_in_pool(rec, attempt, offset, limit, sources)

    # ------------------------------------------------------------------ API: views

    @endpoint
    async def queue_page(self, who: Principal, tenant: str | None = None, user: str | None = None,
                         state: str | None = None, offset: int = 0, limit: int = 50) -> QueuePage:
        """A page of the shared queue, read from the snapshot with only the page's records from the store."""
        if state not in (None, "running", "waiting"):
            raise SpecError(f"state {state!r} is not a queue state: use 'running', 'waiting' or leave it out")
        check_page(offset, limit)
        visible = _visible(self, who)
        snapshot, read = self.snapshot, {}

        def records_of(ids: list[str]) -> dict[str, QueueRow]:
            read.update(self.store.queue_rows(ids))
            return read

        total, entries = snapshot.queue_page(records_of, tenant, state, user, offset, limit, visible)
        users = {e.job_id: read[e.job_id].user for e in entries if readable_by(visible, read[e.job_id])}
        return QueuePage(total=total, offset=offset, entries=entries, users=users, ticks=snapshot.ticks)

    @endpoint
    async def queue_entry(self, who: Principal, ref: str) -> QueueEntry | None:
        """One job's queue line, from the snapshot: what a --wait polls, at the cost of one job at any backlog."""
        return self.snapshot.entry(who.target)

    @endpoint
    async def tenants(self, who: Principal) -> list[TenantUsage]:
        return list(self.snapshot.tenants)

    @endpoint
    async def tenant_choice(self, who: Principal, tenant: str | None = None,
                            spec_tenant: str | None = None) -> dict[str, str]:
        """What a submit with ``tenant`` (--tenant) of a spec naming ``spec_tenant`` resolves to, and why: the
        controller's own resolution (control/convert.py choose_tenant), so a message says what submit did."""
        try:
            choice = conv.choose_tenant(self.platform, who.user, tenant, spec_tenant, who.preferred_tenant)
        except AdmissionError as err:  # asking about a tenant one may not use is a refusal like a submit's
            self.guard.deny(str(err))
            raise
        return {"tenant": choice.tenant.name, "why": choice.why, "text": choice.text}

    @endpoint
    async def running(self, who: Principal) -> dict[str, list[str]]:
        """Job id -> node id per worker, for every job holding an allocation (as of the last tick)."""
        return dict(self.snapshot.allocations)

    @endpoint
    async def nodes(self, who: Principal) -> list[dict[str, Any]]:
        """The ledger's nodes: capacity, free (after cuberay and foreign use), labels (as of the last tick)."""
        return list(self.snapshot.nodes)

    @endpoint
    async def ping(self, who: Principal) -> dict[str, Any]:
        return {"platform": self.platform.metadata.name, "database": self.store.masked_url,
                "dashboard_url": self.drivers.launcher.dashboard_url, "ticks": self._ticks,
                "snapshot": {"ticks": self.snapshot.ticks, "age_s": round(time.time() - self.snapshot.time, 3),
                             "build_ms": round(self.snapshot.build_ms, 1)},
                "gc_frozen_objects": gc.get_freeze_count(),
                "drivers": self.drivers.info(),
                "node_id": self.cluster.node_id(), "pid": os.getpid()}

    @endpoint
    async def dashboard_url(self, who: Principal) -> str:
        return self.drivers.launcher.dashboard_url


def _visible(controller: Any, who: Principal) -> tuple[set[str], str] | None:
    """The store's filter for what ``who`` may read (None: everything)."""
    tenants = controller.guard.visible_tenants(who)
    return None if tenants is None else (tenants, who.user)
