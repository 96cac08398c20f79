"""Job kinds: the registry (:mod:`.registry`) and one adapter package per built-in kind.

Importing this package registers TrainJob, Task, TuneJob and ServeApp. Code outside the adapters asks the
registry (``kinds.of(job.kind).service``) instead of comparing kind names; docs/architecture.md says how to add
a kind.
"""

from cuberay.kinds import serveapp, task, trainjob, tunejob
from cuberay.kinds.registry import (
    KINDS_ENV,
    JobKind,
    env,
    get,
    load,
    load_env,
    load_object,
    names,
    of,
    plugins,
    register,
    registered,
    step_done,
)

for _adapter in (trainjob, task, tunejob, serveapp):  # the order `names()` lists them in
    register(_adapter.KIND)

__all__ = ["KINDS_ENV", "JobKind", "env", "get", "load", "load_env", "load_object", "names", "of", "plugins", "register",
           "registered", "step_done"]
