"""The toy kind's driver: it says its message, names the gang the controller admitted for it, and exits."""

from __future__ import annotations

import os
from typing import Any

from cuberay import kinds
from cuberay.platform.api.records import JobContext


def run(job: Any, ctx: JobContext) -> int:
    nodes = list(ctx.node_ids)
    print(f"toy {ctx.record.id} attempt {ctx.attempt}: {job.spec.message}; a gang of {len(nodes)} on "
          f"{len(set(nodes))} node(s); {kinds.KINDS_ENV}={os.environ.get(kinds.KINDS_ENV)}", flush=True)
    return job.spec.exit_code
