"""TuneJob: a hyperparameter search on Ray Tune, one trial slot per worker."""

from __future__ import annotations

from cuberay.kinds.registry import JobKind
from cuberay.platform.spec.tune import TuneJob

RESULTS_SEPARATOR = "; results in "  # the final message: best value and config, counts, then where the results are


class TuneJobKind(JobKind):
    model = TuneJob
    driver = "cuberay.kinds.tunejob.driver:run"
    render = None  # no Kubernetes form: it runs inside a tenant's RayCluster, submitted with `cuberay submit`
    import_fields = ("entrypoint",)
    trials = True

    def summary(self, message: str) -> str | None:
        return message.split(RESULTS_SEPARATOR)[0] or None

    def objective(self, job: TuneJob) -> tuple[str, str] | None:  # type: ignore[override]
        return job.spec.metric, job.spec.mode


KIND = TuneJobKind()
