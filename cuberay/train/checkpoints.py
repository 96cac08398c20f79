"""Tell the controller when a training run saves a checkpoint, so preemption knows what a victim would lose.

Ray Train V2 calls a ``UserCallback``'s ``after_report`` in its own controller
actor once every worker has reported; when the report carries a checkpoint,
this one sends the time to the cuberay controller (a lost report only makes
preemption count from the run's start, as for a job that never checkpoints).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ray.train import UserCallback

from cuberay.platform import client

log = logging.getLogger("cuberay.train")


class CheckpointReporter(UserCallback):
    """Reports each persisted checkpoint of attempt ``attempt`` of ``job_id`` to the controller."""

    def __init__(self, job_id: str, attempt: int) -> None:
        self.job_id = job_id
        self.attempt = attempt

    def after_report(self, run_context: Any, metrics: Any, checkpoint: Any) -> None:
        if checkpoint is None:
            return
        try:
            # Through the client: the call carries this job's driver secret (from the job's environment).
            client.api(timeout=10).checkpointed(self.job_id, self.attempt, time.time())
        except Exception as err:  # noqa: BLE001 - never fail training over bookkeeping
            log.warning("could not report the checkpoint of %s to the controller: %s", self.job_id, err)
