"""A search's trials: the rows its Tune callback keeps, the driver's report, what the controller hands readers.

The controller is the real one in this process (tests/unit/local_cluster.py); the search's driver is played by
calls that carry the secret the launcher gave its attempt, as the TuneJob driver's do.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy
import pytest

from cuberay.cli import main
from cuberay.errors import AdmissionError
from cuberay.platform import client
from cuberay.platform.api.records import TrialInfo
from cuberay.platform.transport.in_process import InProcess
from cuberay.tune.progress import Progress, ProgressCallback
from tests.unit.local_cluster import controller  # noqa: F401 (a fixture)
from tests.unit.test_cli_controller import running


def fake_trial(trial_id: str, number: int, error_file: str | None = None, **config: Any) -> SimpleNamespace:
    return SimpleNamespace(trial_id=trial_id, config={**config, "__cuberay_slot": 0},
                           experiment_tag=f"{number}_x={config.get('x')}", error_file=error_file)


def test_the_callback_keeps_each_trials_row_and_hands_out_only_what_changed(tmp_path: Path) -> None:
    progress = Progress(metric="loss", mode="min", total=3)
    cb = ProgressCallback(progress)
    a, b = fake_trial("a1", 0, x=1.5), fake_trial("b2", 1, x=3.0, error_file=str(tmp_path / "error.txt"))
    b.config["n"], b.config["f"] = numpy.int64(4), len  # a sampled numpy integer; something JSON cannot hold
    cb.on_trial_start(0, [], a)
    cb.on_trial_start(0, [], b)
    cb.on_trial_result(0, [], a, {"loss": 0.9})
    cb.on_trial_result(0, [], a, {"loss": 0.4, "other": 1})
    cb.on_trial_result(0, [], a, {"other": 2})            # a result without the metric: a report, no value
    rows = progress.take_changed()
    assert [r["trial_id"] for r in rows] == ["a1", "b2"]   # by Tune's trial number
    assert rows[0] | {} == {"trial_id": "a1", "index": 0, "state": "RUNNING", "config": {"x": 1.5}, "value": 0.4,
                            "iterations": 3, "history": [0.9, 0.4], "error": None}
    assert progress.take_changed() == []                  # nothing changed since
    cb.on_trial_complete(0, [], a)
    (tmp_path / "error.txt").write_text("Traceback (most recent call last):\n  ...\nValueError: x too big\n")
    cb.on_trial_error(0, [], b)
    done, failed = progress.take_changed()
    assert (done["state"], failed["state"], failed["error"]) == ("TERMINATED", "ERROR", "ValueError: x too big")
    assert failed["config"] == {"x": 3.0, "n": 4, "f": "<built-in function len>"}
    assert progress.best_value == 0.4 and progress.summary().startswith("trials 1 done, 0 running, 1 failed")
    rows[0]["history"].append(99.0)                       # handed-out rows are copies
    assert progress.rows["a1"]["history"] == [0.9, 0.4]


def tune_job(name: str = "search") -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "TuneJob", "metadata": {"name": name, "tenant": "vision"},
            "spec": {"workers": 1, "resources": {"cpu": "1"}, "entrypoint": "cuberay.examples.branin:trial",
                     "search_space": {"x1": {"_type": "uniform", "_value": [-5, 10]}},
                     "num_samples": 4, "metric": "value", "mode": "min"}}


def trial(index: int, value: float | None, state: str = "RUNNING") -> TrialInfo:
    return TrialInfo(trial_id=f"t{index}", index=index, state=state, config={"x1": index / 2}, value=value,
                     iterations=0 if value is None else 1, history=[] if value is None else [value])


def test_the_driver_reports_trials_and_members_read_them(controller: InProcess, tmp_path: Path,  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with client.acting_as("alice"):
        job_id = client.submit(tune_job()).id
        assert client.api().trials(job_id).trials == []            # nothing reported yet: an empty page
    record = running(controller, job_id)
    token = controller.cluster.launched.jobs[record.submission_id]["env"]["CUBERAY_DRIVER_TOKEN"]
    with client.acting_as("driver", token):
        client.api().trials_report(job_id, 1, [trial(0, 3.1), trial(1, None)])
        client.api().trials_report(job_id, 1, [trial(1, 0.7, "TERMINATED")])   # only what changed
        client.api().trials_report(job_id, 0, [trial(2, 0.1)])                  # a stale attempt's: dropped
    with client.acting_as("alice"):
        page = client.api().trials(job_id)
        with pytest.raises(AdmissionError, match="driver"):       # a person does not report for the driver
            client.api().trials_report(job_id, 1, [trial(3, 9.0)])
        assert main(["tune", "trials", job_id]) == 0
    assert controller.controller.store.trials(job_id) == (1, page.trials)
    assert controller.controller.store.trials_of(job_id, 0) == []  # the stale attempt's report left no row
    assert (page.metric, page.mode, page.attempt) == ("value", "min", 1)
    assert [(t.index, t.state, t.value) for t in page.trials] == [(0, "RUNNING", 3.1), (1, "TERMINATED", 0.7)]
    out = capsys.readouterr().out
    assert "2 trials, value (min), attempt 1" in out and "TERMINATED" in out
    best = next(line for line in out.splitlines() if "TERMINATED" in line)
    assert best.split()[-2] == "*", out                          # the best trial is marked
    with client.acting_as("nina"), pytest.raises(AdmissionError):  # another tenant's member reads nothing
        client.api().trials(job_id)
