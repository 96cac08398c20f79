"""The controller's serving calls: thin entries into its serving component (``control/serving.py``).

A mixin of :class:`cuberay.platform.control.controller.Controller`, which supplies ``serving``. A ServeApp's
driver deploys, updates and removes its app through these, and `cuberay serve` changes traffic through them:
nothing else writes Serve's declarative config.
"""

from __future__ import annotations

from typing import Any, Mapping

from cuberay.platform.control.store import ServeChangeRecord


class ServeAPI:
    """Calls made by `cuberay serve` and by a ServeApp's driver."""

    async def train_run(self, tenant: str, job: str | None = None, run: str | None = None,
                        previous: int = 0) -> dict[str, Any]:
        """A SUCCEEDED TrainJob run to serve: its id, training config, entrypoint and storage path."""
        return self.serving.train_run(tenant, job, run, previous)

    async def serve_deploy(self, job_id: str, attempt: int, entry: Mapping[str, Any], note: str = "") -> dict:
        """The driver's deploy or update of its app's Serve entry; the weights the app serves."""
        return await self.serving.deploy(job_id, attempt, entry, note)

    async def serve_undeploy(self, job_id: str, attempt: int) -> bool:
        """The driver's removal of its app from Serve as its attempt ends."""
        return await self.serving.undeploy(job_id, attempt)

    async def serve_traffic(self, job_id: str, user: str, action: str, changes: Mapping[str, Any],
                            note: str = "") -> dict[str, Any]:
        """Change a running app's traffic (a rollout step, an automatic rollback, a rate limit); the new config."""
        return await self.serving.change_traffic(job_id, user, action, changes, note)

    async def serve_rollback(self, job_id: str, user: str, to: int | None = None) -> dict[str, Any]:
        """Restore the weights before the app's last rollout, or those of change ``to``; the new config."""
        return await self.serving.rollback(job_id, user, to)

    async def serve_delete(self, job_id: str, user: str) -> ServeChangeRecord:
        """After the app's job was cancelled: take it off Serve if its driver did not, and record the delete."""
        return await self.serving.delete(job_id, user)

    async def serve_history(self, app: str, limit: int | None = 100) -> list[ServeChangeRecord]:
        return self.serving.history(app, limit)
