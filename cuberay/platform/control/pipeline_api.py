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
from cuberay.platform.control.pipeline_driver import PipelineDriver
from cuberay.platform.control.pipeline_store import RunRecord, StepRecord

log = logging.getLogger("cuberay.pipelines")


class PipelineAPI:
    """Calls made by `cuberay pipeline ...`."""

    def _start_pipelines(self) -> None:
        self.pipelines = PipelineDriver(self.store, self.platform, jobs=self)
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

    async def pipeline_submit(self, spec: Mapping[str, Any], tenant: str | None, user: str,
                              run: bool = True) -> dict[str, Any]:
        """Store a pipeline; one without a schedule also gets a run now (unless ``run`` is False)."""
        async with self._pipeline_lock:
            pipe, owner = self.pipelines.put(spec, user, tenant)
            made = None
            if run and pipe.spec.schedule is None:
                made = await self.pipelines.request_run(owner, pipe.name, user)
            return {"tenant": owner, "pipeline": pipe.name, "scheduled": pipe.spec.schedule is not None,
                    "run": made}

    async def pipeline_run(self, name: str, tenant: str | None, user: str, params: Mapping[str, Any] | None = None,
                           supersede: bool = False) -> RunRecord:
        async with self._pipeline_lock:
            return await self.pipelines.request_run(self._pipeline_tenant(name, tenant, user), name, user,
                                                    dict(params or {}), supersede)

    async def pipeline_runs(self, name: str | None = None, tenant: str | None = None) -> list[RunRecord]:
        return self.pipelines.book.runs(tenant, name)

    async def pipeline_status(self, ref: str) -> tuple[RunRecord, list[StepRecord]]:
        run = self.pipelines.find_run(ref)
        return run, self.pipelines.book.steps(run.id)

    async def pipeline_cancel(self, ref: str, user: str) -> RunRecord:
        async with self._pipeline_lock:
            run = self.pipelines.find_run(ref)
            return await self.pipelines.cancel_run(run.id, user)

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
