"""A user's own DeepSpeed script in command mode: deepspeed.initialize over the gang's RANK/WORLD_SIZE/MASTER_* env.

Runs the command of configs/jobs/train-deepspeed-command.yaml as written on a 2-worker gang
(test_examples.py submits the same spec through the platform).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from cuberay.platform.spec import load_spec
from cuberay.train.env import JobIdentity
from cuberay.train.gang import run_command_gang

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "configs" / "jobs" / "train-deepspeed-command.yaml"
JOB = JobIdentity(job_id="ds-1", name="digits-deepspeed-command", tenant="nlp", user="alice", run_id="r1",
                  kind="trainjob", cpu="1", memory="1Gi", gpu="0", rdma="")
OK = re.compile(r"ds_train ok rank=(\d) world=(\d) local_rank=0 zero=2 loss=([\d.]+)")


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_users_deepspeed_script_trains_on_a_command_gang(ray_cluster) -> None:
    spec = load_spec(EXAMPLE).spec
    out = io.StringIO()
    code = run_command_gang(spec.command, node_ids=list(ray_cluster.worker_node_ids[:2]), bundle={"CPU": 1.0},
                            job=JOB, out=out, env={**spec.env, "PYTHONPATH": str(REPO_ROOT)}, timeout_s=300)
    log = out.getvalue()
    assert code == 0, log[-3000:]
    seen = sorted((int(rank), int(world)) for rank, world, _ in OK.findall(log))
    assert seen == [(0, 2), (1, 2)], log[-3000:]  # DeepSpeed's world is the gang's, read from the env
    assert all(float(loss) < 0.5 for *_, loss in OK.findall(log)), log[-3000:]
