"""The ServeApp driver: the app on Ray Serve, replicas on the allocated nodes, until it is stopped."""

from __future__ import annotations

from typing import Any

from cuberay.platform import client
from cuberay.platform.api.records import JobContext
from cuberay.platform.runner import say


def run(job: Any, ctx: JobContext) -> int:
    from cuberay.serve.service import run_service

    return run_service(job, ctx, client.driver_api(), say)
