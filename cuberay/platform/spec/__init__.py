"""The spec layer: pure data and validation. Imports nothing above it (policy, sim, control).

Public names are re-exported here, so ``from cuberay.platform.spec import load_spec, TrainJob`` is the usual import.
"""

from cuberay.platform.spec.common import (
                                        API_VERSION,
                                        Labels,
                                        Name,
                                        NodeResources,
                                        Placement,
                                        SpecModel,
                                        WorkerResources,
)
from cuberay.platform.spec.jobs import (
                                        JOB_KINDS,
                                        Job,
                                        job_schema,
                                        load_documents,
                                        load_platform,
                                        load_spec,
                                        load_specs,
                                        platform_schema,
)
from cuberay.platform.spec.platform_file import (
                                        NodePool,
                                        Platform,
                                        Quota,
                                        SchedulerSettings,
                                        Tenant,
)
from cuberay.platform.spec.serve import ServeApp, ServeSpec, ServeVersion
from cuberay.platform.spec.train import Task, TaskSpec, TrainJob, TrainSpec
from cuberay.platform.spec.tune import TuneJob, TuneSpec
from cuberay.platform.spec.workload import (
                                        ElasticWorkers,
                                        JobBase,
                                        ObjectMeta,
                                        WorkloadSpec,
)

__all__ = ["API_VERSION", "JOB_KINDS", "ElasticWorkers", "Job", "JobBase", "Labels", "Name", "NodePool",
           "NodeResources", "ObjectMeta", "Placement", "Platform", "Quota", "SchedulerSettings", "ServeApp",
           "ServeSpec", "ServeVersion", "SpecModel", "Task", "TaskSpec", "Tenant", "TrainJob", "TrainSpec", "TuneJob",
           "TuneSpec", "WorkerResources", "WorkloadSpec", "job_schema", "load_documents", "load_platform", "load_spec",
           "load_specs", "platform_schema"]
