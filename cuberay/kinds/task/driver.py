"""The Task driver (and a command-mode TrainJob's): a command gang, one placement group bundle per worker."""

from __future__ import annotations

from typing import Any

from cuberay.platform.api.records import JobContext
from cuberay.platform.runner import EXIT_FAILED, EXIT_OK, say


def run(job: Any, ctx: JobContext, mpi_slots: int | None = None) -> int:
    from cuberay.train.gang import run_command_gang

    roles, role_requests = None, job.role_requests()
    if role_requests:  # a gang with roles: the workers first, then each role's members, one per node id
        workers = len(ctx.node_ids) - sum(count for _, _, count, _ in role_requests)
        roles = [(kind, index, request.to_ray()) for kind, index, request in job.members(workers)]
    code = run_command_gang(
        job.spec.command, node_ids=list(ctx.node_ids), bundle=job.worker_request().to_ray(),
        env=dict(job.spec.env), job=ctx.identity, timeout_s=job.max_runtime_s,
        rdma_fabric=job.worker_request().rdma_fabric, mpi_slots=mpi_slots, roles=roles)
    if code != 0:
        say(f"the gang exited with code {code}")
    return EXIT_OK if code == 0 else EXIT_FAILED
