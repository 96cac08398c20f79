"""The controller's pipeline API: submit, run, list, status, cancel; and the driver's loop.

A mixin of :class:`cuberay.platform.control.controller.Controller` (it supplies
``store``, ``platform``, ``interval_s`` and the async ``submit``/``cancel`` the
driver submits step jobs through). Pipeline state has its own lock: the
driver's tick and these calls never interleave halfway, and neither holds the
admission lock while it waits for a job call.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping

from cuberay.errors import NotFoundError, SpecError
from cuberay.platform.api.records import RunRecord, StepRecord
from cuberay.platform.control.endpoint import endpoint
from cuberay.platform.control.guard import Principal
from cuberay.platform.control.pipeline_driver import PipelineDriver

log = logging.getLogger("cuberay.pipelines")


class PipelineAPI:
    """Calls made by `cuberay pipeline ...`."""

    def _start_pipelines(self) -> None:
        self.pipelines = PipelineDriver(self.store, self.platform, jobs=self, caller=self.guard.platform_caller)
        self.guard.runs = self._find_run
        self._pipeline_lock = asyncio.Lock()
        self._pipeline_task = asyncio.get_running_loop().create_task(self._pipeline_loop())

    async def _pipeline_loop(self) -> None:
        while True:
            try:
                async with self._pipeline_lock:
                    await self.pipelines.tick()
            except Exception:  # noqa: BLE001 - one bad tick must not stop the pipelines
                log.exception("cuberay pipeline tick failed")
            await asyncio.sleep(self.interval_s)

    def _find_run(self, ref: str, who: Principal) -> RunRecord:
        """The run ``ref`` names: its id, else the latest run of the pipeline of that name ``who`` may read."""
        visible = self.guard.visible_tenants(who)
        try:
            return self.pipelines.find_run(ref, visible)
        except NotFoundError:
            others = sorted({r.tenant for r in self.pipelines.book.runs() if r.pipeline == ref})
            if others:
                self.guard.deny(f"user {who.user!r} may not see the runs of pipeline {ref!r}: they belong to "
                                f"tenant(s) {', '.join(others)}, whose members may")
            raise

    @endpoint
    async def pipeline_submit(self, who: Principal, spec: Mapping[str, Any], tenant: str | None = None,
                              run: bool = True) -> dict[str, Any]:
        """Store a pipeline; one without a schedule also gets a run now (unless ``run`` is False)."""
        async with self._pipeline_lock:
            pipe, owner = self.pipelines.put(spec, who.user, tenant)
            made = None
            if run and pipe.spec.schedule is None:
                made = await self.pipelines.request_run(owner, pipe.name, who.user)
            return {"tenant": owner, "pipeline": pipe.name, "scheduled": pipe.spec.schedule is not None,
                    "run": made}

    @endpoint
    async def pipeline_run(self, who: Principal, name: str, tenant: str | None = None,
                           params: Mapping[str, Any] | None = None, supersede: bool = False) -> RunRecord:
        async with self._pipeline_lock:
            owner = self._pipeline_tenant(name, tenant, who.user)
            if supersede:  # it cancels the pipeline's other runs: a change, like cancelling them one by one
                pipe = self.pipelines.book.get_pipeline(owner, name)
                self.guard.require_owner(who, f"the runs of pipeline {name!r} (--supersede)", pipe.user, owner)
            return await self.pipelines.request_run(owner, name, who.user, dict(params or {}), supersede)

    @endpoint
    async def pipeline_runs(self, who: Principal, name: str | None = None,
                            tenant: str | None = None) -> list[RunRecord]:
        visible = None if tenant is not None else self.guard.visible_tenants(who)
        return [r for r in self.pipelines.book.runs(tenant, name) if visible is None or r.tenant in visible]

    @endpoint
    async def pipeline_status(self, who: Principal, ref: str) -> tuple[RunRecord, list[StepRecord]]:
        run = who.target
        return run, self.pipelines.book.steps(run.id)

    @endpoint
    async def pipeline_cancel(self, who: Principal, ref: str) -> RunRecord:
        async with self._pipeline_lock:
            return await self.pipelines.cancel_run(who.target.id, who.user)

    def _pipeline_tenant(self, name: str, tenant: str | None, user: str) -> str:
        if tenant is not None:
            return tenant
        owners = [p.tenant for p in self.pipelines.book.pipelines()
                  if p.name == name and self.platform.tenant(p.tenant).is_member(user)]
        if not owners:
            raise NotFoundError(f"no pipeline named {name!r} in your tenants; submit it with "
                                f"`cuberay pipeline submit FILE`")
        if len(owners) > 1:
            raise SpecError(f"pipeline {name!r} exists in tenants {', '.join(owners)}; pass --tenant")
        return owners[0]
