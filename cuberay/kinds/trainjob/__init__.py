"""TrainJob: Ray Train in function mode (``entrypoint``) or a command gang (``command``)."""

from __future__ import annotations

from cuberay.kinds.registry import JobKind
from cuberay.platform.spec.train import TrainJob


class TrainJobKind(JobKind):
    model = TrainJob
    driver = "cuberay.kinds.trainjob.driver:run"
    render = "cuberay.kuberay.render_job:rayjob"
    servable = True  # a finished run's checkpoint is what a ServeApp version's `model: {job: NAME}` serves
    import_fields = ("entrypoint",)

    def resizes(self, job: TrainJob) -> bool:  # type: ignore[override]
        # Function mode restarts its worker group at a checkpoint with the new size; a command gang cannot.
        return job.spec.entrypoint is not None

    def retries(self, job: TrainJob) -> int:  # type: ignore[override]
        # One budget, one owner: in function mode max_failures is Ray Train's (it restarts the worker group in
        # place from the last checkpoint), so a run that still fails has used it up.
        return 0 if job.spec.entrypoint is not None else job.spec.max_failures


KIND = TrainJobKind()
