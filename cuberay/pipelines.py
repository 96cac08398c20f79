"""The Python API for pipelines (``cuberay pipeline ...`` is a thin layer over it)::

    import cuberay.pipelines as pipelines
    info = pipelines.submit("configs/pipelines/fan-out.yaml")   # stores it; runs it now if it has no schedule
    run = pipelines.wait(info["run"].id)
    run, steps = pipelines.status(run.id)

The file is read and checked here (step files relative to it, every template
variable), so a bad pipeline is a SpecError (exit 2) before the platform is asked.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from cuberay.platform import client
from cuberay.platform.api.records import PipelineStored


def _spec(source: Any) -> dict[str, Any]:
    from cuberay.platform.spec.pipeline import load_pipeline

    return load_pipeline(Path(source) if isinstance(source, os.PathLike) else source).model_dump(mode="json")


def submit(source: Any, tenant: str | None = None, *, run: bool = True, user: str | None = None) -> PipelineStored:
    """Store a pipeline (a path, YAML text, a mapping or a Pipeline); without a schedule it also runs now.

    Returns ``{"tenant", "pipeline", "scheduled", "run"}`` (``run``: the new RunRecord or None).
    """
    with client.acting_as(user):
        return client.api().pipeline_submit(_spec(source), tenant, run)


def run(name: str, tenant: str | None = None, *, params: Mapping[str, Any] | None = None,
        supersede: bool = False, user: str | None = None) -> Any:
    """A manual run of a stored pipeline. It waits its turn among the schedule's runs; with ``supersede``
    the pipeline's waiting and running runs are cancelled first."""
    with client.acting_as(user):
        return client.api().pipeline_run(name, tenant, dict(params or {}), supersede)


def stored(tenant: str | None = None) -> list[Any]:
    """The stored pipelines (of ``tenant``, else of every tenant the caller may read), with their next ticks."""
    return client.api().pipeline_list(tenant)


def runs(name: str | None = None, tenant: str | None = None) -> list[Any]:
    return client.api().pipeline_runs(name, tenant)


def status(ref: str) -> tuple[Any, list[Any]]:
    """(the run, its steps) for a run id, or for the latest run of the pipeline named ``ref``."""
    return client.api().pipeline_status(ref)


def cancel(ref: str) -> Any:
    return client.api().pipeline_cancel(ref)


def wait(ref: str, timeout: float | None = None, poll_s: float = 1.0) -> Any:
    """Block until the run ends; returns its record (TimeoutError after ``timeout`` seconds). Rides out a
    controller restart, as ``cuberay.wait`` does."""
    return client.wait_until_ended(lambda: client.driver_api().pipeline_status(ref)[0], "pipeline run", timeout,
                                   poll_s)
