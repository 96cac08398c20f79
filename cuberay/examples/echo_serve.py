"""A tiny Ray Serve model for the ServeApp example (configs/jobs/serve-echo.yaml): it echoes the request.

``Echo`` is a plain class, the body of a Serve deployment: cuberay wraps each
version of a ServeApp in a deployment with that version's name and replicas.
The reply says which version answered, so a traffic split is visible from a
few requests. Nothing heavy is imported at module level (Ray only when a
request arrives), so checking the spec's import path stays instant.
"""

from __future__ import annotations

import json
from typing import Any


class Echo:
    """Replies ``{"version": <deployment name>, "echo": <request body as text>}``."""

    async def __call__(self, request: Any) -> dict[str, str]:
        if hasattr(request, "body"):  # HTTP straight to this deployment
            text = (await request.body()).decode("utf-8", errors="replace")
        else:  # the cuberay router passes the parsed JSON body
            text = json.dumps(request)
        return {"version": _deployment_name(), "echo": text}


def _deployment_name() -> str:
    try:
        from ray import serve

        return serve.get_replica_context().deployment
    except Exception:  # noqa: BLE001 - outside a Serve replica (a plain call in a test): no name to report
        return "local"
