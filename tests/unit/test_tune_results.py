"""Search results written down (JSON, CSV, PNG) and the job record's one-line message."""

from __future__ import annotations

import csv
import json

from cuberay.tune import results
from cuberay.tune.progress import Progress
from cuberay.tune.search import SearchResult, TrialRecord


def trial(i: int, value, *, final=True, state="TERMINATED", history=()) -> TrialRecord:
    return TrialRecord(trial_id=f"id{i}", index=i, config={"lr": 0.1 * i, "opt": {"_name": "sgd"}}, state=state,
                       value=value, final=final, iterations=len(history), runtime_s=1.5, history=list(history),
                       error="Boom\ntrace" if state == "ERROR" else None, node_id="n1")


def search() -> SearchResult:
    trials = [trial(2, 0.9, history=[0.5, 0.9]), trial(1, 0.7, final=False, history=[0.7]),
              trial(3, None, state="ERROR")]
    return SearchResult(metric="acc", mode="max", trials=trials, best=trials[0], wall_s=10.0, suggest_ms=[0.5],
                        counts={"trials": 3, "errored": 1, "stopped_early": 1})


def test_files_hold_every_trial_in_suggestion_order(tmp_path):
    paths = results.write(search(), tmp_path / "out")
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["best_value"] == 0.9 and data["best_config"]["lr"] == 0.2 and data["trials"] == 3
    assert [t["trial_id"] for t in data["trials_detail"]] == ["id1", "id2", "id3"]
    rows = list(csv.DictReader(open(paths["csv"])))
    assert [r["state"] for r in rows] == ["TERMINATED", "TERMINATED", "ERROR"] and rows[1]["acc"] == "0.9"
    assert json.loads(rows[0]["opt"]) == {"_name": "sgd"}
    assert (tmp_path / "out" / "progress.png").read_bytes()[:4] == b"\x89PNG"


def test_message_says_best_counts_and_where():
    text = results.message(search(), "/s/results.json")
    assert text == ("best acc 0.9 (lr=0.2, opt={'_name': 'sgd'}); 3 trials: 2 ran (1 stopped early), 1 failed; "
                    "results in /s/results.json")


def test_progress_keeps_the_best_in_the_right_direction():
    p = Progress(metric="loss", mode="min", total=5)
    for value in (3.0, 1.0, "x", float("nan"), 2.0):
        p.offer(value, {"v": value})
    p.running.add("t1")
    p.done = 2
    assert p.best_value == 1.0 and p.best_config == {"v": 1.0}
    assert p.summary() == "trials 2 done, 1 running, 0 failed of 5; best loss 1"
