"""Elastic gangs on a live platform: a {min: 2, max: 4} TrainJob starts with 2 workers when only 2 fit and
grows to 4 when capacity frees, with the world size read from the workers themselves."""

from __future__ import annotations

import json
import re
import sys
import time
import uuid
from typing import Any

import pytest

from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.support import wait_for

FINAL = re.compile(r"final metrics (\{.*\})")
ON_V100 = {"ray.io/accelerator-type": "V100"}  # one 4-CPU worker node of the session cluster


def _job(kind: str, tenant: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": kind,
            "metadata": {"name": f"{kind.lower()}-{uuid.uuid4().hex[:6]}", "tenant": tenant},
            "spec": {"resources": {"cpu": "1"}, "node_selector": ON_V100, **spec}}


@pytest.mark.slow
@pytest.mark.timeout(720)
def test_elastic_train_job_starts_with_min_and_grows_to_max(platform, ray_cluster, job_client) -> None:
    started = time.monotonic()
    filler = client.submit(_job("Task", "b", workers=2, command=f"{sys.executable} -c 'import time; time.sleep(600)'"))
    wait_for(lambda: client.status(filler.id).state == JobState.RUNNING, 120, "the filler to run")
    ref = client.submit(_job("TrainJob", "a", workers={"min": 2, "max": 4}, placement="spread",
                             # 24 steps of 0.5 s: the grown run resumed at step 5 under load 16 on 2 cores, so the
                             # growth has 4 times the steps it needed; the steps after it are only waited out.
                             entrypoint="cuberay.examples.elastic:train_func", config={"steps": 24, "step_s": 0.5}))
    record = wait_for(lambda: (r := client.status(ref.id)).checkpoint_time and r, 300,
                      f"{ref.id} to checkpoint with its first workers")
    assert len(record.allocation or []) == 2  # only 2 of the node's 4 CPUs were free: it started with its min
    client.cancel(filler.id)
    record = client.wait(ref.id, timeout=300)
    logs = job_client.get_job_logs(record.submission_id)
    assert record.state == JobState.SUCCEEDED, (record.message, logs[-3000:])
    final = json.loads(FINAL.findall(logs)[-1])
    # Every size the process group had, counted by an all-reduce on the workers: 2, then 4.
    assert final["world_sizes"] == [2, 4] and final["world_size"] == 4, logs[-3000:]
    v100 = next(n for n, labels in ray_cluster.node_labels.items()
                if labels.get("ray.io/accelerator-type") == "V100")
    assert set(final["node_ids"]) == {v100}  # exactly the granted node
    assert "resumed from checkpoint: step" in logs  # restarted at a checkpoint, not from step 0
    assert record.attempts == 1  # a resize is neither a failure nor a new attempt
    kinds = [e.kind for e in client.api().events(ref.id, 100)]
    assert "resized" in kinds and "resize_applied" in kinds, kinds
    resumed = re.findall(r"resumed from checkpoint: step (\d+)", logs)
    print(f"elastic 2 -> 4: {time.monotonic() - started:.0f}s, grown at step {resumed} of 24")
