"""TuneJob on the session's Ray cluster: NNI trial code as command trials, the NNI import, failing trials.

configs/jobs/tune.yaml (NNI trial code as a function trial, ASHA on its gang) runs, and is checked in depth,
in tests/integration/test_examples.py, with every other runnable example.

Trials are small (digits with a linear model, a few epochs), so a search of 8
trials takes about a minute on 2 cores.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from cuberay.cli import main
from cuberay.errors import JobFailedError

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(420)
def test_cli_imports_an_nni_experiment_and_runs_its_trial_command(platform, capsys) -> None:
    """configs/tune/experiment.yml: searchSpaceFile, trialCommand (run unchanged), TPE, Medianstop."""
    code = main(["tune", "import", str(REPO_ROOT / "configs/tune/experiment.yml"), "--tenant", "a",
                 "--name", f"nni-import-{uuid.uuid4().hex[:6]}", "--wait", "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    outcome = json.loads(out)  # stdout holds the outcome only
    assert outcome["state"] == "SUCCEEDED" and outcome["trials"] == 8, outcome
    assert 0.5 < outcome["best_value"] <= 1.0 and set(outcome["best_config"]) == {"lr", "alpha", "epochs"}


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
