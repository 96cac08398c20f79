"""The whole local Ray stopped and started again while one job runs and one waits; the store (SQLite, and a real
PostgreSQL server outside Ray) persists.

It starts Ray twice: 34 s in all at load 5-7 on 2 cores, but 65 s at load 6-12 and 155 s at load 20-25.

This module brings its own one-node Ray (the session cluster of ``conftest.py`` has four nodes and must not be
torn down): this process leaves the session cluster, if it was connected, and joins it again at the end.

After the restart and a fresh install of the controller on the new Ray (what ``cuberay up`` does), every job is
there exactly once, the job whose run died with Ray runs again as a recorded second attempt (the workers' own
start stamps, one line per start in a file, are counted against the recorded attempts), the waiting job still
waits and runs once, and the ledger matches Ray's real placement groups and running Ray Jobs.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import ray

from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.integration.conftest import (
    PLATFORM_USER,
    START_TIMEOUT_S,
    GiB,
    _reload_ray_auth_config,
    _session_env,
    _wait_for_jobs_api,
)
from tests.support import alive, wait_for

pytestmark = pytest.mark.own_ray  # runs beside the session cluster's tests (tests/run_suite.py)

# One start stamp (the worker's pid) per run; every run then waits for the test's go-file.
STAMPING_SCRIPT = """
import os, sys, time
with open(sys.argv[1], "a") as stamps:
    stamps.write(f"{os.getpid()}\\n")
while not os.path.exists(sys.argv[2]):
    time.sleep(0.2)
"""


@pytest.fixture
def own_ray() -> Iterator[Callable[[], Any]]:
    """``start()`` starts a one-node Ray (head with the Jobs API) in this fixture's temp dir and connects to it;
    call ``ray.shutdown()`` and the cluster's ``shutdown()`` to stop it. Everything is stopped at the end."""
    from ray.cluster_utils import Cluster

    previous = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    ray.shutdown()
    clusters: list[Any] = []
    root = tempfile.mkdtemp(prefix="crr")  # short: Ray's socket paths must stay under 108 bytes
    temp_dir = os.path.join(root, "ray")
    os.mkdir(temp_dir)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _session_env().items():
            if key != "RAY_AUTH_TOKEN" or key not in os.environ:
                mp.setenv(key, value)  # the session's token, when it has one, serves this Ray too
        mp.setenv("RAY_TMPDIR", root)  # Ray's address file goes here, not into the session cluster's dir
        mp.setenv("CUBERAY_USER", PLATFORM_USER)
        _reload_ray_auth_config()

        def start() -> Any:
            cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 2, "num_gpus": 0, "memory": 4 * GiB, "temp_dir": temp_dir, "include_dashboard": True,
                "dashboard_port": 0, "dashboard_agent_listen_port": None})
            clusters.append(cluster)
            ray.init(address=cluster.address)
            _wait_for_jobs_api(f"http://{cluster.webui_url}", time.monotonic() + START_TIMEOUT_S)
            return cluster

        try:
            yield start
        finally:
            ray.shutdown()
            for cluster in clusters:
                cluster.shutdown()
            shutil.rmtree(root, ignore_errors=True)
    _reload_ray_auth_config()
    if previous is not None:
        ray.init(address=previous)


def platform_spec(storage: Path, database: str) -> dict[str, Any]:
    """One tenant that may hold one CPU: one of the two 1-CPU jobs runs, the other waits."""
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "restart"},
            "spec": {"storage": str(storage), "database": database,
                     "scheduler": {"cycle_interval_s": 0.5, "max_drivers": 4, "small_jobs": False},
                     "tenants": [{"name": "t", "members": [PLATFORM_USER],
                                  "quota": {"guaranteed": {"cpu": "1"}, "max": {"cpu": "1"}}}]}}


def stamping_job(name: str, script: Path, stamps: Path, go: Path) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
            "spec": {"workers": 1, "resources": {"cpu": "1"}, "command": f"{sys.executable} {script} {stamps} {go}"}}


def starts(stamps: Path) -> list[int]:
    return [int(pid) for pid in stamps.read_text().split()] if stamps.exists() else []


def ray_pgs() -> dict[str, list[str]]:
    """Ray's placement groups holding resources now: id -> node id per bundle."""
    from ray.util.placement_group import placement_group_table

    return {pg_id: [pg["bundles_to_node_id"][i] for i in sorted(pg["bundles_to_node_id"])]
            for pg_id, pg in placement_group_table().items() if pg["state"] == "CREATED"}


def live_ray_jobs(cluster: Any) -> set[str]:
    from ray.job_submission import JobSubmissionClient

    jobs = JobSubmissionClient(f"http://{cluster.webui_url}").list_jobs()
    return {j.submission_id for j in jobs if j.submission_id and not j.status.is_terminal()}


@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_whole_ray_restart_loses_no_job_and_reruns_the_one_that_died_as_a_new_attempt(
        own_ray, tmp_path: Path, database: str) -> None:
    storage = tmp_path / "cuberay"
    spec = platform_spec(storage, database)
    script, go = tmp_path / "stamping.py", tmp_path / "go"
    script.write_text(STAMPING_SCRIPT)
    stamps = {"run": tmp_path / "run.stamps", "wait": tmp_path / "wait.stamps"}
    suffix = uuid.uuid4().hex[:6]

    t0 = time.monotonic()
    marks: dict[str, float] = {}

    def mark(what: str) -> None:
        marks[what] = round(time.monotonic() - t0, 1)

    first = own_ray()
    mark("ray up")
    client.install(spec, address=first.address)
    ids = {key: client.submit(stamping_job(f"{key}-{suffix}", script, path, go), "t").id
           for key, path in stamps.items()}
    wait_for(lambda: client.status(ids["run"]).state == JobState.RUNNING and starts(stamps["run"]), 120,
             "the first job's worker to start")
    assert "max CPU" in wait_for(lambda: client.status(ids["wait"]).reason, 30, "the second job's reason")
    assert client.status(ids["wait"]).state == JobState.QUEUED
    (died,) = starts(stamps["run"])
    mark("one runs, one waits")

    ray.shutdown()
    first.shutdown()  # every Ray process: the controller, the run's driver and worker
    wait_for(lambda: not alive(died), 60, "the run to die with Ray")
    mark("ray stopped")

    second = own_ray()
    mark("ray up again")
    installed = time.monotonic()
    client.install(spec, address=second.address)  # what `cuberay up` does: the store still has both jobs
    # Admission is back: one of the two runs on the new Ray (either may go first: both wait now).
    running = wait_for(lambda: next((r for r in (client.status(j) for j in ids.values())
                                     if r.state == JobState.RUNNING and r.submission_id), None), 120,
                       "a job to run on the new Ray")
    resumed_s = round(time.monotonic() - installed, 1)
    key = next(k for k, j in ids.items() if j == running.id)
    wait_for(lambda: len(starts(stamps[key])) == (2 if key == "run" else 1), 60, "its worker to start")
    # The ledger matches Ray: one allocation, one placement group on its node, one live Ray Job (its driver).
    allocations = client.api().running()
    pgs = ray_pgs()
    assert list(allocations) == [running.id], allocations
    assert list(pgs.values()) == [allocations[running.id]], (pgs, allocations)
    assert live_ray_jobs(second) == {running.submission_id}
    requeued = [e for e in client.api().events(ids["run"]) if e.kind == "requeued"]
    assert requeued and "controller was down" in requeued[0].message, requeued

    mark("checked")
    go.write_text("go")
    done = wait_for(lambda: (recs := {k: client.status(j) for k, j in ids.items()}) and
                    all(r.state.is_terminal for r in recs.values()) and recs, 120, "both jobs to end")
    stored = client.list_jobs(tenant="t")
    assert sorted(r.id for r in stored) == sorted(ids.values())  # each exactly once, none lost
    assert {k: (r.state, r.attempts) for k, r in done.items()} == {
        "run": (JobState.SUCCEEDED, 2), "wait": (JobState.SUCCEEDED, 1)}, done
    assert {k: len(starts(p)) for k, p in stamps.items()} == {"run": 2, "wait": 1}  # one start per attempt
    assert done["run"].submission_id == f"cuberay-{ids['run']}-2"
    wait_for(lambda: not ray_pgs() and not live_ray_jobs(second) and not client.api().running(), 60,
             "Ray and the ledger to hold nothing")
    mark("both ended")
    print(f"admission back {resumed_s}s after the controller was installed on the new Ray; {marks}")
    client.uninstall()
