"""The controller's pipeline component: pipelines, their runs and steps, and the loop that advances them.

A component the controller owns, not part of its admission core: its own tables (``control/pipeline_store.py``),
its own lock and its own loop, and it reaches jobs only through the jobs API, as any client does: each step
attempt is a ``submit`` and a stopped step a ``cancel``, made in this process with the platform's credential
acting for the run's user (the controller's access rules apply to them as to any call). The driver's tick and
these calls never interleave halfway, and neither holds the admission lock while it waits for a job call.

Its methods below are the pipeline endpoints of ``ControllerAPI``: the controller's actor methods admit the
caller and hand the call here with the caller's :class:`~cuberay.platform.control.guard.Principal`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Mapping

from cuberay.errors import NotFoundError, SpecError
from cuberay.platform.api.records import PipelineRecord, PipelineStored, PipelineSummary, RunRecord, StepRecord
from cuberay.platform.control.guard import Guard, Principal
from cuberay.platform.control.pipeline_driver import PipelineDriver, load_pipeline
from cuberay.platform.control.store import Store
from cuberay.platform.policy.pipelines import next_ticks
from cuberay.platform.spec import Platform

log = logging.getLogger("cuberay.pipelines")


class PipelineService:
    """Pipelines of one platform; ``jobs`` is the jobs API (the controller), called as the platform."""

    def __init__(self, store: Store, platform: Callable[[], Platform], guard: Guard, jobs: Any,
                 interval_s: Callable[[], float]) -> None:
        self._platform = platform
        self.guard = guard
        self.interval_s = interval_s
        self.driver = PipelineDriver(store, platform, jobs=jobs, caller=guard.platform_caller)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        guard.runs = self._find_run  # the rules about a run name it by id or by its pipeline's name

    def start(self) -> None:
        """Run the loop on the current event loop: runs continue from their recorded step states."""
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            try:
                async with self._lock:
                    await self.driver.tick()
            except Exception:  # noqa: BLE001 - one bad tick must not stop the pipelines
                log.exception("cuberay pipeline tick failed")
            await asyncio.sleep(self.interval_s())

    # ------------------------------------------------------------------ the endpoints

    async def pipeline_submit(self, who: Principal, spec: Mapping[str, Any], tenant: str | None = None,
                              run: bool = True) -> PipelineStored:
        """Store a pipeline; one without a schedule also gets a run now (unless ``run`` is False)."""
        async with self._lock:
            pipe, choice = self.driver.put(spec, who.user, tenant, who.preferred_tenant)
            owner = choice.tenant.name
            made = None
            if run and pipe.spec.schedule is None:
                made = await self.driver.request_run(owner, pipe.name, who.user)
            return PipelineStored(tenant=owner, tenant_why=choice.why, pipeline=pipe.name,
                                  scheduled=pipe.spec.schedule is not None, run=made)

    async def pipeline_run(self, who: Principal, name: str, tenant: str | None = None,
                           params: Mapping[str, Any] | None = None, supersede: bool = False) -> RunRecord:
        async with self._lock:
            owner = self._pipeline_tenant(name, tenant, who)
            if supersede:  # it cancels the pipeline's other runs: a change, like cancelling them one by one
                pipe = self.driver.book.get_pipeline(owner, name)
                self.guard.require_owner(who, f"the runs of pipeline {name!r} (--supersede)", pipe.user, owner)
            return await self.driver.request_run(owner, name, who.user, dict(params or {}), supersede)

    async def pipeline_list(self, who: Principal, tenant: str | None = None) -> list[PipelineSummary]:
        visible = None if tenant is not None else self.guard.visible_tenants(who)
        return [_summary(p, time.time()) for p in self.driver.book.pipelines()
                if (tenant is None or p.tenant == tenant) and (visible is None or p.tenant in visible)]

    async def pipeline_runs(self, who: Principal, name: str | None = None,
                            tenant: str | None = None) -> list[RunRecord]:
        visible = None if tenant is not None else self.guard.visible_tenants(who)
        return [r for r in self.driver.book.runs(tenant, name) if visible is None or r.tenant in visible]

    async def pipeline_status(self, who: Principal, ref: str) -> tuple[RunRecord, list[StepRecord]]:
        run = who.target
        return run, self.driver.book.steps(run.id)

    async def pipeline_cancel(self, who: Principal, ref: str) -> RunRecord:
        async with self._lock:
            return await self.driver.cancel_run(who.target.id, who.user)

    # ------------------------------------------------------------------ pieces

    def _find_run(self, ref: str, who: Principal) -> RunRecord:
        """The run ``ref`` names: its id, else the latest run of the pipeline of that name ``who`` may read."""
        visible = self.guard.visible_tenants(who)
        try:
            return self.driver.find_run(ref, visible)
        except NotFoundError:
            others = sorted({r.tenant for r in self.driver.book.runs() if r.pipeline == ref})
            if others:
                self.guard.deny(f"user {who.user!r} may not see the runs of pipeline {ref!r}: they belong to "
                                f"tenant(s) {', '.join(others)}, whose members may")
            raise

    def _pipeline_tenant(self, name: str, tenant: str | None, who: Principal) -> str:
        """The tenant of the stored pipeline ``name``: --tenant, else the only one of the caller's tenants that
        has it, else (several have it) the caller's own default tenant (CUBERAY_TENANT) among them."""
        user = who.user
        tenant = tenant or (who.preferred_tenant if who.preferred_tenant in self._owners(name, user) else None)
        if tenant is not None:
            return tenant
        owners = self._owners(name, user)
        if not owners:
            raise NotFoundError(f"no pipeline named {name!r} in your tenants; submit it with "
                                f"`cuberay pipeline submit FILE`")
        if len(owners) > 1:
            raise SpecError(f"pipeline {name!r} exists in tenants {', '.join(owners)}; pass --tenant (or set "
                            f"CUBERAY_TENANT to one of them)")
        return owners[0]

    def _owners(self, name: str, user: str) -> list[str]:
        return [p.tenant for p in self.driver.book.pipelines()
                if p.name == name and self._platform().tenant(p.tenant).is_member(user)]


def _summary(record: PipelineRecord, now: float) -> PipelineSummary:
    """A stored pipeline with its schedule's next ticks (policy/pipelines.py ``next_ticks``)."""
    spec = load_pipeline(record.spec).spec
    schedule = spec.schedule
    return PipelineSummary(
        tenant=record.tenant, name=record.name, user=record.user, version=record.version,
        submit_time=record.submit_time, steps=[step.name for step in spec.steps], last_tick=record.last_tick,
        cron=schedule.cron if schedule else None,
        next_ticks=next_ticks(schedule, record.last_tick, record.submit_time, now) if schedule else [])
