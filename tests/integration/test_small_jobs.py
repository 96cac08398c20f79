"""Small jobs (one-worker command Tasks) run as named Ray tasks, without a driver process of their own.

What must hold as for a Ray Job: the job is visible in Ray (its task named for the
tenant and job, with its state), its output is what ``cuberay logs`` shows, the
driver cap bounds how many run at once, and stopping or killing one never stops
another.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.util.state import list_tasks

from cuberay.platform import client
from cuberay.platform.control.small import runner_running
from cuberay.platform.policy.states import JobState
from tests.support import alive, wait_for

CAP = 2


def small_jobs_on(platform, max_drivers: int = 8) -> None:
    """The session's platform reinstalled with small jobs on and the given driver cap (a test marked
    ``small_jobs`` gets small jobs from the start: tests/integration/conftest.py, ``platform``)."""
    scheduler = {**platform.spec["spec"]["scheduler"], "small_jobs": True, "max_drivers": max_drivers}
    client.install({**platform.spec, "spec": {**platform.spec["spec"], "scheduler": scheduler}}, replace=True)


def small(name: str, command: str, tenant: str = "a") -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
            "metadata": {"name": f"{name}-{uuid.uuid4().hex[:6]}", "tenant": tenant},
            "spec": {"workers": 1, "resources": {"cpu": "100m"}, "command": command}}


def ray_task(name: str) -> Any:
    tasks = list_tasks(filters=[("name", "=", name)], detail=True, raise_on_missing_output=False)
    return tasks[-1] if tasks else None


def test_small_jobs_keep_identity_logs_and_the_cap(platform, tmp_path: Path) -> None:
    small_jobs_on(platform, CAP)
    spans = tmp_path / "spans"
    spans.mkdir()
    # Each run records when it started and ended: the overlap is measured by the runs themselves.
    command = (f"{sys.executable} -c \"import os,time; t=time.time(); print('hello from', os.environ['KFJ_TASK_ID'],"
               f" 'tenant', os.environ['KFJ_TASK_PROJECT_NAME'], 'rank', os.environ['RANK']); time.sleep(0.5); "
               f"open('{spans}/' + os.environ['KFJ_TASK_ID'], 'w').write(f'{{t}} {{time.time()}}')\"")
    refs = [client.submit(small("tiny", command), "a") for _ in range(6)]
    ids = [r.id for r in refs]
    records = wait_for(lambda: (rs := [client.status(j) for j in ids]) and all(r.state.is_terminal for r in rs)
                       and rs, 120, "the small jobs to end")
    assert [r.state for r in records] == [JobState.SUCCEEDED] * len(ids), records
    assert all("Ray task a/" in (r.message or "") for r in records), [r.message for r in records]

    for job_id in ids:
        text = "".join(client.logs(job_id))
        assert f"hello from {job_id} tenant a rank 0" in text, text
        task = wait_for(lambda: (t := ray_task(f"a/{job_id}")) and t.state == "FINISHED" and t, 60,
                        f"Ray's task list to show a/{job_id} FINISHED")
        assert task.name == f"a/{job_id}"

    intervals = sorted(tuple(map(float, (spans / j).read_text().split())) for j in ids)
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    live = most = 0
    for _, step in events:
        live += step
        most = max(most, live)
    assert most <= CAP, f"{most} small jobs ran at once; the cap is {CAP}"


@pytest.mark.small_jobs
def test_stopping_or_killing_one_small_job_leaves_the_others_running(platform, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    command = f"echo $$ > {pids}/$KFJ_TASK_ID; exec sleep 600"
    cancelled, killed, kept = (client.submit(small(n, command), "b") for n in ("cancelled", "killed", "kept"))

    def pid_of(job_id: str) -> int:
        path = pids / job_id
        return int(path.read_text()) if path.exists() and path.read_text().strip() else 0

    wait_for(lambda: all(pid_of(r.id) for r in (cancelled, killed, kept)), 60, "all three commands to start")
    assert all(client.status(r.id).state == JobState.RUNNING for r in (cancelled, killed, kept))

    assert client.cancel(cancelled.id).state == JobState.CANCELLED
    wait_for(lambda: not alive(pid_of(cancelled.id)), 30, "the cancelled job's command to be killed")

    os.kill(pid_of(killed.id), signal.SIGKILL)
    record = wait_for(lambda: (r := client.status(killed.id)).state.is_terminal and r, 30,
                      "the killed job to end")
    assert record.state == JobState.FAILED and "137" in (record.message or ""), record

    # Both ends are processed; the third job must still run.
    assert client.status(kept.id).state == JobState.RUNNING
    assert alive(pid_of(kept.id))
    task = wait_for(lambda: ray_task(f"b/{kept.id}"), 30, "Ray's task list to show the kept job")
    assert task.name == f"b/{kept.id}" and task.state not in ("FINISHED", "FAILED"), task
    assert client.cancel(kept.id).state == JobState.CANCELLED
    wait_for(lambda: not alive(pid_of(kept.id)), 30, "the kept job's command to be killed")


@pytest.mark.small_jobs
def test_a_small_job_survives_a_controller_restart(platform, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    ref = client.submit(small("survivor", f"touch {marker}; exec sleep 600"), "a")
    wait_for(marker.exists, 60, "the small job to start")
    _restart_controller()
    assert client.status(ref.id).state == JobState.RUNNING
    assert ray.get(client.connect().ping.remote(client.caller()), timeout=30)["drivers"]["small"] == 1
    assert client.cancel(ref.id).state == JobState.CANCELLED


def _restart_controller() -> None:
    """Kill the controller and let Ray restart it (with the arguments it was installed with); wait for a cycle."""
    controller = client.connect()
    old_pid = ray.get(controller.ping.remote(client.caller()), timeout=60)["pid"]
    ray.kill(controller, no_restart=False)

    def restarted() -> bool:
        try:
            info = ray.get(controller.ping.remote(client.caller()), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            return False
        return info["pid"] != old_pid and info["ticks"] > 0

    wait_for(restarted, 60, "the restarted controller to run a cycle")


def _run_small(name: str) -> str:
    """Submit a one-worker command Task, wait for its end; how it ran (its record's message)."""
    ref = client.submit(small(name, "echo small"), "a")
    record = wait_for(lambda: (r := client.status(ref.id)).state.is_terminal and r, 60, "the job to end")
    assert record.state == JobState.SUCCEEDED, record
    return record.message or ""


def test_a_reload_turns_small_jobs_on_and_off_and_a_restarted_controller_starts_their_runner(platform) -> None:
    """The fixture's platform turns small jobs off: no runner waits beside its controller. A reload turns them on
    at once (the controller starts the runner); a controller Ray restarts reads the reloaded file and starts the
    runner again if it is gone; a reload that turns them off makes the next job a Ray Job."""
    from cuberay.platform.control.small import remove_runner

    assert not runner_running()
    scheduler = platform.spec["spec"]["scheduler"]

    def reload(on: bool) -> list[str]:
        return client.api().reload({**platform.spec, "spec": {**platform.spec["spec"],
                                                              "scheduler": {**scheduler, "small_jobs": on}}})

    assert reload(True) == ["scheduler settings changed"]
    assert runner_running()
    assert "Ray task a/" in _run_small("live-on")
    remove_runner()
    _restart_controller()
    assert runner_running()
    assert "Ray task a/" in _run_small("after-restart")
    assert reload(False) == ["scheduler settings changed"]
    assert "Ray Job" in _run_small("live-off")


@pytest.mark.small_jobs
def test_the_runner_keeps_a_read_end_for_a_controller_that_asks_again(platform) -> None:
    """A controller may die after reading a run's end and before storing it: its successor asks again."""
    from cuberay.platform.control.head import NAMESPACE
    from cuberay.platform.control.small import RUNNER_NAME

    ref = client.submit(small("asked-twice", "echo once"), "a")
    record = wait_for(lambda: (r := client.status(ref.id)).state.is_terminal and r, 60, "the job to end")
    assert record.state == JobState.SUCCEEDED, record
    runner = ray.get_actor(RUNNER_NAME, namespace=NAMESPACE)
    sid = record.submission_id
    assert ray.get(runner.ended.remote([sid], 0.0), timeout=30) == {sid: ("SUCCEEDED", "")}
    # A successor resends the start of each run it adopts; for a run that ended, nothing runs again.
    ray.get(runner.start.remote(sid, {}, "not-a-node", ()), timeout=30)
    assert sid not in ray.get(runner.running.remote(), timeout=30)


@ray.remote(max_retries=0, num_cpus=0)
def _deaf_to_cancels(pid_file: str) -> None:
    """A run whose plain cancel never lands (as when Ray loses the interrupt): it swallows KeyboardInterrupt."""
    import time

    Path(pid_file).write_text(str(os.getpid()))
    while True:
        try:
            time.sleep(0.05)
        except KeyboardInterrupt:
            pass


def test_a_cancel_the_run_does_not_answer_is_forced(platform, tmp_path: Path, monkeypatch) -> None:
    import asyncio

    from cuberay.runtime import small_runner as small_mod

    monkeypatch.setattr(small_mod, "STOP_GRACE_S", 1.0)
    pid_file = tmp_path / "pid"

    async def stop_a_deaf_run() -> tuple[str, str]:
        runner = small_mod.SmallRunner()
        ref = _deaf_to_cancels.remote(str(pid_file))
        wait_for(lambda: pid_file.exists() and pid_file.read_text(), 60, "the run to start")
        runner.runs["s-deaf"] = ref
        watcher = asyncio.get_running_loop().create_task(runner._watch("s-deaf", ref))
        await runner.stop("s-deaf")
        await asyncio.wait_for(watcher, 30)
        return runner.ends["s-deaf"]

    status, _ = asyncio.run(stop_a_deaf_run())
    assert status == small_mod.STOPPED
    wait_for(lambda: not alive(int(pid_file.read_text())), 30, "the run's worker to be gone")
