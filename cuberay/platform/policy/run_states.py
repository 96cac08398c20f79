"""A pipeline run's and a step's states: plain enums, apart from the pipeline policy (policy/pipelines.py), so the
records that carry them load without the pipeline's templates and schedules."""

from __future__ import annotations

import enum


class StepState(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    CANCELLED = "CANCELLED"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"

    @property
    def is_terminal(self) -> bool:
        return self not in (StepState.PENDING, StepState.RUNNING)


class RunState(str, enum.Enum):
    WAITING = "WAITING"      # a tick or a request that has not started (CubeStudio's "comed")
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"      # dropped by keep_last before it started

    @property
    def is_terminal(self) -> bool:
        return self not in (RunState.WAITING, RunState.RUNNING)
