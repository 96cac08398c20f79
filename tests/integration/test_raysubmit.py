"""``ray job submit -- cuberay run FILE``: the Ray Job is the driver, and it waits in cuberay's queue.

The tenant's quota is filled first, so the plain Ray Job starts (Ray has room)
but its cuberay job must wait: ``cuberay queue`` shows it QUEUED with the
reason, and the driver's own log says where it waits. Once the quota is free
the same driver runs the job, and both Ray and cuberay end SUCCEEDED.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from cuberay.cli import main
from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.support import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
RAY_CLI = str(Path(sys.executable).parent / "ray")




def task_spec(name: str, command: str, *, workers: int, gpu: str) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
            "metadata": {"name": f"{name}-{uuid.uuid4().hex[:6]}", "tenant": "a"},
            "spec": {"workers": workers, "resources": {"cpu": "1", "gpu": gpu}, "command": command}}


def queue_json(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert main(["queue", "--tenant", "a", "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.timeout(300)
def test_ray_job_submit_cuberay_run_waits_in_the_queue_then_runs(platform, ray_cluster, job_client, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Tenant a may hold 8 GPUs: the filler takes all of them.
    filler = client.submit(task_spec("fill", f"{sys.executable} -c \"import time; time.sleep(300)\"",
                                     workers=2, gpu="4"))
    wait_for(lambda: client.status(filler.id).state == JobState.RUNNING, 90, "the filler to run")

    spec = task_spec("raysubmit", f"{sys.executable} -c \"print('ran-through-ray-job-submit', flush=True)\"",
                     workers=1, gpu="1")
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    sid = f"raysubmit-{uuid.uuid4().hex[:8]}"
    # The driver's environment comes from the cluster (PYTHONPATH finds this checkout); the
    # caller's identity travels in the runtime_env, as it would for any user.
    runtime_env = {"env_vars": {"CUBERAY_USER": platform.user}}
    submitted = subprocess.run(
        [RAY_CLI, "job", "submit", "--address", ray_cluster.dashboard_url, "--no-wait", "--submission-id", sid,
         "--runtime-env-json", json.dumps(runtime_env), "--entrypoint-num-cpus", "0",
         "--", sys.executable, "-m", "cuberay", "run", str(spec_file)],
        env={**os.environ, "RAY_AUTH_MODE": "token"}, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    try:
        def waiting() -> dict[str, Any] | None:
            entry = next((e for e in queue_json(capsys) if e["name"] == spec["metadata"]["name"]), None)
            return entry if entry and entry["state"] == "QUEUED" and "max" in entry["reason"] else None

        entry = wait_for(waiting, 90, "`cuberay queue` to show the ray-submitted job waiting for quota")
        assert entry["position"] == 1 and "tenant 'a'" in entry["reason"]
        record = client.status(entry["job_id"])
        assert (record.driver, record.submission_id) == ("external", sid)
        assert job_client.get_job_status(sid).value == "RUNNING"  # Ray runs the driver; cuberay holds the job
        wait_for(lambda: "QUEUED (position 1)" in job_client.get_job_logs(sid), 30,
                 "the driver's log to say where it waits")

        client.cancel(filler.id)
        wait_for(lambda: job_client.get_job_status(sid).is_terminal(), 120, "the Ray Job to end")
        logs = job_client.get_job_logs(sid)
        assert job_client.get_job_status(sid).value == "SUCCEEDED", logs
        assert "ran-through-ray-job-submit" in logs
        assert client.status(entry["job_id"]).state == JobState.SUCCEEDED
    finally:
        job_client.stop_job(sid)
