"""The head dies and comes back on a fault-tolerant GCS (a real Redis) with the store on a real PostgreSQL server:
running work goes on through it, and the new head's controller takes it up again without a new attempt.

The shape is KubeRay's with ``gcsFaultToleranceOptions`` (``cuberay kube render --redis``): the head runs the GCS,
the dashboard and the controller, and no job driver (the platform's ``scheduler.driver_resource``, which only the
worker node offers, puts every driver there). Every process of the head is killed at once, as when its pod dies;
a new head starts on the same Redis, address and ports, the worker node's raylet rejoins it, and ``cuberay up``
(``client.install``) starts a new controller on the new head (Ray ends the old one: the node it was pinned to is
gone), which reads the store and follows the running job's Ray Job again.

Checked: the job that ran never stopped (the same worker process before, during and after; one start), is still
its first attempt and succeeds; the waiting jobs still wait in the order they came and each runs once; every id
stays unique; Ray's placement groups and Ray Jobs match the ledger. Without the platform's driver_resource the
driver runs on the head (the first check fails); without the worker node's own address (CUBERAY_NODE_IP) the
driver attaches to the head's raylet and its worker dies with the head.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import ray

from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from cuberay.platform.transport.ray_call import NODE_IP_ENV
from tests.integration.conftest import (
    PLATFORM_USER,
    START_TIMEOUT_S,
    GiB,
    _reload_ray_auth_config,
    _session_env,
    _wait_for_jobs_api,
)
from tests.integration.test_ray_restart import STAMPING_SCRIPT, live_ray_jobs, ray_pgs, starts
from tests.support import alive, wait_for

pytestmark = pytest.mark.own_ray  # runs beside the session cluster's tests (tests/run_suite.py)

DRIVERS = "cuberay_driver"  # the resource only the worker node offers: drivers run there, never on the head
WORKER_IP = "127.0.0.2"
REDIS = shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FaultTolerantRay:
    """A head on an external Redis (GCS fault tolerance) at fixed ports, and one worker node offering drivers."""

    def __init__(self, root: str) -> None:
        from ray.cluster_utils import Cluster

        self.temp_dir = os.path.join(root, "ray")
        os.mkdir(self.temp_dir)
        self.head_args = {"num_cpus": 0, "num_gpus": 0, "memory": 2 * GiB, "temp_dir": self.temp_dir,
                          "include_dashboard": True, "dashboard_port": _free_port(),
                          "gcs_server_port": _free_port(), "dashboard_agent_listen_port": None}
        self.cluster = Cluster(initialize_head=True, head_node_args=dict(self.head_args))
        # An address of its own, as a pod has: on one host Ray would attach the drivers started there to the
        # head's raylet, and they (and the workers they own) would die with the head.
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(NODE_IP_ENV, WORKER_IP)  # the node's processes (and so its drivers) inherit it
            self.worker = self.cluster.add_node(num_cpus=2, num_gpus=0, memory=4 * GiB, resources={DRIVERS: 8},
                                                node_ip_address=WORKER_IP)
        self.head = self.cluster.head_node
        self.address = self.cluster.address
        self.dashboard = f"http://{self.cluster.webui_url}"

    def kill_head(self) -> None:
        """Every process of the head at once (GCS, raylet, dashboard, the controller on it), no goodbyes."""
        self.head.kill_all_processes(check_alive=False, allow_graceful=False)

    def start_head(self) -> None:
        """A new head on the same Redis, address and ports (what a restarted head pod gets)."""
        from ray._private.node import Node
        from ray._private.parameter import RayParams

        params = RayParams(**self.head_args)
        params.update_if_absent(node_ip_address=self.head.node_ip_address)
        self.head = Node(params, head=True, shutdown_at_exit=False, spawn_reaper=False)

    def stop(self) -> None:
        for node in (self.head, *self.cluster.worker_nodes):
            node.kill_all_processes(check_alive=False, allow_graceful=False)


@pytest.fixture
def ft_ray() -> Iterator[FaultTolerantRay]:
    if REDIS is None:
        pytest.skip("needs redis-server (Debian's redis-server package; .ci/run installs it)")
    previous = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    ray.shutdown()
    root = tempfile.mkdtemp(prefix="chr")  # short: Ray's socket paths must stay under 108 bytes
    port = _free_port()
    redis = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                              "--dir", root], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    started: FaultTolerantRay | None = None
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _session_env().items():
            if key != "RAY_AUTH_TOKEN" or key not in os.environ:
                mp.setenv(key, value)
        mp.setenv("RAY_TMPDIR", root)
        mp.setenv("CUBERAY_USER", PLATFORM_USER)
        mp.setenv("RAY_REDIS_ADDRESS", f"127.0.0.1:{port}")  # Ray's GCS fault tolerance (an external Redis)
        _reload_ray_auth_config()
        try:
            wait_for(lambda: _answers(port), 30, "redis-server to listen")
            started = FaultTolerantRay(root)
            ray.init(address=started.address)
            _wait_for_jobs_api(started.dashboard, time.monotonic() + START_TIMEOUT_S)
            yield started
        finally:
            ray.shutdown()
            if started is not None:
                started.stop()
            redis.kill()
            redis.wait(timeout=30)
            shutil.rmtree(root, ignore_errors=True)
    _reload_ray_auth_config()
    if previous is not None:
        ray.init(address=previous)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def platform_spec(storage: Path, database: str, drivers: str | None = DRIVERS) -> dict[str, Any]:
    """One tenant that may hold one CPU (one job runs, the others wait); drivers only where ``drivers`` is."""
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "head-restart"},
            "spec": {"storage": str(storage), "database": database,
                     "scheduler": {"cycle_interval_s": 0.5, "max_drivers": 4, "small_jobs": False,
                                   "driver_resource": drivers},
                     "tenants": [{"name": "t", "members": [PLATFORM_USER],
                                  "quota": {"guaranteed": {"cpu": "1"}, "max": {"cpu": "1"}}}]}}


def stamping_job(name: str, script: Path, stamps: Path, go: Path) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
            "spec": {"workers": 1, "resources": {"cpu": "1"}, "command": f"{sys.executable} {script} {stamps} {go}"}}


def driver_nodes(dashboard: str) -> dict[str, str | None]:
    """Ray Job submission id -> the node id its driver runs on, for the Ray Jobs that have not ended."""
    from ray.job_submission import JobSubmissionClient

    return {j.submission_id: j.driver_node_id for j in JobSubmissionClient(dashboard).list_jobs()
            if j.submission_id and not j.status.is_terminal()}


def waiting() -> list[str]:
    return [e.job_id for e in client.queue("t") if e.state == JobState.QUEUED]


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_running_work_outlives_the_head_and_the_new_controller_adopts_it_without_a_new_attempt(
        ft_ray: FaultTolerantRay, tmp_path: Path, database: str) -> None:
    spec = platform_spec(tmp_path / "cuberay", database)
    script, go = tmp_path / "stamping.py", tmp_path / "go"
    script.write_text(STAMPING_SCRIPT)
    keys = ("run", "wait1", "wait2", "wait3")
    stamps = {key: tmp_path / f"{key}.stamps" for key in keys}
    suffix = uuid.uuid4().hex[:6]
    t0 = time.monotonic()
    marks: dict[str, float] = {}

    def mark(what: str) -> None:
        marks[what] = round(time.monotonic() - t0, 1)

    client.install(spec, address=ft_ray.address)
    ids = {"run": client.submit(stamping_job(f"run-{suffix}", script, stamps["run"], go), "t").id}
    wait_for(lambda: client.status(ids["run"]).state == JobState.RUNNING and starts(stamps["run"]), 120,
             "the first job's worker to start")
    for key in keys[1:]:  # one at a time: their order in the queue is the order they came
        ids[key] = client.submit(stamping_job(f"{key}-{suffix}", script, stamps[key], go), "t").id
    order = [ids[k] for k in keys[1:]]
    wait_for(lambda: waiting() == order, 30, "the three jobs to wait in the order they came")
    running = client.status(ids["run"])
    # Its driver runs on the worker node, the only one offering DRIVERS; the head runs none.
    drivers = wait_for(lambda: (d := driver_nodes(ft_ray.dashboard)).get(running.submission_id) and d, 30,
                       "the Ray Job to name its driver's node")
    assert drivers == {running.submission_id: ft_ray.worker.node_id}, (drivers, ft_ray.worker.node_id)
    (worker_pid,) = starts(stamps["run"])
    mark("one runs, three wait")

    ray.shutdown()
    ft_ray.kill_head()
    mark("head killed")
    assert alive(worker_pid), "the running job's worker died with the head"

    ft_ray.start_head()
    ray.init(address=ft_ray.address)
    wait_for(lambda: rejoined(ft_ray), 120, "the worker node to rejoin the new head")
    mark("new head, worker rejoined")
    _wait_for_jobs_api(ft_ray.dashboard, time.monotonic() + START_TIMEOUT_S)
    installed = time.monotonic()
    client.install(spec, address=ft_ray.address)  # what `cuberay up` does
    mark("controller installed")
    assert waiting() == order  # still waiting, in the same order
    adopted = wait_for(lambda: (r := client.status(ids["run"])).state == JobState.RUNNING and r, 60,
                       "the running job to be followed again")
    assert adopted.attempts == 1 and adopted.submission_id == running.submission_id, adopted
    assert starts(stamps["run"]) == [worker_pid]  # the same process: never restarted
    assert alive(worker_pid), "the running job's worker did not outlive the head's restart"
    allocations = client.api().running()
    assert list(allocations) == [ids["run"]] and list(ray_pgs().values()) == [allocations[ids["run"]]], \
        (allocations, ray_pgs())
    assert live_ray_jobs(ft_ray.cluster) == {running.submission_id}
    readopt_s = round(time.monotonic() - installed, 1)

    go.write_text("go")
    done = wait_for(lambda: (recs := {k: client.status(j) for k, j in ids.items()}) and
                    all(r.state.is_terminal for r in recs.values()) and recs, 240, "every job to end")
    mark("all ended")
    assert {k: (r.state, r.attempts) for k, r in done.items()} == {k: (JobState.SUCCEEDED, 1) for k in keys}, done
    assert {k: len(starts(p)) for k, p in stamps.items()} == {k: 1 for k in keys}  # nothing ran twice
    stored = client.list_jobs(tenant="t")
    assert sorted(r.id for r in stored) == sorted(ids.values()) and len(set(ids.values())) == len(keys)
    started_at = {k: client.status(ids[k]).start_time for k in keys[1:]}
    assert sorted(started_at, key=lambda k: started_at[k]) == list(keys[1:])  # they ran in the order they waited
    wait_for(lambda: not ray_pgs() and not live_ray_jobs(ft_ray.cluster) and not client.api().running(), 60,
             "Ray and the ledger to hold nothing")
    print(f"the running job was followed again {readopt_s}s after the controller was installed on the new head; "
          f"{marks}")
    client.uninstall()


def rejoined(ft_ray: FaultTolerantRay) -> bool:
    """The new head and the (same) worker node are alive in the GCS."""
    alive_ids = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    return {ft_ray.head.node_id, ft_ray.worker.node_id} <= alive_ids


def restart_head(ft_ray: FaultTolerantRay) -> None:
    """Kill every process of the head, start a new one, wait for the worker node and the Jobs API."""
    ray.shutdown()
    ft_ray.kill_head()
    ft_ray.start_head()
    ray.init(address=ft_ray.address)
    wait_for(lambda: rejoined(ft_ray), 120, "the worker node to rejoin the new head")
    _wait_for_jobs_api(ft_ray.dashboard, time.monotonic() + START_TIMEOUT_S)


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_job_whose_driver_died_with_the_head_runs_again_as_a_recorded_attempt(
        ft_ray: FaultTolerantRay, tmp_path: Path, database: str) -> None:
    """Without a driver_resource the driver runs on the head and dies with it (its worker too: Ray ends the
    workers of a dead owner); the new controller sees its Ray Job fail for want of a supervisor, not of the
    command, and runs it again as attempt 2 although the spec allows no failure; the waiting job waits on."""
    spec = platform_spec(tmp_path / "cuberay", database, drivers=None)
    script, go = tmp_path / "stamping.py", tmp_path / "go"
    script.write_text(STAMPING_SCRIPT)
    stamps = {key: tmp_path / f"{key}.stamps" for key in ("run", "wait")}
    suffix = uuid.uuid4().hex[:6]
    client.install(spec, address=ft_ray.address)
    ids = {"run": client.submit(stamping_job(f"run-{suffix}", script, stamps["run"], go), "t").id}
    wait_for(lambda: client.status(ids["run"]).state == JobState.RUNNING and starts(stamps["run"]), 120,
             "the first job's worker to start")
    ids["wait"] = client.submit(stamping_job(f"wait-{suffix}", script, stamps["wait"], go), "t").id
    wait_for(lambda: waiting() == [ids["wait"]], 30, "the second job to wait")
    first = client.status(ids["run"])
    drivers = wait_for(lambda: (d := driver_nodes(ft_ray.dashboard)).get(first.submission_id) and d, 30,
                       "the Ray Job to name its driver's node")
    assert drivers[first.submission_id] == ft_ray.head.node_id, (drivers, ft_ray.head.node_id)
    (died,) = starts(stamps["run"])

    restart_head(ft_ray)
    wait_for(lambda: not alive(died), 60, "the worker of the driver that died to end")
    client.install(spec, address=ft_ray.address)
    again = wait_for(lambda: len(starts(stamps["run"])) == 2 and client.status(ids["run"]), 120,
                     "the lost attempt to run again")
    assert again.attempts == 2 and again.submission_id == f"cuberay-{ids['run']}-2", again
    lost = [e for e in client.api().events(ids["run"]) if e.kind == "requeued"]
    assert lost and "lost its driver" in lost[0].message, lost
    assert waiting() == [ids["wait"]]
    go.write_text("go")
    done = wait_for(lambda: (recs := {k: client.status(j) for k, j in ids.items()}) and
                    all(r.state.is_terminal for r in recs.values()) and recs, 240, "both jobs to end")
    assert {k: (r.state, r.attempts) for k, r in done.items()} == {
        "run": (JobState.SUCCEEDED, 2), "wait": (JobState.SUCCEEDED, 1)}, done
    assert {k: len(starts(p)) for k, p in stamps.items()} == {"run": 2, "wait": 1}
    client.uninstall()
