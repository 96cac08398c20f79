"""The TrainJob driver: the Ray Train trainer of the spec's backend in function mode, worker i pinned to node i;
a command gang in command mode (an MPI launcher and its hosts with ``mpi``)."""

from __future__ import annotations

import json
from typing import Any

from cuberay.kinds.task.driver import run as run_command_gang
from cuberay.platform import client
from cuberay.platform.api.records import JobContext
from cuberay.platform.runner import EXIT_OK, say


def run(job: Any, ctx: JobContext) -> int:
    if not job.spec.entrypoint:
        return run_command_gang(job, ctx, mpi_slots=job.spec.mpi.slots_per_worker if job.spec.mpi else None)
    from cuberay.train.checkpoints import CheckpointReporter
    from cuberay.train.torch_launcher import run_train_function

    request = job.worker_request()
    job_id, attempt = ctx.record.id, int(ctx.attempt)

    def run_once(node_ids: list[str]) -> dict:
        return run_train_function(
            job.spec.entrypoint, config=dict(job.spec.config), node_ids=node_ids,
            resources_per_worker=request.to_ray(), use_gpu=request.resources.get("GPU", 0.0) > 0,
            storage_path=ctx.storage_path, name=job_id,
            # Ray Train owns max_failures in function mode: it restarts the worker group on the same nodes
            # from the last checkpoint; the controller does not retry on top (docs/architecture.md, Recovery).
            max_failures=job.spec.max_failures,
            deepspeed_config=job.spec.deepspeed_config(),
            callbacks=[CheckpointReporter(job_id, attempt)],
            env=dict(job.spec.env), rdma_fabric=request.rdma_fabric, job_id=job_id, backend=job.spec.backend)

    if job.min_workers == job.max_workers:
        result = run_once(list(ctx.node_ids))
    else:  # elastic: admission may grow or shrink it while it runs (cuberay/train/elastic.py)
        from cuberay.train.elastic import run_elastic

        result = run_elastic(run_once, job_id=job_id, attempt=attempt, node_ids=list(ctx.node_ids),
                             api=client.driver_api(), say=say)
    say(f"final metrics {json.dumps(result.get('metrics') or {}, default=str)}")
    say(f"checkpoint {result.get('checkpoint_path')}")
    return EXIT_OK
