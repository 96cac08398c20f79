"""The spec layer: pure data and validation. Imports nothing above it (policy, sim, control).

Public names are re-exported here, so ``from cuberay.platform.spec import load_spec, TrainJob`` is the usual import.
They load on first use: a module that needs one part of the spec layer (the resource grammar, the platform file)
does not load every job kind's models, which keeps a CLI command's start short.
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM = {
    "cuberay.platform.spec.common": ("API_VERSION", "Labels", "Name", "NodeResources", "Placement", "SpecModel",
                                     "WorkerResources"),
    "cuberay.platform.spec.jobs": ("JOB_KINDS", "Job", "job_schema", "load_documents", "load_platform", "load_spec",
                                   "load_specs", "platform_schema"),
    "cuberay.platform.spec.platform_file": ("NodePool", "Platform", "Quota", "Tenant"),
    "cuberay.platform.spec.scheduler": ("SchedulerSettings",),
    "cuberay.platform.spec.serve": ("ServeApp", "ServeSpec", "ServeVersion"),
    "cuberay.platform.spec.train": ("Task", "TaskSpec", "TrainJob", "TrainSpec"),
    "cuberay.platform.spec.tune": ("TuneJob", "TuneSpec"),
    "cuberay.platform.spec.workload": ("ElasticWorkers", "JobBase", "ObjectMeta", "WorkloadSpec"),
}
_LAZY = {name: module for module, names in _FROM.items() for name in names}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cuberay.platform.spec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

