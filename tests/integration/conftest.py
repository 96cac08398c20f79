"""Integration tier: one real, local, multi-node Ray cluster for the whole session.

``ray_cluster`` starts it once (about 10 s on 2 cores) with
``ray.cluster_utils.Cluster``; every node is a set of processes on this
machine, with fake GPU counts, so placement across nodes is real:

  head      CPU 4, GPU 0, memory 8 GiB, dashboard + Jobs API
  worker 0  CPU 4, GPU 4, memory 32 GiB, accelerator A100
  worker 1  CPU 4, GPU 4, memory 32 GiB, accelerator A100
  worker 2  CPU 4, GPU 4, memory 32 GiB, accelerator V100

(``memory`` is Ray's logical resource, fixed here so tests do not depend on
the machine's RAM; accelerators follow Ray's convention: node label
``ray.io/accelerator-type`` and resource ``accelerator_type:<model>``.)

Like ``ray start --head`` in Ray 2.60, the cluster uses token authentication.
The token is a random one in ``RAY_AUTH_TOKEN`` for the session, with
``RAY_AUTH_MODE=token``, so this process, subprocesses it spawns (CLI runs,
``ray job submit``), Ray workers and Ray Job drivers all carry it, and
``JobSubmissionClient(ray_cluster.dashboard_url)`` works with no argument.

The cluster's temp dir (logs under ``session_latest/logs``) is removed at the
end; set ``CUBERAY_KEEP_RAY_TMP=1`` to keep it.

Tests share the cluster: leave it as you found it (cancel jobs, remove
placement groups, kill detached actors, use a fresh namespace or names).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from tests.integration.browser import chromium  # noqa: F401 (a fixture: the console's browser tests share one)
from tests.postgres import INSTALL_HINT, PostgresServer, find_bin_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30
HEAD = {"num_cpus": 4, "num_gpus": 0, "memory": 8 * GiB}
WORKER_ACCELERATORS = ("A100", "A100", "V100")
WORKER = {"num_cpus": 4, "num_gpus": 4, "memory": 32 * GiB}
START_TIMEOUT_S = 120


@dataclass(frozen=True)
class RayCluster:
    """Where the session's cluster is, and which node is which."""

    address: str  # GCS address, for ray.init(address=...)
    dashboard_url: str  # http://host:port, for JobSubmissionClient and the REST API
    head_node_id: str
    worker_node_ids: tuple[str, ...]  # in WORKER_ACCELERATORS order
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # node id -> labels
    temp_dir: str = ""  # the session's Ray temp dir: logs are under session_latest/logs
    started_in_s: float = 0.0
    cluster: object = None  # the ray.cluster_utils.Cluster: a test may add_node() and must remove_node() it


def _session_env() -> dict[str, str]:
    path_dirs = [os.path.dirname(sys.executable), os.environ.get("PATH", "")]
    pythonpath = [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    return {
        # Ray 2.60's default for local clusters; a fresh token per session.
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(16),
        # Job entrypoints such as `python -m cuberay.run` must find this venv's
        # python, and drivers/workers must import this checkout of cuberay.
        "PATH": os.pathsep.join(filter(None, path_dirs)),
        "PYTHONPATH": os.pathsep.join(filter(None, pythonpath)),
        "RAY_USAGE_STATS_ENABLED": "0",  # no network here
        # Ray Train V2 hands each worker's report to its controller at a poll, every 2 s by default,
        # and a worker's next report waits for that: a 40-step run took 80 s. Train passes this on
        # from the driver (a job driver inherits it from the nodes) to its controller and workers.
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2",
        # Ray Train starts an actor per worker group that watches for node drains (spot preemption notices);
        # no node of this cluster is ever drained, and on 2 cores each of the suite's ~60 worker groups paid
        # about a second of CPU for it. The README walk-through (a newcomer's environment) keeps Ray's default.
        "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    }


def _reload_ray_auth_config() -> None:
    # Ray reads RAY_AUTH_MODE into a process-wide config at import; a test
    # module may have imported ray before this fixture set the variable.
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _wait_for_jobs_api(dashboard_url: str, deadline: float) -> None:
    from ray.job_submission import JobSubmissionClient

    while True:
        try:
            JobSubmissionClient(dashboard_url).list_jobs()
            return
        except Exception:  # noqa: BLE001 - the dashboard is still starting
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _describe() -> tuple[str, tuple[str, ...], dict[str, dict[str, str]]]:
    import ray

    nodes = [n for n in ray.nodes() if n["Alive"]]
    labels = {n["NodeID"]: dict(n.get("Labels") or {}) for n in nodes}
    head_node_id = next(n["NodeID"] for n in nodes if "node:__internal_head__" in n["Resources"])
    workers = []
    for model in WORKER_ACCELERATORS:
        for node_id, node_labels in labels.items():
            if node_id not in workers and node_id != head_node_id and node_labels.get("ray.io/accelerator-type") == model:
                workers.append(node_id)
                break
    return head_node_id, tuple(workers), labels


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """One local Ray cluster (head + 3 GPU workers) shared by the whole session."""
    import ray
    from ray.cluster_utils import Cluster

    started = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _session_env().items():
            mp.setenv(key, value)
        _reload_ray_auth_config()
        if ray.is_initialized():
            ray.shutdown()
        # A temp dir of its own, made Ray's default for this session: Ray's job
        # supervisor gives each job driver the address found in
        # <temp_dir>/ray_current_cluster (in a shared /tmp/ray any other Ray started
        # on this machine overwrites it), and Cluster() writes that file into the
        # default dir, $RAY_TMPDIR/ray, which must exist (on a fresh machine
        # /tmp/ray does not).
        root = tempfile.mkdtemp(prefix="cr")  # short: Ray's socket paths must stay under 108 bytes
        temp_dir = os.path.join(root, "ray")
        os.mkdir(temp_dir)
        mp.setenv("RAY_TMPDIR", root)
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                **HEAD,
                "temp_dir": temp_dir,
                # Free ports for the dashboard and the head's job agent (None: Ray
                # picks one), so a Ray already running here on the default
                # 8265/52365 does not leave the Jobs API without an agent.
                "include_dashboard": True,
                "dashboard_port": 0,
                "dashboard_agent_listen_port": None,
            },
        )
        try:
            for model in WORKER_ACCELERATORS:
                cluster.add_node(
                    **WORKER,
                    labels={"ray.io/accelerator-type": model},
                    resources={f"accelerator_type:{model}": 1},
                    wait=False,
                )
            cluster.wait_for_nodes(timeout=START_TIMEOUT_S)
            ray.init(address=cluster.address)
            dashboard_url = f"http://{cluster.webui_url}"
            _wait_for_jobs_api(dashboard_url, started + START_TIMEOUT_S)
            head_node_id, workers, labels = _describe()
            assert len(workers) == len(WORKER_ACCELERATORS), f"worker nodes missing: {labels}"
            yield RayCluster(
                address=cluster.address,
                dashboard_url=dashboard_url,
                head_node_id=head_node_id,
                worker_node_ids=workers,
                node_labels=labels,
                temp_dir=temp_dir,
                started_in_s=round(time.monotonic() - started, 1),
                cluster=cluster,
            )
        finally:
            ray.shutdown()
            cluster.shutdown()
            if os.environ.get("CUBERAY_KEEP_RAY_TMP") != "1":
                shutil.rmtree(root, ignore_errors=True)
        _reload_ray_auth_config()


@pytest.fixture(scope="session")
def job_client(ray_cluster: RayCluster):
    """A Ray Jobs client for the session's cluster (token auth already set up)."""
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(ray_cluster.dashboard_url)


# ---------------------------------------------------------------- the platform's database

@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session (tests/postgres.py); each test takes a fresh database on it.

    Skipped where PostgreSQL is not installed, except on CI (``CI=true``), where ``.ci/run`` installs it and a
    missing server is a failure, not a silent skip."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is not installed: {INSTALL_HINT}")
        pytest.skip(INSTALL_HINT)
    server = PostgresServer.start(bin_dir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The platform file's ``database``: SQLite under the test's storage unless a test asks for
    ``@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)``."""
    backend = getattr(request, "param", "sqlite")
    if backend == "postgresql":
        return request.getfixturevalue("postgres").fresh_url("platform")
    assert backend == "sqlite", backend
    return f"sqlite:///{tmp_path / 'cuberay' / 'cuberay.db'}"


# ---------------------------------------------------------------- the cuberay platform (controller)

PLATFORM_USER = "tester"


def platform_test_spec(storage: Path, database: str | None = None, small_jobs: bool = False) -> dict:
    """Tenants a and b (guaranteed 4 GPUs, max 8 each) and c (guaranteed 4 GPUs) with CPU quotas.

    The three guarantees add up to the cluster's 12 GPUs, so any tenant above
    its guarantee borrows from another's idle share. Small jobs are off unless asked for (see ``platform``).
    """
    def tenant(name: str, max_gpu: str | None) -> dict:
        quota = {"guaranteed": {"cpu": "4", "gpu": "4"}}
        if max_gpu is not None:
            quota["max"] = {"cpu": "16", "gpu": max_gpu}
        return {"name": name, "members": [PLATFORM_USER], "admins": ["admin"], "quota": quota}

    return {
        "apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "test"},
        "spec": {
            "storage": str(storage),
            "database": database or f"sqlite:///{storage / 'cuberay.db'}",
            "scheduler": {"cycle_interval_s": 0.5, "max_drivers": 8, "small_jobs": small_jobs},
            "tenants": [tenant("a", "8"), tenant("b", "8"), tenant("c", "4")],
        },
    }


@dataclass(frozen=True)
class PlatformUnderTest:
    """A running controller on the session cluster, with its own database."""

    controller: object  # the actor handle
    spec: dict
    storage: Path
    user: str = PLATFORM_USER


@pytest.fixture
def platform(request: pytest.FixtureRequest, ray_cluster: RayCluster, tmp_path: Path, job_client,
             database: str) -> Iterator[PlatformUnderTest]:
    """A fresh cuberay controller (a fresh database: SQLite in tmp, or see ``database``) on the shared cluster;
    removed afterwards.

    Every job runs as a Ray Job (a driver process and Ray's job supervisor), which most of the tier's tests
    read from Ray (its status, its log, its driver). A test marked ``small_jobs`` gets the platform's default
    instead: one-worker command Tasks run as named Ray tasks in a pooled worker, for the tests that never look at
    the Ray Job. Each such job then costs about 3 CPU s less (a Ray Job's supervisor, driver and gang worker;
    the pipeline module with every step a small job took 21.6 CPU s against 58.8 s, measured 2026-12-07
    on 2 cores).

    Afterwards every job still waiting or running is cancelled and its Ray Job
    awaited, so the next test finds the cluster empty.
    """
    from cuberay.platform import client

    small_jobs = request.node.get_closest_marker("small_jobs") is not None
    spec = platform_test_spec(tmp_path / "cuberay", database, small_jobs=small_jobs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUBERAY_USER", PLATFORM_USER)
        handle = client.install(spec, address=ray_cluster.address, replace=True)
        try:
            yield PlatformUnderTest(handle, spec, tmp_path / "cuberay")
        finally:
            _empty_platform(client, job_client)


def _empty_platform(client, job_client) -> None:
    from cuberay.platform.policy.states import JobState

    active = [JobState.QUEUED, JobState.PREEMPTED, JobState.ADMITTED, JobState.RUNNING]
    sids = set()
    try:
        for record in client.list_jobs(states=active):
            client.cancel(record.id)
        sids = {r.submission_id for r in client.list_jobs() if r.submission_id}
    finally:
        client.uninstall()
    deadline = time.monotonic() + 60
    for sid in sids:
        while time.monotonic() < deadline:
            try:
                if job_client.get_job_status(sid).is_terminal():
                    break
            except RuntimeError:  # unknown to Ray (never started)
                break
            time.sleep(0.2)
