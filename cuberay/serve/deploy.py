"""Read cuberay apps on a live Ray Serve: their declarative configs, states and per-version figures.

Serve's declarative config (``PUT /api/serve/applications/`` on the dashboard, what
``serve deploy`` uses) replaces every declaratively deployed app at once, so it has
one writer: the controller's serving component (``cuberay/platform/control/serving.py``),
which drivers and `cuberay serve` ask through the client. This module only reads, and
starts Serve itself where a driver needs it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from cuberay.errors import CuberayError, NotFoundError, ServeDeployError
from cuberay.platform.policy.serving import applications_of

PROXY_LOCATION_ENV = "CUBERAY_SERVE_PROXY_LOCATION"  # EveryNode (Serve's default) | HeadOnly


def dashboard_url() -> str:
    """The connected cluster's dashboard address (the Serve REST API lives there)."""
    import ray

    from cuberay.platform import client

    # A driver that joined before the dashboard published its address sees none; `ray job submit` users have
    # it in RAY_ADDRESS, and the controller always knows it.
    submit_address = os.environ.get("RAY_ADDRESS", "")
    url = ((ray._private.worker.get_dashboard_url() if ray.is_initialized() else None)
           or (submit_address if submit_address.startswith("http") else None) or client.api().dashboard_url())
    if not url:
        raise CuberayError("cannot find the Ray dashboard, where Serve's REST API lives; set RAY_ADDRESS to its "
                           "URL (e.g. http://127.0.0.1:8265)")
    return url if "://" in url else f"http://{url}"


def _client():
    from ray.dashboard.modules.serve.sdk import ServeSubmissionClient

    return ServeSubmissionClient(dashboard_url())


def ensure_serve() -> None:
    """Start Serve if it is not running; proxies per ``CUBERAY_SERVE_PROXY_LOCATION``."""
    from ray import serve

    serve.start(proxy_location=os.environ.get(PROXY_LOCATION_ENV, "EveryNode"))


def details() -> dict[str, Any]:
    return _client().get_serve_details()


def url(route_prefix: str | None, serve_details: dict[str, Any] | None = None) -> str | None:
    """Where Serve's HTTP proxy answers ``route_prefix`` on this machine (None: the app has no route)."""
    if not route_prefix:
        return None
    http = (serve_details if serve_details is not None else details()).get("http_options") or {}
    host = http.get("host") or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://{host}:{http.get('port', 8000)}{route_prefix}"


def deployed_configs() -> list[dict[str, Any]]:
    """The declarative configs of the deployed apps."""
    return applications_of(details())


def deployed_config(name: str) -> dict[str, Any]:
    for config in deployed_configs():
        if config["name"] == name:
            return config
    raise NotFoundError(f"no serving app {name!r} is deployed; `cuberay serve status` lists the apps")


def app_status(name: str, serve_details: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Serve's view of one app (status, deployments, replicas), None when absent; from ``serve_details`` when the
    caller has just read them."""
    return ((serve_details if serve_details is not None else details()).get("applications") or {}).get(name)


def wait_running(name: str, timeout_s: float = 180.0, poll_s: float = 0.5) -> dict[str, Any]:
    """Block until the app is RUNNING; raise with Serve's message if it fails to deploy."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = app_status(name) or {}
        state = status.get("status")
        if state == "RUNNING":
            return status
        if state in ("DEPLOY_FAILED", "UNHEALTHY"):
            raise ServeDeployError(f"serving app {name!r} is {state}: {status.get('message')}")
        if time.monotonic() > deadline:
            raise ServeDeployError(f"serving app {name!r} is not running after {timeout_s:.0f}s "
                                   f"(last state {state}: {status.get('message')})")
        time.sleep(poll_s)


def wait_traffic(name: str, traffic: dict, timeout_s: float = 60.0) -> None:
    """Block until the ingress answers with ``traffic`` (its reconfigure has run)."""
    deadline = time.monotonic() + timeout_s
    while stats(name).get("traffic") != traffic:
        if time.monotonic() > deadline:
            raise ServeDeployError(f"serving app {name!r} did not take traffic config {traffic} "
                                   f"within {timeout_s:.0f}s")
        time.sleep(0.2)


def stats(name: str, window_s: float | None = None) -> dict[str, Any]:
    """Per-version figures from the app's ingress (one replica's view; the router runs one by default)."""
    from ray import serve

    _join()
    return serve.get_app_handle(name).stats.remote(window_s).result(timeout_s=30)


def _join() -> None:
    """Join the platform's Ray cluster unless this process has (a CLI command reaches the controller over HTTP
    and joins Ray only for what needs it, such as asking an app's ingress)."""
    import ray

    if not ray.is_initialized():
        from cuberay.platform import client

        client.connect()
