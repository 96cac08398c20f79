"""TuneJob on the session's Ray cluster: NNI trial code as function and command trials, ASHA, the NNI import.

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
from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec
from tests.support import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]


def unique(job, tenant: str = "a"):
    data = job.with_tenant(tenant).model_dump(mode="json", by_alias=True)
    data["spec"]["resources"].pop("memory", None)  # the test tenants have CPU and GPU quotas only
    data["metadata"]["name"] = f"{job.name}-{uuid.uuid4().hex[:6]}"
    return load_spec(data)


@pytest.mark.timeout(420)
def test_the_example_tunejob_runs_nni_trials_with_asha_on_its_gang(platform) -> None:
    """configs/jobs/tune.yaml: the NNI script as a function trial, 8 trials of nni:tpe, ASHA stops some early."""
    job = unique(load_spec(REPO_ROOT / "configs/jobs/tune.yaml"))
    ref = client.submit(job, "a")
    # The gang's nodes are read while it holds them (the record drops its allocation at the end), at every poll, so
    # a trial seen anywhere else left the gang.
    allocated: set[str] = set()
    progress: list[str] = []

    def finished():
        r = client.status(ref.id)
        allocated.update(slot["node_id"] for slot in r.allocation or [])
        if r.reason.startswith("trials "):
            progress.append(r.reason)
        return r if r.state.is_terminal else None

    record = wait_for(finished, 360, "the TuneJob to finish", poll_s=0.5)
    assert record.state == JobState.SUCCEEDED, record.message
    # While it ran, the record said how far the search was.
    assert any("done" in p and "running" in p and "failed" in p for p in progress), progress
    assert record.message.startswith("best accuracy ") and "8 trials" in record.message
    results = json.loads(Path(record.message.rsplit("results in ", 1)[1]).read_text())
    assert results["trials"] == 8 and results["errored"] == 0 and results["best_value"] > 0.8
    assert results["stopped_early"] >= 1, results["trials_detail"]
    assert {"lr", "alpha", "epochs"} <= set(results["best_config"])
    out_dir = Path(results_path := record.message.rsplit("results in ", 1)[1]).parent
    assert (out_dir / "trials.csv").read_text().count("\n") == 9 and (out_dir / "progress.png").stat().st_size > 0
    # One attempt, so one allocation; every trial ran on one of its nodes.
    trial_nodes = {t["node_id"] for t in results["trials_detail"]}
    assert record.attempts == 1 and allocated, (record.attempts, allocated)
    assert None not in trial_nodes and trial_nodes <= allocated, (sorted(trial_nodes - allocated), results_path)


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
