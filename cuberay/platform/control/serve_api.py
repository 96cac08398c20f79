"""The controller's serving API: which trained run to serve, and the traffic history of serving apps.

A mixin of :class:`cuberay.platform.control.controller.Controller` (it supplies
``store`` and ``platform``).
"""

from __future__ import annotations

from typing import Any

from cuberay.errors import NotFoundError
from cuberay.platform.api.records import ServeChangeRecord
from cuberay.platform.control.endpoint import endpoint
from cuberay.platform.control.guard import Principal
from cuberay.platform.policy.states import JobState


class ServeAPI:
    """Calls made by `cuberay serve` and by a ServeApp's driver."""

    @endpoint
    async def train_run(self, who: Principal, tenant: str, job: str | None = None, run: str | None = None,
                        previous: int = 0) -> dict[str, Any]:
        """A SUCCEEDED TrainJob run to serve: its id, training config, entrypoint and storage path."""
        done = [r for r in self.store.list_jobs(tenant, [JobState.SUCCEEDED]) if r.kind == "TrainJob"
                and (r.id == run if run else r.name == job)]
        done.sort(key=lambda r: (r.submit_time, r.seq), reverse=True)
        what = f"run {run!r}" if run else f"TrainJob {job!r}"
        if len(done) <= previous:
            found = f"only {len(done)} SUCCEEDED run(s)" if done else "no SUCCEEDED run"
            raise NotFoundError(f"{what} of tenant {tenant!r} has {found} (asked for the latest"
                                f"{f' minus {previous}' if previous else ''}); train it first with `cuberay "
                                f"submit`, or name a run id that SUCCEEDED (`cuberay queue` lists jobs)")
        rec = done[previous]
        spec = rec.spec.get("spec") or {}
        return {"id": rec.id, "config": spec.get("config") or {}, "entrypoint": spec.get("entrypoint"),
                "storage_path": str(self._tenant_storage(tenant))}

    @endpoint
    async def serve_change(self, who: Principal, app: str, action: str, weights: dict[str, float],
                           note: str = "") -> ServeChangeRecord:
        """Record a traffic change of a serving app (deploy, rollout step, rollback, delete)."""
        app = who.target.id
        self.store.add_event("serve", f"{action} by {who.user}: {weights}" + (f" ({note})" if note else ""), app)
        return self.store.add_serve_change(app, who.user, action, weights, note)

    @endpoint
    async def serve_history(self, who: Principal, app: str, limit: int | None = 100) -> list[ServeChangeRecord]:
        return self.store.serve_changes(who.target.id, limit)
