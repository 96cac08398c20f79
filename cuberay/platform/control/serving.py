"""The controller's serving component: the one writer of Serve's declarative config, and the apps' traffic history.

Serve's declarative config (``PUT /api/serve/applications/``) replaces every declarative app at once, so two
writers that each read it, change their app and write it all back lose each other's change. Here every change
(a driver's deploy, resize and removal; a rollout step, a rollback, a delete) is one serialised step under this
component's own lock: read what Serve holds, change one app, write, read again and compare. A write Serve does
not report back (a writer outside cuberay, a lost write) is made again on a fresh read, up to ``WRITES`` times,
then fails with ServeDeployError. The REST calls run in threads, so the controller's admission loop never waits
for them. A traffic change is recorded (a row of ``serve_changes`` and an event: who, when, why) in the same step.

Drivers and `cuberay serve` reach this through the controller's serving endpoints (its methods ``train_run`` and
``serve_*`` below, behind the controller's access rules); the decisions
(which weights an entry gets, whether a write held, where a rollback goes) are ``policy/serving.py``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Callable, Mapping

from cuberay import kinds
from cuberay.errors import AdmissionError, CuberayError, NotFoundError, ServeDeployError, SpecError
from cuberay.kinds.serveapp import is_serve_app
from cuberay.platform.api.records import ServeStats, TrainRun, VersionFigures
from cuberay.platform.control.guard import Principal
from cuberay.platform.control.serve_rest import ServeRest
from cuberay.platform.control.store import JobRecord, ServeChangeRecord, Store
from cuberay.platform.policy import serving as pol
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec
from cuberay.platform.spec.serve import ServeApp

log = logging.getLogger("cuberay.serving")

WRITES = 3  # writes of one change before giving up on a config that something else keeps changing
Change = Callable[[list[dict[str, Any]], "dict[str, Any] | None"], "dict[str, Any] | None"]


class Serving:
    """Serving apps of one platform: ``rest`` is the cluster's Serve API, ``tenant_storage`` the controller's rule."""

    def __init__(self, store: Store, rest: ServeRest, tenant_storage: Callable[[str], Path]) -> None:
        self.store = store
        self.rest = rest
        self.tenant_storage = tenant_storage
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ the app's driver

    async def deploy(self, job_id: str, attempt: int, entry: Mapping[str, Any], note: str) -> dict[str, float]:
        """Deploy or update the app of the running attempt (its driver's entry, checked); the weights it serves.

        A running app keeps the weights it has (a resize does not undo a rollout), a new attempt gets those of
        its last recorded change; the first deploy is recorded as a change of the submitter's.
        """
        rec, app = self._app(job_id)
        if not rec.state.holds_resources or rec.attempts != attempt:
            raise CuberayError(f"attempt {attempt} of {job_id} is not its running one (the job is "
                               f"{rec.state.value}, attempt {rec.attempts}); a stale driver does not deploy")
        entry = pol.normalized(dict(entry))
        if entry.get("name") != app.serve_name or entry.get("route_prefix") != app.spec.route_prefix:
            problem = (f"refused to deploy Serve app {entry.get('name')!r} at route {entry.get('route_prefix')!r} "
                       f"for job {job_id}, which serves {app.serve_name!r} at {app.spec.route_prefix!r}")
            self.store.add_event("denied", problem, job_id)
            raise AdmissionError(problem)
        async with self._lock:
            history = self.store.serve_changes(job_id, 1)
            remembered = history[-1].weights if history and history[-1].action != pol.DELETE else None

            def change(apps: list[dict[str, Any]], current: dict[str, Any] | None) -> dict[str, Any]:
                holder = pol.route_holder(apps, app.serve_name, app.spec.route_prefix)
                if holder is not None:
                    raise AdmissionError(f"route_prefix {app.spec.route_prefix!r} is already served by Serve app "
                                         f"{holder!r}; choose another route_prefix, or take that app off Serve")
                return pol.deploy_entry(entry, current, remembered)

            before, after = await self._write(app.serve_name, change)
            weights = pol.traffic_of(after)["weights"] if after and pol.has_traffic(after) else app.spec.weights()
            if not history:
                self._record(rec, rec.user, pol.DEPLOY, weights, note)
            else:
                self.store.add_event("serve", f"{'updated' if before else 'deployed'} {app.serve_name} with "
                                              f"weights {weights} ({note})", job_id)
            return weights

    async def undeploy(self, job_id: str, attempt: int) -> bool:
        """Take the app off Serve as its attempt ends; False (nothing done) when a newer attempt runs it."""
        rec, app = self._app(job_id)
        if rec.state.holds_resources and rec.attempts != attempt:
            return False
        async with self._lock:
            before, _ = await self._write(app.serve_name, lambda apps, current: None)
        if before is not None:
            self.store.add_event("serve", f"took {app.serve_name} off Serve: attempt {attempt} ended", job_id)
        return before is not None

    # ------------------------------------------------------------------ traffic (`cuberay serve`)

    async def change_traffic(self, job_id: str, user: str, action: str, changes: Mapping[str, Any],
                             note: str = "") -> dict[str, Any]:
        """Change a running app's traffic config (weights, mirror, rate limit) and record it; the new config."""
        rec, app = self._running(job_id)
        if action not in pol.CHANGE_ACTIONS:
            raise SpecError(f"a traffic change is recorded as one of {', '.join(pol.CHANGE_ACTIONS)}, not {action!r}")
        checked = pol.check_traffic(pol.normalized(dict(changes)), [v.name for v in app.spec.versions])
        async with self._lock:
            _, after = await self._write(app.serve_name,
                                         lambda apps, current: pol.with_traffic(_deployed(app, current), **checked))
            traffic = pol.traffic_of(after)
            self._record(rec, user, action, traffic["weights"], note)
            return traffic

    async def rollback(self, job_id: str, user: str, to: int | None = None) -> dict[str, Any]:
        """Restore the weights before the app's last rollout (or last change), or those of change ``to``."""
        rec, app = self._running(job_id)
        versions = [v.name for v in app.spec.versions]
        async with self._lock:
            changes = self.store.serve_changes(job_id, None)
            chosen: dict[str, Any] = {}

            def change(apps: list[dict[str, Any]], current: dict[str, Any] | None) -> dict[str, Any]:
                deployed = _deployed(app, current)
                chosen["from"] = pol.traffic_of(deployed)["weights"]
                weights, chosen["note"] = pol.rollback_target(changes, chosen["from"], to)
                chosen["weights"] = pol.check_weights(weights, versions)
                return pol.with_traffic(deployed, weights=chosen["weights"])

            _, after = await self._write(app.serve_name, change)
            self._record(rec, user, pol.ROLLBACK, chosen["weights"], f"{chosen['note']}, from {chosen['from']}")
            return pol.traffic_of(after)

    async def delete(self, job_id: str, user: str) -> ServeChangeRecord:
        """After the app's job ended: make sure Serve no longer has it, and record the delete."""
        rec, app = self._app(job_id)
        if not rec.state.is_terminal:
            raise CuberayError(f"app {job_id} is still {rec.state.value}; cancel it first (`cuberay serve delete "
                               f"{rec.name}` does both)")
        async with self._lock:
            before, _ = await self._write(app.serve_name, lambda apps, current: None)
            return self._record(rec, user, pol.DELETE, {}, "app deleted, quota freed"
                                + ("; taken off Serve" if before is not None else ""))

    def history(self, job_id: str, limit: int | None = 100) -> list[ServeChangeRecord]:
        return self.store.serve_changes(job_id, limit)

    async def stats(self, job_id: str, window_s: float) -> ServeStats:
        """The app's live traffic per version from its router; a note instead where it has none to give."""
        rec, app = self._app(job_id)
        if not 1.0 <= window_s <= pol.STATS_WINDOW_MAX_S:
            raise SpecError(f"window_s {window_s:g} is outside 1..{pol.STATS_WINDOW_MAX_S:g} s (what a router "
                            f"keeps); ask for a window in that range", path="window_s")
        note = pol.stats_note(rec.state.value, app.spec.engines)
        if note is None:
            try:
                figures = await asyncio.to_thread(self.rest.stats, app.serve_name, window_s)
            except ServeDeployError as err:
                note = str(err)
        if note is not None:
            return ServeStats(app=rec.id, window_s=window_s, weights={}, versions={}, note=note)
        return ServeStats(app=rec.id, window_s=window_s, weights=dict(figures.get("weights") or {}),
                          versions={v: VersionFigures(**pol.figures(f, window_s))
                                    for v, f in (figures.get("versions") or {}).items()})

    def find_train_run(self, tenant: str, job: str | None = None, run: str | None = None,
                       previous: int = 0) -> TrainRun:
        """A SUCCEEDED TrainJob run to serve: its id, training config, entrypoint and storage path."""
        servable = {k.name for k in kinds.registered() if k.servable}
        done = [r for r in self.store.list_jobs(tenant, [JobState.SUCCEEDED]) if r.kind in servable
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
        return TrainRun(id=rec.id, config=spec.get("config") or {}, entrypoint=spec.get("entrypoint"),
                        storage_path=str(self.tenant_storage(tenant)))

    # ------------------------------------------------------------------ the endpoints (ControllerAPI)
    # The controller's actor methods admit the caller and hand the call here with its Principal.

    async def train_run(self, who: Principal, tenant: str, job: str | None = None, run: str | None = None,
                        previous: int = 0) -> TrainRun:
        """A SUCCEEDED TrainJob run to serve: its id, training config, entrypoint and storage path."""
        return self.find_train_run(tenant, job, run, previous)

    async def serve_deploy(self, who: Principal, job_id: str, attempt: int, entry: Mapping[str, Any],
                           note: str = "") -> dict[str, Any]:
        """The driver's deploy or update of its app's Serve entry; the weights the app serves."""
        return await self.deploy(job_id, attempt, entry, note)

    async def serve_undeploy(self, who: Principal, job_id: str, attempt: int) -> bool:
        """The driver's removal of its app from Serve as its attempt ends."""
        return await self.undeploy(job_id, attempt)

    async def serve_traffic(self, who: Principal, job_id: str, action: str, changes: Mapping[str, Any],
                            note: str = "") -> dict[str, Any]:
        """Change a running app's traffic (a rollout step, an automatic rollback, a rate limit); the new config."""
        return await self.change_traffic(who.target.id, who.user, action, changes, note)

    async def serve_rollback(self, who: Principal, job_id: str, to: int | None = None) -> dict[str, Any]:
        """Restore the weights before the app's last rollout, or those of change ``to``; the new config."""
        return await self.rollback(who.target.id, who.user, to)

    async def serve_delete(self, who: Principal, job_id: str) -> ServeChangeRecord:
        """After the app's job was cancelled: take it off Serve if its driver did not, and record the delete."""
        return await self.delete(who.target.id, who.user)

    async def serve_history(self, who: Principal, app: str, limit: int | None = 100) -> list[ServeChangeRecord]:
        return self.history(who.target.id, limit)

    async def serve_stats(self, who: Principal, app: str, window_s: float = 60.0) -> ServeStats:
        return await self.stats(who.target.id, float(window_s))

    # ------------------------------------------------------------------ the serialised step

    async def _write(self, name: str, change: Change) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """One app's change, written and checked; the caller holds the lock. (entry before, entry after)."""
        assert self._lock.locked(), "Serve's config is written only under the serving lock"
        return await asyncio.to_thread(self._write_now, name, change)

    def _write_now(self, name: str, change: Change) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        problem = None
        for _ in range(WRITES):
            apps = self.rest.applications()
            current = next((a for a in apps if a["name"] == name), None)
            new = change(apps, current)
            new = None if new is None else pol.normalized(new)
            if (new is None and current is None) or (new is not None and current is not None
                                                      and pol.lost(pol.group(new), apps) is None):
                return current, new  # Serve already holds it: nothing to write
            config = pol.merged(apps, new, name)
            self.rest.put(config)
            removed = None if new else [name, *(c["name"] for c in pol.companions(current))]
            problem = pol.lost(config["applications"], self.rest.applications(), removed)
            if problem is None:
                return current, new
            log.warning("Serve did not keep the change of app %s (%s); writing it again on a fresh read", name,
                        problem)
        raise ServeDeployError(f"Serve did not keep the change of app {name!r} after {WRITES} writes ({problem}): "
                               f"something besides cuberay writes Serve's declarative config (e.g. `serve deploy` "
                               f"or a second controller); stop it, cuberay's controller must be its only writer")

    def _record(self, rec: JobRecord, user: str, action: str, weights: Mapping[str, float],
                note: str) -> ServeChangeRecord:
        self.store.add_event("serve", f"{action} by {user}: {dict(weights)}" + (f" ({note})" if note else ""), rec.id)
        return self.store.add_serve_change(rec.id, user, action, dict(weights), note)

    def _app(self, job_id: str) -> tuple[JobRecord, ServeApp]:
        rec = self.store.get_job(job_id)
        if not is_serve_app(rec.kind):
            raise SpecError(f"job {job_id} is a {rec.kind}, not a serving app; `cuberay serve status APP` takes a "
                            f"ServeApp")
        return rec, load_spec(rec.spec)  # type: ignore[return-value]

    def _running(self, job_id: str) -> tuple[JobRecord, ServeApp]:
        rec, app = self._app(job_id)
        if rec.state != JobState.RUNNING:
            raise CuberayError(f"app {job_id} is {rec.state.value}, not RUNNING, so it has no traffic to change; "
                               f"`cuberay serve status {rec.name}` shows where it stands")
        return rec, app


def _deployed(app: ServeApp, current: dict[str, Any] | None) -> dict[str, Any]:
    """The app's deployed entry, which a traffic change starts from."""
    if current is None:
        raise NotFoundError(f"serving app {app.serve_name!r} is not on Serve (yet); `cuberay serve status "
                            f"{app.name}` shows where it stands")
    if not pol.has_traffic(current):
        raise SpecError(f"serving app {app.serve_name!r} (engine vllm) has no traffic split to change; its versions "
                        f"are served by model name")
    return current
