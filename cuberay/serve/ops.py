"""What `cuberay serve ...` does: deploy, status, rollout, rollback, history, delete (a connected client).

Deploying submits the ServeApp to the controller like any job, after the checks
that need the cluster (checkpoints, engines), so bad input fails before anything is
queued; the controller refuses a route or name another active app holds. Traffic
changes are the controller's to make (it is the only writer of Serve's declarative
config, and records each change with who made it); this module asks it, then waits
until the app's ingress runs the new config.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from cuberay.errors import CuberayError, NotFoundError, SpecError
from cuberay.kinds.serveapp import is_serve_app, serve_kinds
from cuberay.platform import client
from cuberay.platform.api.records import MAX_PAGE
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec
from cuberay.platform.spec.serve import MAX_STEP_TIMEOUT_S, ServeApp
from cuberay.serve import deploy, rollout
from cuberay.serve.config import traffic_of
from cuberay.serve.probe import probing
from cuberay.serve.service import entry_for

STATUS_WINDOW_S = 60.0  # the figures `cuberay serve status` shows: the last minute
_ACTIVE = [JobState.QUEUED, JobState.PREEMPTED, JobState.ADMITTED, JobState.RUNNING]


def _load(spec_or_path: Any) -> ServeApp:
    job = load_spec(Path(spec_or_path) if isinstance(spec_or_path, (str, os.PathLike)) and
                    Path(spec_or_path).suffix in (".yaml", ".yml", ".json") else spec_or_path)
    if not is_serve_app(job.kind):
        raise SpecError(f"`cuberay serve deploy` takes a ServeApp, got kind {job.kind}; submit other kinds with "
                        f"`cuberay submit`", path="kind")
    return job


def _apps(name: str, tenant: str | None, states: list[JobState] | None = None) -> list[Any]:
    """The ServeApp records called ``name`` (or with that job id), oldest first.

    A filtered read (kind, state and the name in the store, a page at a time), not every job of the tenant: at a
    deep backlog of other jobs that read took seconds.
    """
    found: list[Any] = []
    offset = 0
    while True:
        page = client.api().job_page(tenant=tenant, kinds=serve_kinds(), name=name, offset=offset, limit=MAX_PAGE,
                                     states=None if states is None else [s.value for s in states])
        found += [r for r in page.records if name in (r.name, r.id)]  # the store's filter is a substring
        offset += MAX_PAGE
        if offset >= page.total:
            return sorted(found, key=lambda r: (r.submit_time, r.id))


def find(name: str, tenant: str | None = None) -> Any:
    """The active ServeApp record called ``name`` (or with that job id)."""
    records = _apps(name, tenant, _ACTIVE)
    if not records:
        raise NotFoundError(f"no running serving app {name!r}; deploy one with `cuberay serve deploy FILE`")
    if len(records) > 1:
        raise SpecError(f"{name!r} names apps of several tenants ({', '.join(r.id for r in records)}); pass "
                        f"--tenant")
    return records[0]


def _app(record: Any) -> ServeApp:
    return load_spec(record.spec)  # type: ignore[return-value]


def deploy_app(spec_or_path: Any, tenant: str | None = None, *, wait_s: float = 300.0,
               user: str | None = None) -> Any:
    """Check, submit and wait until Serve runs the app; the job record."""
    app = _load(spec_or_path)
    user = user or client.current_user()
    if tenant or app.tenant is None:  # the controller's resolution (CUBERAY_TENANT, the platform's defaults)
        app = app.with_tenant(client.tenant_choice(app, tenant, user=user)["tenant"])  # type: ignore[assignment]
    entry_for(app, [], client.api())  # checkpoints, engines: fail here, not in the driver
    ref = client.submit(app, app.tenant, user=user)
    deadline = time.monotonic() + wait_s
    while True:
        record = client.status(ref.id)
        if record.state.is_terminal:
            raise CuberayError(f"app {ref.id} ended {record.state.value}: {record.message or record.reason}; "
                               f"see `cuberay logs {ref.id}`")
        if record.state == JobState.RUNNING and (deploy.app_status(app.serve_name) or {}).get("status") == "RUNNING":
            return record
        if time.monotonic() > deadline:
            return record  # queued or starting: `cuberay serve status` follows it
        time.sleep(1.0)


def app_url(record: Any) -> str | None:
    """The URL an app's route answers at (None: it has no route, as a graph version's own Serve app)."""
    return deploy.url(_app(record).spec.route_prefix)


def status(name: str, tenant: str | None = None) -> dict[str, Any]:
    record = find(name, tenant)
    app = _app(record)
    serve_details = deploy.details()
    serve_state = deploy.app_status(app.serve_name, serve_details) or {}
    figures = deploy.stats(app.serve_name, STATUS_WINDOW_S) if serve_state.get("status") == "RUNNING" and \
        "vllm" not in app.spec.engines else {}
    return {"app": record.id, "state": record.state.value, "serve": serve_state.get("status", "NOT DEPLOYED"),
            "route": app.spec.route_prefix, "url": deploy.url(app.spec.route_prefix, serve_details),
            "nodes": sorted({a["node_id"] for a in record.allocation or []}),
            "weights": figures.get("weights"), "versions": figures.get("versions", {})}


def _change(record: Any, app: ServeApp, user: str, action: str, weights: dict, note: str) -> None:
    with client.acting_as(user):
        traffic = client.api().serve_traffic(record.id, action, {"weights": dict(weights)}, note)
    deploy.wait_traffic(app.serve_name, traffic)


def run_rollout(name: str, to: str, tenant: str | None = None, *, steps: Any = None,
                interval_s: float | None = None, step_timeout_s: float | None = None,
                say=print, probe: tuple[bytes, float] | None = None) -> rollout.Outcome:
    """Move all traffic to version ``to`` step by step; roll back by itself if a step breaks a limit or gets
    fewer than ``min_requests`` within ``step_timeout_s``. ``probe``: (request body, per second) to send to the
    app's route meanwhile (cuberay/serve/probe.py)."""
    record = find(name, tenant)
    app = _app(record)
    names = [v.name for v in app.spec.versions]
    if to not in names:
        raise SpecError(f"version {to!r} is not one of {', '.join(names)} of app {name!r}", path="--to")
    user = client.current_user()
    current = traffic_of(deploy.deployed_config(app.serve_name))["weights"]
    spec = app.spec.rollout
    interval = spec.interval_s if interval_s is None else interval_s
    timeout = max(interval, spec.step_timeout_s if step_timeout_s is None else step_timeout_s)
    if timeout > MAX_STEP_TIMEOUT_S:
        raise SpecError(f"a step may wait at most {MAX_STEP_TIMEOUT_S:g}s (the figures a serving app keeps), not "
                        f"{timeout:g}s", path="--interval" if interval > MAX_STEP_TIMEOUT_S else "--step-timeout")
    limits = rollout.Thresholds(spec.max_error_rate, spec.max_p99_ms, spec.min_requests, timeout)

    def apply(weights: dict, note: str) -> None:
        automatic = note.startswith("automatic rollback")
        # An automatic rollback is the rollout's own step: made by the same user, its note says why.
        _change(record, app, user, "rollback" if automatic else "rollout", weights, note)
        say(f"{note}: weights {weights}")

    def run() -> rollout.Outcome:
        return rollout.run(current, to, steps if steps is not None else spec.steps, interval, limits, apply=apply,
                           stats=lambda s: deploy.stats(app.serve_name, s)["versions"], wait=time.sleep,
                           clock=time.monotonic)

    if probe is None:
        return run()
    where = deploy.url(app.spec.route_prefix)
    if where is None:
        raise SpecError(f"app {name!r} has no route to probe; send it requests yourself", path="--probe")
    with probing(where, probe[0], probe[1]) as seen:
        outcome = run()
    say(f"probe: {len(seen)} requests to {where}, {sum(1 for code in seen if code == 200)} answered 200")
    return outcome


def rollback(name: str, tenant: str | None = None, to: int | None = None) -> dict[str, float]:
    """Restore the weights the app had before its last rollout (or, without one, before its last change), or
    those of change ``to`` (an id from ``history``); the weights restored."""
    record = find(name, tenant)
    app = _app(record)
    traffic = client.api().serve_rollback(record.id, to)
    deploy.wait_traffic(app.serve_name, traffic)
    return traffic["weights"]


def history(name: str, tenant: str | None = None) -> list[Any]:
    records = _apps(name, tenant)
    if not records:
        raise NotFoundError(f"no serving app {name!r} was ever deployed")
    return [c for r in records for c in client.api().serve_history(r.id, None)]


def delete(name: str, tenant: str | None = None) -> Any:
    """Cancel the app's job (its driver takes it off Serve); the controller makes sure Serve no longer has it."""
    record = find(name, tenant)
    app = _app(record)
    ended = client.cancel(record.id)
    deadline = time.monotonic() + 30
    while deploy.app_status(app.serve_name) is not None and time.monotonic() < deadline:
        time.sleep(0.5)
    client.api().serve_delete(record.id)
    return ended
