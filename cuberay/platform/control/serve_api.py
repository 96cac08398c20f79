"""The controller's serving calls: thin entries into its serving component (``control/serving.py``).

A mixin of :class:`cuberay.platform.control.controller.Controller`, which supplies ``serving``. A ServeApp's
driver deploys, updates and removes its app through these, and `cuberay serve` changes traffic through them:
nothing else writes Serve's declarative config.
"""

from __future__ import annotations

from typing import Any, Mapping

from cuberay.platform.api.records import ServeChangeRecord, TrainRun
from cuberay.platform.control.endpoint import endpoint
from cuberay.platform.control.guard import Principal


class ServeAPI:
    """Calls made by `cuberay serve` and by a ServeApp's driver."""

    @endpoint
    async def train_run(self, who: Principal, tenant: str, job: str | None = None, run: str | None = None,
                        previous: int = 0) -> TrainRun:
        """A SUCCEEDED TrainJob run to serve: its id, training config, entrypoint and storage path."""
        return self.serving.train_run(tenant, job, run, previous)

    @endpoint
    async def serve_deploy(self, who: Principal, job_id: str, attempt: int, entry: Mapping[str, Any],
                           note: str = "") -> dict:
        """The driver's deploy or update of its app's Serve entry; the weights the app serves."""
        return await self.serving.deploy(job_id, attempt, entry, note)

    @endpoint
    async def serve_undeploy(self, who: Principal, job_id: str, attempt: int) -> bool:
        """The driver's removal of its app from Serve as its attempt ends."""
        return await self.serving.undeploy(job_id, attempt)

    @endpoint
    async def serve_traffic(self, who: Principal, job_id: str, action: str, changes: Mapping[str, Any],
                            note: str = "") -> dict[str, Any]:
        """Change a running app's traffic (a rollout step, an automatic rollback, a rate limit); the new config."""
        return await self.serving.change_traffic(who.target.id, who.user, action, changes, note)

    @endpoint
    async def serve_rollback(self, who: Principal, job_id: str, to: int | None = None) -> dict[str, Any]:
        """Restore the weights before the app's last rollout, or those of change ``to``; the new config."""
        return await self.serving.rollback(who.target.id, who.user, to)

    @endpoint
    async def serve_delete(self, who: Principal, job_id: str) -> ServeChangeRecord:
        """After the app's job was cancelled: take it off Serve if its driver did not, and record the delete."""
        return await self.serving.delete(who.target.id, who.user)

    @endpoint
    async def serve_history(self, who: Principal, app: str, limit: int | None = 100) -> list[ServeChangeRecord]:
        return self.serving.history(who.target.id, limit)
