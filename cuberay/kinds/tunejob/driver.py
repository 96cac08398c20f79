"""The TuneJob driver: a Ray Tune search (cuberay/tune), one trial slot per worker node."""

from __future__ import annotations

from typing import Any

from cuberay.errors import CuberayError
from cuberay.platform import client
from cuberay.platform.api.records import JobContext, TrialInfo
from cuberay.platform.client import RESTART_WAIT_S
from cuberay.platform.runner import EXIT_OK, say


def run(job: Any, ctx: JobContext) -> int:
    from cuberay.tune.job import run_tune_job

    job_id, attempt = ctx.record.id, ctx.attempt

    def report(text: str, final: bool) -> None:
        try:
            # Progress is tried once (the next report follows soon); the result rides out a controller restart.
            client.api(restart_wait_s=RESTART_WAIT_S if final else 0).job_report(job_id, attempt, text, final)
        except CuberayError as err:  # progress is a nicety; the search goes on
            say(f"could not report progress: {err}")

    def report_trials(rows: list[dict]) -> None:
        try:  # like progress: tried once, the next report carries the trial's row again when it changes
            client.api(restart_wait_s=0).trials_report(job_id, attempt, [TrialInfo(**r) for r in rows])
        except CuberayError as err:
            say(f"could not report trials: {err}")

    _, paths, text = run_tune_job(job, job_id=job_id, node_ids=list(ctx.node_ids),
                                  storage_path=ctx.storage_path, report=report, report_trials=report_trials)
    say(text)
    say(f"trials {paths['csv']}" + (f", plot {paths['png']}" if "png" in paths else ""))
    return EXIT_OK
