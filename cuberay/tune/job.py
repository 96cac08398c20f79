"""A TuneJob's driver: the admitted gang's slots become trial slots, the search runs, results are kept.

``run_tune_job`` is what the runner dispatches a TuneJob to. Each of the gang's
workers is one trial slot pinned to the node admission chose for it (see
cuberay/tune/searchers.py), so the search never uses more than its allocation.
While it runs, the job record's reason says how many trials are done, running
and failed and the best so far; at the end its message holds the best value and
config, and results.json, trials.csv and progress.png go under the tenant's
storage, beside Ray Tune's own experiment directory. Each trial's row (parameters,
values, state) goes to the platform as it changes, for the console's Tune page.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from cuberay.tune import results as results_io
from cuberay.tune.progress import Progress
from cuberay.tune.search import SearchResult, TrialCode, run_search

TRIALS_EVERY_S = 0.5  # intermediate results are sent at most this often; starts and ends at once


def search_kwargs(spec: Any) -> dict[str, Any]:
    """run_search's arguments from a TuneSpec (everything but where and on which nodes)."""
    return dict(metric=spec.metric, mode=spec.mode, algorithm=spec.algorithm, algorithm_args=spec.algorithm_args,
                scheduler=spec.scheduler, scheduler_args=spec.scheduler_args, num_samples=spec.num_samples,
                max_concurrent=spec.trial_slots, seed=spec.seed)


def trial_code(spec: Any) -> TrialCode:
    return TrialCode(entrypoint=spec.entrypoint, command=spec.command, code_dir=spec.code_dir, env=dict(spec.env))


def run_tune_job(job: Any, *, job_id: str, node_ids: list[str], storage_path: str,
                 report: Callable[[str, bool], None] | None = None,
                 report_trials: Callable[[list[dict]], None] | None = None,
                 ) -> tuple[SearchResult, dict[str, str], str]:
    """Run the search of ``job`` (a TuneJob) on ``node_ids``; (result, file paths, record message).

    ``report`` gets the counts line as it changes; ``report_trials`` the rows of the trials that changed.
    """
    last, sent, seen = [""], [0.0], []

    def send_trials(progress: Progress) -> None:
        rows = progress.take_changed()
        if rows and report_trials is not None:
            report_trials(rows)
            sent[0] = time.monotonic()

    def on_progress(progress: Progress) -> None:
        # Trial starts and ends, and a new best: a few calls per trial, each a quick controller update.
        seen[:] = [progress]
        text = progress.summary()
        news = text != last[0]
        if report is not None and news:
            last[0] = text
            report(text, False)
        if news or time.monotonic() - sent[0] >= TRIALS_EVERY_S:
            send_trials(progress)

    result = run_search(trial_code(job.spec), job.spec.search_space, **search_kwargs(job.spec),
                        trial_resources=job.worker_request().to_ray(), node_ids=list(node_ids),
                        storage_path=storage_path, name=job_id, max_runtime_s=job.max_runtime_s,
                        on_progress=on_progress)
    if seen:
        send_trials(seen[0])  # the last results (a trial's last report may have come within TRIALS_EVERY_S)
    out = Path(storage_path) / job_id
    paths = results_io.write(result, out)
    text = results_io.message(result, paths["json"])
    if report is not None:
        report(text, True)
    return result, paths, text
