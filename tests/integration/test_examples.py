"""Every example in configs/jobs/ of a kind that runs is submitted to a live platform and succeeds.

They run as written, on a controller installed with configs/platform.yaml (its
storage moved to a scratch directory and its scheduler cycle shortened: the
tenants and quotas are the file's), each submitted by a member of its tenant.
Kinds that do not run are refused at submit; an example of a kind this test
does not know fails it.

The user's own DeepSpeed script (train-deepspeed-command.yaml, command mode) is
also checked from its log: both ranks saw DeepSpeed's world as the gang's
RANK/WORLD_SIZE and trained the loss below 0.5. The TuneJob tune.yaml (NNI's script as a function trial, 8
trials of nni:tpe, ASHA) is also checked in depth: its progress while it ran, its results files, and that
every trial ran on the gang's nodes (this run is the only one of that example in the tier).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cuberay import kinds
from cuberay.platform import client, demo
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_platform, load_spec
from tests.integration.conftest import _empty_platform
from tests.support import wait_for

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
EXAMPLES = CONFIGS / "jobs"
# A ServeApp runs until deleted, so it never "succeeds": tests/integration/test_serve.py deploys the
# ServeApp examples (serve.yaml, serve-echo.yaml) and checks they answer.
RUNNABLE = {k.name for k in kinds.registered() if not k.service}
DS_OK = re.compile(r"ds_train ok rank=(\d) world=(\d) local_rank=0 zero=2 loss=([\d.]+)")


def _examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def test_every_example_is_classified() -> None:
    kinds = {path.name: load_spec(path).kind for path in _examples()}
    assert set(kinds.values()) <= {"TrainJob", "Task", "TuneJob", "ServeApp"}, kinds
    assert any(k in RUNNABLE for k in kinds.values())


@pytest.fixture
def example_platform(ray_cluster, job_client, tmp_path: Path):
    """The controller with the example platform file's tenants and quotas."""
    source = demo.scratch_platform(CONFIGS / "platform.yaml", tmp_path)
    spec = load_platform(source).model_dump(mode="json")
    # The file's 2 s cycle is for a laptop; each queued example would wait up to a cycle to be admitted.
    spec["spec"]["scheduler"]["cycle_interval_s"] = 0.5
    client.install(spec, address=ray_cluster.address, replace=True)
    try:
        yield load_platform(source)
    finally:
        _empty_platform(client, job_client)


@pytest.mark.timeout(900)
def test_runnable_examples_succeed(example_platform, job_client) -> None:
    jobs = [load_spec(p) for p in _examples() if load_spec(p).kind in RUNNABLE]
    refs = [client.submit(job, user=demo.submitter(example_platform, job.tenant)) for job in jobs]

    # The TuneJob's nodes are read while it holds them (the record drops its allocation at the end), at every
    # poll, so a trial seen anywhere else left the gang.
    tune_allocated: set[str] = set()
    tune_progress: list[str] = []

    def done() -> dict | None:
        records = {r.id: client.status(r.id) for r in refs}
        for rec in records.values():
            if rec.name == "digits-tune":
                tune_allocated.update(slot["node_id"] for slot in rec.allocation or [])
                if rec.reason.startswith("trials "):
                    tune_progress.append(rec.reason)
        return records if all(rec.state.is_terminal for rec in records.values()) else None

    # Once a second: each poll reads nine records (about 3 ms of CPU each, both ends), and the slowest examples
    # take minutes; the tune job's progress stays in its record for its whole run.
    records = wait_for(done, 840, "every example job to end", poll_s=1.0)
    first = min(r.submit_time for r in records.values())
    for rec in sorted(records.values(), key=lambda r: r.end_time or 0):  # the critical path, shown with -s
        print(f"{rec.name:28} {rec.state.value:10} start +{(rec.start_time or first) - first:5.1f}s "
              f"end +{(rec.end_time or first) - first:5.1f}s")
    failed = {i: (r.state.value, r.message) for i, r in records.items() if r.state != JobState.SUCCEEDED}
    assert not failed, failed
    trained = [r for r in records.values() if r.kind == "TrainJob" and r.spec["spec"].get("entrypoint")]
    assert trained, "no function-mode TrainJob example ran"
    for rec in trained:
        # Ray Train reported the example's checkpoints to the controller while the run was alive.
        assert rec.checkpoint_time is not None, f"{rec.id} reported no checkpoint"
        assert rec.start_time <= rec.checkpoint_time <= rec.end_time

    (ds,) = [r for r in records.values() if r.name == "digits-deepspeed-command"]
    # The Ray dashboard's Jobs tab names the Ray Job by the job's name (its Name column reads job_name).
    assert job_client.get_job_info(ds.submission_id).metadata["job_name"] == "digits-deepspeed-command"
    log = job_client.get_job_logs(ds.submission_id)
    seen = sorted((int(rank), int(world)) for rank, world, _ in DS_OK.findall(log))
    assert seen == [(0, 2), (1, 2)], log[-3000:]  # DeepSpeed's world is the gang's, read from the env
    assert all(float(loss) < 0.5 for *_, loss in DS_OK.findall(log)), log[-3000:]

    (tune,) = [r for r in records.values() if r.name == "digits-tune"]  # configs/jobs/tune.yaml
    # While it ran, the record said how far the search was.
    assert any("done" in p and "running" in p and "failed" in p for p in tune_progress), tune_progress
    assert tune.message.startswith("best accuracy ") and "8 trials" in tune.message
    results_path = tune.message.rsplit("results in ", 1)[1]
    results = json.loads(Path(results_path).read_text())
    assert results["trials"] == 8 and results["errored"] == 0 and results["best_value"] > 0.8
    assert results["stopped_early"] >= 1, results["trials_detail"]
    assert {"lr", "alpha", "epochs"} <= set(results["best_config"])
    out_dir = Path(results_path).parent
    assert (out_dir / "trials.csv").read_text().count("\n") == 9 and (out_dir / "progress.png").stat().st_size > 0
    # One attempt, so one allocation; every trial ran on one of its nodes.
    trial_nodes = {t["node_id"] for t in results["trials_detail"]}
    assert tune.attempts == 1 and tune_allocated, (tune.attempts, tune_allocated)
    assert None not in trial_nodes and trial_nodes <= tune_allocated, (sorted(trial_nodes - tune_allocated),
                                                                        results_path)
