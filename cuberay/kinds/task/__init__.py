"""Task: a gang of workers each running one shell command."""

from __future__ import annotations

from cuberay.kinds.registry import JobKind
from cuberay.platform.spec.train import Task


class TaskKind(JobKind):
    model = Task
    driver = "cuberay.kinds.task.driver:run"
    render = "cuberay.kuberay.render_job:rayjob"

    def small(self, job: Task) -> bool:  # type: ignore[override]
        return job.spec.workers == 1  # an elastic or larger gang needs its placement group and driver


KIND = TaskKind()
