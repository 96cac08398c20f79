"""Reliability on the live platform: concurrent and retried submits, job ids across database resets, and
tenants kept apart on status, logs and cancel (every denial exit 3 and in the event log)."""

from __future__ import annotations

import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import ray

from cuberay.cli import main
from cuberay.errors import AdmissionError
from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.support import wait_for

STAMP = "cuberay-start-stamp"


def tiny(name: str, *, sleep_s: float = 0) -> dict[str, Any]:
    """A one-worker Task that prints one start stamp (counted against the recorded attempts)."""
    command = f"{sys.executable} -c \"import time; print('{STAMP}', flush=True); time.sleep({sleep_s})\""
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
            "spec": {"workers": 1, "resources": {"cpu": "500m"}, "command": command}}


def ctl(platform, method: str, *args: Any) -> Any:
    return ray.get(getattr(platform.controller, method).remote(client.caller(), *args), timeout=60)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
def test_concurrent_and_retried_submits_make_one_job_each_and_each_runs_once(platform, job_client) -> None:
    """20 threads, 5 request ids submitted 4 times each: 5 jobs, one id per request id, each run exactly once."""
    name = f"conc-{uuid.uuid4().hex[:6]}"  # one name: the threads race for its sequence numbers too
    keys = [f"req-{i % 5}" for i in range(20)]
    with ThreadPoolExecutor(max_workers=20) as pool:
        refs = list(pool.map(lambda key: client.submit(tiny(name), "a", request_id=key), keys))
    by_key: dict[str, set[str]] = {}
    for key, ref in zip(keys, refs):
        by_key.setdefault(key, set()).add(ref.id)
    assert all(len(ids) == 1 for ids in by_key.values()), by_key  # the same request id -> the same job
    job_ids = {next(iter(ids)) for ids in by_key.values()}
    stored = [r for r in client.list_jobs(tenant="a") if r.name == name]
    assert sorted(r.id for r in stored) == sorted(job_ids) and len(job_ids) == 5

    done = wait_for(lambda: (recs := [client.status(j) for j in job_ids]) and
                    all(r.state.is_terminal for r in recs) and recs, 180, "the five jobs to end")
    assert [(r.state, r.attempts) for r in done] == [(JobState.SUCCEEDED, 1)] * 5, done
    for job_id in job_ids:  # Ray's side: one Ray Job per job, and its worker started once
        runs = [j for j in job_client.list_jobs() if (j.submission_id or "").startswith(f"cuberay-{job_id}")]
        assert len(runs) == 1, runs
        assert job_client.get_job_logs(runs[0].submission_id).count(STAMP) == 1


def test_job_ids_stay_unique_after_a_database_reset_on_the_same_cluster(platform, tmp_path: Path) -> None:
    name = f"reset-{uuid.uuid4().hex[:6]}"
    first = client.submit(tiny(name, sleep_s=60), "a")
    assert first.id == f"a-{name}-1"
    client.cancel(first.id)
    fresh = {**platform.spec, "spec": {**platform.spec["spec"], "database": f"sqlite:///{tmp_path / 'new.db'}"}}
    client.install(fresh, replace=True)  # a new, empty database on the same Ray cluster
    assert client.list_jobs() == []
    again = client.submit(tiny(name, sleep_s=60), "a")
    assert again.id == f"a-{name}-2"  # not -1 again: its Ray Job id would clash with the first job's
    client.cancel(again.id)


def test_other_tenants_jobs_are_refused_with_exit_3_and_logged(platform, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    ref = client.submit(tiny(f"mine-{uuid.uuid4().hex[:6]}", sleep_s=120), "a")
    monkeypatch.setenv("CUBERAY_USER", "mallory")  # a member of no tenant
    for call in (lambda: client.status(ref.id), lambda: list(client.logs(ref.id)), lambda: client.cancel(ref.id),
                 lambda: client.submit(tiny("sneaky"), "a")):
        with pytest.raises(AdmissionError) as denied:
            call()
        assert denied.value.exit_code == 3 and "mallory" in str(denied.value)
    for argv in (["status", ref.id], ["cancel", ref.id], ["logs", ref.id]):
        assert main(argv) == 3, argv
        assert "mallory" in capsys.readouterr().err
    monkeypatch.setenv("CUBERAY_USER", "tester")  # who installed the platform: a platform admin reads every event
    # mallory's 7 calls, each logged (a driver an earlier test's platform left running may be denied here too)
    denials = [e for e in ctl(platform, "events", None, None) if e.kind == "denied" and "mallory" in e.message]
    assert len(denials) == 7, denials
    assert sum(e.job_id == ref.id for e in denials) == 6

    monkeypatch.setenv("CUBERAY_USER", "admin")  # the tenant's admin may see and cancel any of its jobs
    assert client.status(ref.id).state in {JobState.QUEUED, JobState.ADMITTED, JobState.RUNNING}
    assert client.cancel(ref.id).state == JobState.CANCELLED
    assert "cancelled by admin" in client.status(ref.id).message


def gpu_task(name: str, gpu: str, sleep_s: float) -> dict[str, Any]:
    spec = tiny(name, sleep_s=sleep_s)
    spec["spec"]["resources"] = {"cpu": "500m", "gpu": gpu}
    return spec


@pytest.mark.timeout(300)
def test_cuberay_up_with_an_edited_file_reloads_quotas_without_killing_jobs(platform, ray_cluster,
                                                                            tmp_path: Path) -> None:
    import yaml

    running = client.submit(gpu_task(f"big-{uuid.uuid4().hex[:6]}", "4", 600), "a")
    wait_for(lambda: client.status(running.id).state == JobState.RUNNING, 90, "the 4-GPU job to run")
    lowered = yaml.safe_load(yaml.safe_dump(platform.spec))
    quota = lowered["spec"]["tenants"][0]["quota"]  # tenant a: max 8 GPUs -> 2, below the 4 in use
    quota["guaranteed"]["gpu"], quota["max"]["gpu"] = "2", "2"
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(lowered))
    client.up(str(path), address=ray_cluster.address)  # the controller is up: this reloads it

    waiting = client.submit(gpu_task(f"small-{uuid.uuid4().hex[:6]}", "1", 0), "a")
    wait_for(lambda: "max GPU" in client.status(waiting.id).reason, 30, "the new job to wait for a's new max")
    assert client.status(running.id).state == JobState.RUNNING  # over its new max, but never killed
    events = ctl(platform, "events", None, None)
    assert any(e.kind == "platform_reloaded" and "uses more than its new max" in e.message for e in events)
    assert not any(e.kind == "preempted" and e.job_id == running.id for e in events)

    old_pid = ctl(platform, "ping")["pid"]
    ray.kill(platform.controller, no_restart=False)  # Ray restarts it with its install-time file ...
    wait_for(lambda: _pid(platform) not in (None, old_pid), 60, "the controller to restart")
    usage = wait_for(lambda: {t.name: t for t in ctl(platform, "tenants")}.get("a"), 30, "tenant a's usage")
    assert usage.max["GPU"] == 2.0  # ... but the reloaded one wins
    assert client.status(running.id).state == JobState.RUNNING

    path.write_text(yaml.safe_dump(platform.spec))  # back to max 8: the waiting job is admitted
    assert "tenant a changed" in client.reload(str(path))
    wait_for(lambda: client.status(waiting.id).state.holds_resources or client.status(waiting.id).state ==
             JobState.SUCCEEDED, 60, "the waiting job to be admitted after the quota came back")


def _pid(platform) -> int | None:
    try:
        return ctl(platform, "ping")["pid"]
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
        return None
