"""The cuberay router: an ingress deployment in front of one deployment per model version.

Ray Serve splits traffic only among replicas of one deployment, so the split
between versions, the mirror and the rate limit live here. The traffic config
arrives as ``user_config``: changing weights through the declarative Serve
config calls ``reconfigure`` in the running replicas (no restart), which is how
rollouts move traffic. Each ingress replica enforces its share of the app's rate limit (plan.traffic).
A request of the wrong shape is a 400 that says what was expected; a version's failure a
500 with a request id, its traceback only in the replica's log (``answers``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import JSONResponse

from cuberay.serve.answers import VERSION_HEADER, BadRequest, bad_request, client_error, internal_error, json_body
from cuberay.serve.metrics import ServeMetrics
from cuberay.serve.traffic import Policy, retry_after_header


def too_many_requests(wait_s: float) -> JSONResponse:
    return JSONResponse({"error": "rate limit exceeded; retry later"}, status_code=429,
                        headers={"Retry-After": retry_after_header(wait_s)})


class TrafficMixin:
    """What the router and the multiplexed deployment share: config, limit, split, mirror, stats."""

    app_name = ""
    policy: Policy
    metrics: ServeMetrics

    def reconfigure(self, config: dict) -> None:
        self.policy = Policy(config, time.monotonic())

    async def stats(self, window_s: float | None = None) -> dict:
        # On the replica's event loop, where requests are counted: Serve runs a plain method in a thread, and
        # reading the samples while a request appends one fails ("deque mutated during iteration").
        return {"weights": dict(self.policy.config["weights"]), "traffic": dict(self.policy.config),
                "versions": self.metrics.snapshot(window_s)}

    def _sticky_key(self, request: Any) -> str | None:
        header = self.policy.sticky_header
        return request.headers.get(header) if header and isinstance(request, Request) else None


class _AppHandles(dict):
    """Version -> handle; a version given by its Serve app's name (a bound application) gets its app handle
    on first use (the apps of one config deploy together, so it may not exist yet when the router starts)."""

    def __getitem__(self, key: str) -> DeploymentHandle:
        value = super().__getitem__(key)
        if isinstance(value, str):
            value = serve.get_app_handle(value)
            self[key] = value
        return value


@serve.deployment(name="router", max_ongoing_requests=256)
class Router(TrafficMixin):
    """Splits each request by weight to a version's handle; copies a share to the shadow."""

    def __init__(self, app: str, handles: dict[str, DeploymentHandle | str]) -> None:
        self.app_name = app
        self.handles = _AppHandles(handles)
        self.metrics = ServeMetrics(app)
        self._mirrors: set[asyncio.Task] = set()

    async def __call__(self, request: Any) -> Any:
        wait = self.policy.admit(time.monotonic())
        if wait:
            return too_many_requests(wait)
        try:
            payload = await json_body(request)
        except BadRequest as err:
            return bad_request(err)
        version, shadow = self.policy.route(self._sticky_key(request))
        if shadow is not None:
            task = asyncio.create_task(self._mirror(shadow, payload))
            self._mirrors.add(task)  # a reference, or the loop may drop the task
            task.add_done_callback(self._mirrors.discard)
        started = time.perf_counter()
        try:
            result = await self.handles[version].remote(payload)
        except Exception as err:  # noqa: BLE001 - a version's failure is an answer, counted
            bad = client_error(err)  # the caller's mistake, not the version's: no error in its health
            self.metrics.record(version, (time.perf_counter() - started) * 1000, error=bad is None)
            return bad_request(bad, version) if bad else internal_error(err, self.app_name, version)
        self.metrics.record(version, (time.perf_counter() - started) * 1000, error=False)
        return JSONResponse(result, headers={VERSION_HEADER: version})

    async def _mirror(self, shadow: str, payload: Any) -> None:
        """Send a copy to the shadow; its answer and its failures are counted, never returned."""
        started = time.perf_counter()
        try:
            await self.handles[shadow].remote(payload)
            failed = False
        except Exception:  # noqa: BLE001 - the shadow must never affect the caller
            failed = True
        self.metrics.record(shadow, (time.perf_counter() - started) * 1000, error=failed, mirrored=True)
