"""The launcher against the session's real Ray Jobs API (token auth on)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from ray.job_submission import JobSubmissionClient

from cuberay.errors import NotFoundError, PlatformNotRunningError
from cuberay.platform.control.launcher import (
    STOPPED,
    SUCCEEDED,
    TERMINAL,
    Launcher,
    LauncherError,
)
from tests.support import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]




@pytest.fixture
def run_id(job_client: JobSubmissionClient) -> Iterator[str]:
    """A unique prefix for this test's submission ids; its jobs are stopped and deleted afterwards."""
    prefix = f"t-launch-{uuid.uuid4().hex[:8]}"
    yield prefix
    mine = [j.submission_id for j in job_client.list_jobs() if (j.submission_id or "").startswith(prefix)]
    for sid in mine:
        job_client.stop_job(sid)
    for sid in mine:
        wait_for(lambda: job_client.get_job_status(sid).is_terminal(), 30, f"{sid} to stop")
        job_client.delete_job(sid)


def meta(job: str) -> dict[str, str]:
    return {"cuberay.io/tenant": "team-a", "cuberay.io/job": job, "cuberay.io/kind": "Task"}


def ray_in_flight(client: JobSubmissionClient, prefix: str) -> int:
    """Non-terminal jobs of this test, counted from Ray's own job list."""
    return sum(
        1 for j in client.list_jobs() if (j.submission_id or "").startswith(prefix) and not j.status.is_terminal()
    )


class _Recording:
    """The launcher's own Jobs API client, doing every call, with the name of each call kept."""

    def __init__(self, inner: JobSubmissionClient) -> None:
        self.inner, self.calls = inner, []

    def __getattr__(self, name: str):
        attr = getattr(self.inner, name)
        if callable(attr):
            self.calls.append(name)
        return attr


def test_a_poll_reads_the_jobs_it_tracks_not_every_job_the_cluster_ran(ray_cluster, run_id: str) -> None:
    # A list of every Ray Job grows with the cluster's history (the session's hundreds of ended jobs by now); a
    # tick that listed them all cost the dashboard more CPU the longer the cluster ran.
    launcher = Launcher(ray_cluster.dashboard_url)
    launcher._client = recording = _Recording(launcher._client)
    sid = f"{run_id}-only"
    launcher.start(sid, "python -c \"print('hi')\"", metadata=meta(sid), runtime_env=None)
    recording.calls.clear()
    polls = 0

    def ended() -> bool:
        nonlocal polls
        polls += 1
        return launcher.poll().get(sid) in TERMINAL

    wait_for(ended, 60, f"{sid} to end")
    assert "list_jobs" not in recording.calls, recording.calls
    assert recording.calls.count("get_job_info") == polls, (polls, recording.calls)


def test_bounded_drivers_reach_succeeded_with_metadata_env_and_logs(
    ray_cluster, job_client: JobSubmissionClient, run_id: str
) -> None:
    launcher = Launcher(ray_cluster.dashboard_url, max_drivers=2)
    entrypoint = (
        "python -c \"import os, time; print('hi', os.environ['SPEC_VAR'], os.environ['CUBERAY_MARK']); "
        'time.sleep(1)"'
    )
    todo = [f"{run_id}-{i}" for i in range(3)]
    reported: dict[str, list[str]] = {sid: [] for sid in todo}
    most_in_ray = 0
    deadline = time.monotonic() + 120
    while todo or launcher.in_flight():
        assert time.monotonic() < deadline, f"jobs did not finish: {launcher.tracked()}"
        while todo and launcher.can_start():
            sid = todo.pop(0)
            launcher.start(
                sid, entrypoint, metadata=meta(sid),
                runtime_env={"env_vars": {"SPEC_VAR": "from-spec", "CUBERAY_MARK": "overridden"}},
                env={"CUBERAY_MARK": sid},
            )
        if todo:
            # At capacity: the launcher itself refuses a third driver.
            with pytest.raises(LauncherError, match="max_drivers is 2"):
                launcher.start(f"{run_id}-extra", entrypoint, metadata=meta("extra"), runtime_env=None)
        in_ray = ray_in_flight(job_client, run_id)
        assert in_ray <= 2, f"Ray runs {in_ray} of this test's drivers at once; max_drivers=2"
        most_in_ray = max(most_in_ray, in_ray)
        for sid, status in launcher.poll().items():
            reported[sid].append(status)
        time.sleep(0.2)

    assert most_in_ray == 2, "the limit never bound: the test did not exercise it"
    for sid, statuses in reported.items():
        assert statuses[-1] == SUCCEEDED and statuses.count(SUCCEEDED) == 1, (sid, statuses)
        assert len(statuses) == len(set(statuses)), f"poll() repeated an unchanged status: {statuses}"
    assert launcher.poll() == {} and launcher.in_flight() == 0

    by_id = {j.submission_id: j for j in job_client.list_jobs()}
    for sid in reported:
        assert by_id[sid].metadata == meta(sid)
        assert f"hi from-spec {sid}" in launcher.logs(sid)
        assert launcher.status(sid) == SUCCEEDED
    assert f"{run_id}-extra" not in by_id


def test_tail_then_stop_is_idempotent(ray_cluster, run_id: str) -> None:
    launcher = Launcher(ray_cluster.dashboard_url, max_drivers=2)
    sid = f"{run_id}-long"
    launcher.start(
        sid, "python -u -c \"import time; print('started'); time.sleep(120)\"", metadata=meta(sid), runtime_env=None
    )

    async def first_output() -> str:
        seen = ""
        async for chunk in launcher.tail(sid):
            seen += chunk
            if "started" in seen:
                return seen
        return seen

    assert "started" in asyncio.run(asyncio.wait_for(first_output(), 60))
    launcher.stop(sid)
    launcher.stop(sid)  # again: no error
    launcher.stop(f"{run_id}-never-submitted")  # unknown: no error
    final = wait_for(lambda: launcher.poll().get(sid) in TERMINAL and launcher.status(sid), 60, f"{sid} to stop")
    assert final == STOPPED
    assert launcher.in_flight() == 0
    launcher.stop(sid)  # after the end: still no error


def test_restarted_controller_adopts_and_resubmission_is_idempotent(ray_cluster, run_id: str) -> None:
    first = Launcher(ray_cluster.dashboard_url)
    sid = f"{run_id}-adopt"
    first.start(sid, "python -c \"print('adopted')\"", metadata=meta("job-1"), runtime_env=None)

    second = Launcher(ray_cluster.dashboard_url)  # as after a controller restart
    second.start(sid, "python -c \"print('adopted')\"", metadata=meta("job-1"), runtime_env=None)  # same job: adopted
    assert second.in_flight() == 1
    with pytest.raises(LauncherError, match="already exists"):
        second.start(sid, "python -c pass", metadata=meta("another-job"), runtime_env=None)

    third = Launcher(ray_cluster.dashboard_url)
    third.adopt([sid, f"{run_id}-lost"])
    assert third.in_flight() == 2
    first_poll = third.poll()
    assert first_poll[f"{run_id}-lost"] == "FAILED"  # unknown to Ray: reported, then dropped
    assert sid in first_poll
    wait_for(lambda: third.poll().get(sid) == SUCCEEDED or third.in_flight() == 0, 60, f"{sid} to succeed")
    assert third.in_flight() == 0 and third.status(sid) == SUCCEEDED


def test_errors_name_the_problem(ray_cluster, run_id: str) -> None:
    launcher = Launcher(ray_cluster.dashboard_url)
    with pytest.raises(NotFoundError, match="no job with that submission id"):
        launcher.status(f"{run_id}-missing")
    with pytest.raises(NotFoundError):
        launcher.logs(f"{run_id}-missing")
    with pytest.raises(LauncherError, match="str to str"):
        bad: dict = {"cuberay.io/gpus": 4}
        launcher.start(f"{run_id}-x", "true", metadata=bad, runtime_env=None)
    with pytest.raises(PlatformNotRunningError, match="no Ray dashboard answers"):
        Launcher("127.0.0.1:9")


def test_missing_token_is_explained(ray_cluster) -> None:
    """A process without RAY_AUTH_MODE=token (e.g. a CLI outside the cluster) gets told how to fix it."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    code = (
        "import sys\nfrom cuberay.platform.control.launcher import Launcher\n"
        "try:\n    Launcher(sys.argv[1])\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, ray_cluster.dashboard_url],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert "PlatformNotRunningError" in out.stdout and "RAY_AUTH_MODE=token" in out.stdout, out.stdout + out.stderr
