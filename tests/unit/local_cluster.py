"""A cluster without Ray for an in-process controller (cuberay/platform/transport/in_process.py).

Fixed nodes, an in-memory key-value store, and a launcher whose "drivers" are entries the test ends
(``finish``): enough for the controller's real admission, store, rules and records, so the unit tier runs the
client and the CLI against a real controller. What needs Ray itself (Ray Jobs, Serve, the autoscaler) is in the
integration tier.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pytest

from cuberay.errors import CuberayError, NotFoundError
from cuberay.platform import client
from cuberay.platform.control.launcher import TERMINAL
from cuberay.platform.transport.in_process import InProcess

GiB = 2**30
HEAD = "head0000aaaa"


class LocalLauncher:
    """The launcher's interface (control/launcher.py) over a dict: a started driver runs until ``finish``."""

    def __init__(self, max_drivers: int) -> None:
        self.dashboard_url = "http://127.0.0.1:1"
        self.max_drivers = max_drivers
        self.jobs: dict[str, dict[str, Any]] = {}  # submission id -> {status, log, env, metadata}
        self._reported: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def in_flight(self) -> int:
        return sum(1 for s in self._reported.values() if s not in TERMINAL)

    def can_start(self) -> bool:
        return self.in_flight() < self.max_drivers

    def tracked(self) -> dict[str, str | None]:
        return dict(self._reported)

    def start(self, submission_id: str, entrypoint: str, *, metadata: Mapping[str, str],
              runtime_env: Any = None, env: Mapping[str, str] | None = None, driver_resources: Any = None) -> None:
        with self._lock:
            self.jobs[submission_id] = {"status": "RUNNING", "log": f"started {entrypoint}\n", "env": dict(env or {}),
                                        "metadata": dict(metadata)}
            self._reported.setdefault(submission_id, None)

    def adopt(self, submission_ids: Any) -> None:
        for sid in submission_ids:
            self._reported[sid] = None

    def poll(self) -> dict[str, str]:
        changed = {}
        with self._lock:
            for sid, last in list(self._reported.items()):
                status = self.jobs.get(sid, {"status": "FAILED"})["status"]
                if status != last:
                    changed[sid] = self._reported[sid] = status
                if status in TERMINAL:
                    del self._reported[sid]
        return changed

    def stop(self, submission_id: str) -> None:
        job = self.jobs.get(submission_id)
        if job is not None and job["status"] not in TERMINAL:
            job["status"] = "STOPPED"

    def status(self, submission_id: str) -> str:
        if submission_id not in self.jobs:
            raise NotFoundError(f"no Ray Job {submission_id}")
        return self.jobs[submission_id]["status"]

    def logs(self, submission_id: str) -> str:
        if submission_id not in self.jobs:
            raise NotFoundError(f"no Ray Job {submission_id}")
        return self.jobs[submission_id]["log"]

    def driver_log(self, submission_id: str) -> Path | None:
        return None  # no file: logs come through ``logs``, as for a driver on another node

    def finish(self, submission_id: str, status: str = "SUCCEEDED", log: str = "") -> None:
        with self._lock:
            self.jobs[submission_id]["status"] = status
            self.jobs[submission_id]["log"] += log


class NoServe:
    def __getattr__(self, name: str) -> Callable[..., Any]:
        def refuse(*_args: Any, **_kwargs: Any) -> Any:
            raise CuberayError("this cluster has no Ray Serve (an in-process controller's); the integration "
                               "tier runs serving apps")
        return refuse


class LocalCluster:
    """The Cluster interface of control/cluster.py for ``nodes`` (node id -> Ray resources) and no Ray."""

    def __init__(self, nodes: Mapping[str, Mapping[str, float]], labels: Mapping[str, Mapping[str, str]] = {}) -> None:
        self._nodes = {n: dict(r) for n, r in nodes.items()}
        self._labels = {n: dict(v) for n, v in labels.items()}
        self._kv: dict[bytes, bytes] = {}
        self.launched: LocalLauncher | None = None
        self.draining: set[str] = set()  # nodes being drained, as Ray lists them

    def kv_get(self, key: bytes) -> bytes | None:
        return self._kv.get(key)

    def kv_put(self, key: bytes, value: bytes) -> None:
        self._kv[key] = value

    def kv_del(self, key: bytes) -> None:
        self._kv.pop(key, None)

    def node_id(self) -> str:
        return HEAD

    def nodes(self) -> list[dict[str, Any]]:
        return [{"NodeID": n, "Alive": True, "Resources": r, "Labels": self._labels.get(n, {}),
                 "Draining": n in self.draining} for n, r in self._nodes.items()]

    def available(self) -> dict[str, dict[str, float]]:
        return {}  # nothing held outside the controller

    def dashboard_url(self) -> str:
        return "http://127.0.0.1:1"

    def launcher(self, max_drivers: int) -> LocalLauncher:
        self.launched = LocalLauncher(max_drivers)
        return self.launched

    def small_runs(self, storage_of: Any, wake: Any, start: Any = None) -> None:
        return None  # every job runs as a (local) driver

    def serve_rest(self) -> NoServe:
        return NoServe()

    def request_resources(self, bundles: Any, selectors: Any) -> None:
        pass


def two_node_cluster() -> LocalCluster:
    """A CPU head and one node with 4 GPUs."""
    return LocalCluster({HEAD: {"CPU": 4.0, "memory": 8.0 * GiB},
                         "gpu00000bbbb": {"CPU": 8.0, "GPU": 4.0, "memory": 32.0 * GiB}})


def platform_spec(storage: Path, **scheduler: Any) -> dict[str, Any]:
    """Tenants vision (alice, admin vera) and nlp (nina), each guaranteed 2 GPUs of the 4; ops installs it."""
    def tenant(name: str, members: list[str], admins: list[str]) -> dict[str, Any]:
        return {"name": name, "members": members, "admins": admins,
                "quota": {"guaranteed": {"cpu": "4", "memory": "16Gi", "gpu": "2"},
                          "max": {"cpu": "8", "memory": "32Gi", "gpu": "4"}}}

    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "local"},
            "spec": {"storage": str(storage), "scheduler": {"cycle_interval_s": 0.1, "small_jobs": False,
                                                             **scheduler},
                     "tenants": [tenant("vision", ["alice", "bob"], ["vera"]), tenant("nlp", ["nina"], ["olga"])]}}


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[InProcess]:
    """A real controller in this process over ``two_node_cluster()``; the client's calls go to it."""
    cluster = two_node_cluster()
    local = InProcess(platform_spec(tmp_path / "storage"), cluster, installer="ops")
    local.cluster = cluster  # type: ignore[attr-defined]
    try:
        with client.using(local):
            yield local
    finally:
        local.close()
