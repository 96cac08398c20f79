"""Serve's REST API on the dashboard, as the serving component uses it: read the declarative apps, write them all.

Synchronous (``requests``, through Ray's own Serve client for its token authentication), with a
timeout on every call; the component runs these in threads.
"""

from __future__ import annotations

from typing import Any

from cuberay.errors import ServeDeployError
from cuberay.platform.policy.serving import applications_of

TIMEOUT_S = 60.0
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
