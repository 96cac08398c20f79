"""TuneJob on the session's Ray cluster: failing trials, and a metric never reported.

configs/jobs/tune.yaml (NNI trial code as a function trial, ASHA on its gang) runs, and is checked in depth,
in tests/integration/test_examples.py, with every other runnable example. The NNI experiment import
(configs/tune/experiment.yml: its trial command run unchanged, TPE, Medianstop) runs, and its outcome is checked,
in the README walk-through (tests/integration/test_readme.py), which runs that command as the README writes it.

Trials are small (digits with a linear model, a few epochs), so a search of 8
trials takes about a minute on 2 cores.
"""

from __future__ import annotations

import pytest

from cuberay.errors import JobFailedError


def flaky_trial(config):
    from ray import tune

    if config["x"] < 0.3:
        raise RuntimeError("trial failed on purpose")
    tune.report({"score": config["x"]})


def silent_trial(config):
    pass


@pytest.mark.timeout(300)
def test_failing_trials_are_counted_and_a_metric_never_reported_fails_the_search(ray_cluster, tmp_path) -> None:
    from cuberay.tune.search import TrialCode, run_search

    space = {"x": {"_type": "uniform", "_value": [0, 1]}}
    nodes = [ray_cluster.worker_node_ids[0]]
    result = run_search(TrialCode(entrypoint="tests.integration.test_tune:flaky_trial"), space, metric="score",
                        mode="max", algorithm="nni:random", num_samples=8, max_concurrent=1, seed=1,
                        node_ids=nodes, storage_path=str(tmp_path), name="flaky")
    errored = [t for t in result.trials if t.state == "ERROR"]
    assert len(result.trials) == 8 and errored and result.counts["failed"] == len(errored)
    assert result.best.value >= 0.3 and {t.node_id for t in result.trials if t.node_id} == set(nodes)
    with pytest.raises(JobFailedError, match=r"no trial reported the metric 'score'"):
        run_search(TrialCode(entrypoint="tests.integration.test_tune:silent_trial"), space, metric="score",
                   mode="max", algorithm="nni:random", num_samples=2, max_concurrent=1,
                   storage_path=str(tmp_path), name="silent")
