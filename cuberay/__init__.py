"""cuberay: a Ray-native, multi-tenant compute platform for ML teams.

The small public API::

    import cuberay
    cuberay.up()                                   # local Ray head + controller
    ref = cuberay.submit("configs/jobs/task.yaml") # or a spec model / dict / YAML text
    record = cuberay.wait(ref)
    print(record.state, "".join(cuberay.logs(ref)))

Names are loaded on first use, so ``import cuberay`` imports neither Ray nor
pydantic; the spec classes come from ``cuberay.platform.spec``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_CLIENT = ("submit", "wait", "status", "cancel", "logs", "list_jobs", "queue", "tenants", "connect", "up", "down",
           "current_user", "JobRef", "QueueEntry", "TenantUsage")
_SPECS = ("load_spec", "load_specs", "load_platform", "Platform", "Tenant", "TrainJob", "TuneJob", "ServeApp",
          "Task")
_LAZY: dict[str, str] = {
    **{name: "cuberay.platform.client" for name in _CLIENT},
    **{name: "cuberay.platform.spec" for name in _SPECS},
    "run": "cuberay.platform.runner",
    "JobState": "cuberay.platform.policy.states",
    "JobRecord": "cuberay.platform.api.records",
}
_ERRORS = ("CuberayError", "SpecError", "AdmissionError", "NotFoundError", "JobFailedError",
           "PlatformNotRunningError")
_LAZY.update({name: "cuberay.errors" for name in _ERRORS})

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cuberay' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
