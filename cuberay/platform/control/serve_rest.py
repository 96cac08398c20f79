"""Serve as the serving component uses it: the REST API on the dashboard (read the declarative apps, write them
all) and an app's ingress (its live traffic figures).

Synchronous (``requests``, through Ray's own Serve client for its token authentication; a Serve handle), with a
timeout on every call; the component runs these in threads.
"""

from __future__ import annotations

from typing import Any

from cuberay.errors import ServeDeployError
from cuberay.platform.policy.serving import applications_of

TIMEOUT_S = 60.0
STATS_TIMEOUT_S = 10.0  # a page's refresh waits on it: a router busier than this is shown as unreadable
APPLICATIONS = "/api/serve/applications/"  # GET: details of every app; PUT: the whole declarative config


class ServeRest:
    """One cluster's Serve REST API (``dashboard_url``: http://host:port)."""

    def __init__(self, dashboard_url: str, timeout_s: float = TIMEOUT_S) -> None:
        self.url = dashboard_url
        self.timeout_s = timeout_s
        self._sdk: Any = None

    def applications(self) -> list[dict[str, Any]]:
        """The declarative entries Serve holds now."""
        return applications_of(self._request("GET").json())

    def put(self, config: dict[str, Any]) -> None:
        """Replace the whole declarative config (every app it does not list is removed)."""
        self._request("PUT", config)

    def stats(self, name: str, window_s: float) -> dict[str, Any]:
        """App ``name``'s router's figures (cuberay/serve/router.py ``stats``): weights and per-version counts."""
        from ray import serve

        try:
            return serve.get_app_handle(name).stats.remote(window_s).result(timeout_s=STATS_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - Serve raises many kinds here; the page says which
            raise ServeDeployError(f"cannot read app {name!r}'s traffic from its router ({type(err).__name__}: "
                                   f"{str(err)[:300]})") from None

    def _request(self, method: str, config: dict[str, Any] | None = None) -> Any:
        import requests

        try:
            response = self._client()._do_request(method, APPLICATIONS, json_data=config, timeout=self.timeout_s)
        except (requests.RequestException, ConnectionError) as err:
            raise ServeDeployError(f"cannot reach Serve's REST API at {self.url} ({type(err).__name__}: {err}); "
                                   f"is the Ray dashboard up? `cuberay serve status` retries later") from None
        if response.status_code != 200:
            raise ServeDeployError(f"Serve's REST API at {self.url} answered {method} with "
                                   f"{response.status_code}: {response.text[:500]}")
        return response

    def _client(self) -> Any:
        if self._sdk is None:
            from ray.dashboard.modules.serve.sdk import ServeSubmissionClient

            self._sdk = ServeSubmissionClient(self.url)
        return self._sdk
