"""The platform file's scheduler settings: the admission cycle's knobs and where job drivers run."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from cuberay.platform.spec.common import SpecModel
from cuberay.platform.spec.load import ray_resource_name

RayResourceName = Annotated[str, AfterValidator(ray_resource_name)]


class SchedulerSettings(SpecModel):
    """Knobs of the admission cycle."""

    backfill: bool = Field(True, description="EASY backfill: small jobs may jump a blocked one without delaying it.")
    reclaim: bool = Field(True, description="A tenant under its guarantee takes capacity back from borrowers.")
    preemption: bool = Field(True, description="Higher-priority jobs may preempt lower ones of the same tenant.")
    las_threshold_gpu_hours: float | None = Field(3.0, gt=0, description="Least-attained-service: jobs that used "
                                                  "more GPU-hours than this drop behind newer ones and may be "
                                                  "preempted by them (Tiresias-style); null = off.")
    max_drivers: int = Field(16, ge=1, description="Most job drivers running at once: Ray Jobs and small jobs' "
                                                    "Ray tasks together.")
    small_jobs: bool = Field(True, description="Run one-worker command Tasks as named Ray tasks without a driver "
                                               "process of their own (much faster to start); false: every job is "
                                               "a Ray Job.")
    cycle_interval_s: float = Field(2.0, gt=0, description="Seconds between admission cycles.")
    driver_resource: RayResourceName | None = Field(
        None, description="A Ray resource each job driver asks one unit of, so drivers run only on the nodes that "
                          "advertise it (worker nodes: on Kubernetes every worker group does, max_drivers each) and "
                          "the head runs none: with GCS fault tolerance a head restart then leaves running jobs "
                          "and their drivers alone; while no live node offers it, admitted jobs wait and say so. null = "
                          "drivers ask for nothing and run on the head.")
