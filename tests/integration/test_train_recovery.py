"""Recovery from a lost worker process: Ray Train restarts the group in place and resumes from its checkpoint.

DDP resumes from rank 0's weights; DeepSpeed ZeRO-2 from the shards every rank saved with DeepSpeed's own
``save_checkpoint`` into the same Ray Train checkpoint (cuberay.train.ds_checkpoint).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from ray.util.state import list_actors

from cuberay.platform import client
from cuberay.platform.control.store import Store
from cuberay.platform.policy.states import JobState
from tests.support import wait_for

RESUMED = re.compile(r"resumed from checkpoint: (?:epoch|round) (\d+)")  # the examples' line (round: GBDT)
CHECKPOINT = re.compile(r"checkpoint (/\S+)")
FINAL = re.compile(r"final metrics (\{.*\})")


def train_workers(address: str) -> dict[str, int]:
    """Alive Ray Train worker actors: actor id -> pid."""
    actors = list_actors(address=address, filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")],
                         limit=10_000, raise_on_missing_output=False, detail=True)
    return {a.actor_id: a.pid for a in actors}


def ddp_job(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": f"recover-{uuid.uuid4().hex[:6]}", "tenant": "a"},
            "spec": {"workers": 2, "resources": {"cpu": "1"}, "placement": "spread",
                     "entrypoint": "cuberay.examples.digits:train_func",
                     # Train's controller checks its workers every 2 s by default (and each report waits for a
                     # check); as fast as the session's nodes have it.
                     "env": {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}, **spec}}


def kill_one_worker_after_a_checkpoint(ref: Any, ray_cluster, job_client, before: set[str]) -> tuple[Any, str]:
    """Wait for the run's first checkpoint, SIGKILL one of its two Train workers; return (final record, log)."""
    try:
        wait_for(lambda: client.status(ref.id).checkpoint_time, 150, f"{ref.id} to report a checkpoint")
    except AssertionError:
        record = client.status(ref.id)
        logs = job_client.get_job_logs(record.submission_id) if record.submission_id else ""
        raise AssertionError(f"no checkpoint: {record.state.value} {record.reason} {record.message}\n"
                             f"{logs[-3000:]}") from None
    ours = {a: pid for a, pid in train_workers(ray_cluster.address).items() if a not in before}
    assert len(ours) == 2, ours
    os.kill(next(iter(ours.values())), signal.SIGKILL)
    record = client.wait(ref.id, timeout=180)
    logs = job_client.get_job_logs(record.submission_id)
    assert record.state == JobState.SUCCEEDED, (record.message, logs[-2000:])
    resumed = [int(n) for n in RESUMED.findall(logs)]
    assert resumed and min(resumed) > 0, logs[-3000:]
    assert record.attempts == 1  # restarted by Ray Train inside the attempt, not requeued
    return record, logs


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_killed_train_worker_resumes_from_checkpoint(platform, ray_cluster, job_client) -> None:
    before = set(train_workers(ray_cluster.address))
    # The kill comes after the first checkpoint (epoch 0); two epochs are left to resume into.
    ref = client.submit(ddp_job(max_failures=1, config={"epochs": 3, "epoch_sleep_s": 1.5}))
    record, _ = kill_one_worker_after_a_checkpoint(ref, ray_cluster, job_client, before)
    # Each worker reported its peak use for resource correction; the run is one sample.
    with Store(platform.spec["spec"]["database"]) as store:
        ((_, cpu, memory_gib),) = store.usage_history("a", record.name, since=0)
    assert cpu > 0 and 0.1 < memory_gib < 16


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_command_gang_out_of_retries_fails_with_the_workers_error(platform) -> None:
    command = f"{sys.executable} -c \"import sys; print('boom: disk full', file=sys.stderr); sys.exit(7)\""
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": f"fail-{uuid.uuid4().hex[:6]}", "tenant": "a"},
            "spec": {"workers": 2, "resources": {"cpu": "1"}, "command": command, "max_failures": 1}}
    ref = client.submit(spec)
    record = client.wait(ref.id, timeout=150)
    assert record.state == JobState.FAILED
    assert record.attempts == 2  # the whole gang ran again once, within its budget
    assert "boom: disk full" in (record.message or "") or "code 7" in (record.message or ""), record.message


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_killed_deepspeed_worker_resumes_from_its_deepspeed_shards(platform, ray_cluster, job_client) -> None:
    before = set(train_workers(ray_cluster.address))
    ref = client.submit(ddp_job(max_failures=1, backend="deepspeed", deepspeed={"zero_optimization": {"stage": 2}},
                                config={"epochs": 3, "epoch_sleep_s": 1.5}))
    _, logs = kill_one_worker_after_a_checkpoint(ref, ray_cluster, job_client, before)
    assert "(DeepSpeed shards of 2 ranks)" in logs, logs[-3000:]
    # The submitted spec's ZeRO-2 (merged with cuberay's defaults) trained, also across the restart: the
    # bar of test_torch_launcher.py's ZeRO runs (chance is loss ln 10 = 2.3, accuracy 0.1).
    final = json.loads(FINAL.findall(logs)[-1])
    assert final["engine"] == "deepspeed-zero2" and final["epoch"] == 2, final
    assert final["loss"] < 1.5 and final["accuracy"] > 0.8, final
    # The last checkpoint holds DeepSpeed's own files from both ranks, and model.pt for serving.
    (path,) = CHECKPOINT.findall(logs)[-1:]
    shards = sorted(p.name for p in Path(path, "deepspeed").iterdir())
    assert shards == ["mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                      "zero_pp_rank_1_mp_rank_00_optim_states.pt"], shards
    assert Path(path, "model.pt").is_file()
