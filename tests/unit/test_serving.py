"""The controller's serving component, the one writer of Serve's declarative config, against a real store.

Serve itself is stood in for by ``Serve`` below: a lost write or a second writer between a write and its
re-read cannot be produced on demand with the real one (tests/integration/test_serve.py runs the component
against a live Serve). The stand-in holds one declarative config, as Serve's REST API does, and counts how
many callers are inside it at once.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from cuberay.errors import AdmissionError, CuberayError, ServeDeployError
from cuberay.platform.control import serving as serving_mod
from cuberay.platform.control.serving import Serving
from cuberay.platform.control.store import JobRecord, Store, default_url
from cuberay.platform.policy.serving import traffic_of
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec


class Serve:
    """Serve's declarative config behind its REST API: read all apps, replace all apps."""

    def __init__(self, applications: list[dict[str, Any]], pause_s: float = 0.0) -> None:
        self.config = {"applications": copy.deepcopy(applications)}
        self.pause_s = pause_s  # a REST round trip: long enough for another caller to come in meanwhile
        self.after_put: Callable[[dict], None] | None = None  # another writer, just after ours
        self.puts = 0
        self.inside = self.most_inside = 0
        self._count = threading.Lock()

    def _enter(self) -> None:
        with self._count:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        time.sleep(self.pause_s)

    def _leave(self) -> None:
        with self._count:
            self.inside -= 1

    def applications(self) -> list[dict[str, Any]]:
        self._enter()
        try:
            return copy.deepcopy(self.config["applications"])
        finally:
            self._leave()

    def put(self, config: dict[str, Any]) -> None:
        self._enter()
        try:
            self.config = copy.deepcopy(config)
            self.puts += 1
        finally:
            self._leave()
        if self.after_put is not None:
            self.after_put(self.config)

    def weights(self, name: str) -> dict:
        return traffic_of(next(a for a in self.config["applications"] if a["name"] == name))["weights"]


def _app(name: str, route: str) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "ServeApp", "metadata": {"name": name, "tenant": "t"},
            "spec": {"route_prefix": route, "versions": [{"name": "v1", "model": "m.mod:One", "weight": 90},
                                                         {"name": "v2", "model": "m.mod:Two", "weight": 10}]}}


def _entry(name: str, route: str, weights: dict | None = None) -> dict[str, Any]:
    return {"name": f"t-{name}", "route_prefix": route, "import_path": "cuberay.serve.app:build",
            "args": {"plan": {"name": f"t-{name}"}},
            "deployments": [{"name": "router", "user_config": {"weights": weights or {"v1": 90, "v2": 10}}}]}


@pytest.fixture
def store(tmp_path: Path):
    with Store(default_url(tmp_path)) as s:
        for seq, (name, route) in enumerate((("web", "/web"), ("api", "/api")), start=1):
            spec = load_spec(_app(name, route)).model_dump(mode="json")
            s.add_job(JobRecord(id=f"t-{name}-1", tenant="t", name=name, kind="ServeApp", user="alice", spec=spec,
                                state=JobState.RUNNING, priority=0, submit_time=1000.0 + seq, seq=1, attempts=1))
        yield s


def _serving(store: Store, serve: Serve) -> Serving:
    return Serving(store, serve, lambda tenant: Path("/storage") / tenant)  # type: ignore[arg-type]


def test_concurrent_changes_of_two_apps_are_serialised_and_all_kept(store: Store) -> None:
    serve = Serve([_entry("web", "/web"), _entry("api", "/api")], pause_s=0.005)
    serving = _serving(store, serve)
    steps = [{"v1": 100 - p, "v2": p} for p in range(10, 101, 10)]

    async def rollout(job_id: str) -> None:
        for number, weights in enumerate(steps, start=1):
            await serving.change_traffic(job_id, "alice", "rollout", {"weights": weights}, f"step {number}")

    async def both() -> None:
        await asyncio.gather(rollout("t-web-1"), rollout("t-api-1"))

    asyncio.run(both())
    assert serve.weights("t-web") == serve.weights("t-api") == {"v1": 0, "v2": 100}
    assert serve.most_inside == 1  # one read-change-write-check at a time
    for job_id in ("t-web-1", "t-api-1"):
        assert [c.weights for c in store.serve_changes(job_id, None)] == steps
        assert len([e for e in store.events(job_id) if e.kind == "serve"]) == len(steps)


def test_a_change_another_writer_undoes_is_written_again(store: Store) -> None:
    serve = Serve([_entry("web", "/web"), _entry("api", "/api")])
    stale = copy.deepcopy(serve.config)
    undone = []

    def other_writer(_config: dict) -> None:
        if not undone:  # once: it writes back what it read before our write
            undone.append(True)
            serve.config = copy.deepcopy(stale)

    serve.after_put = other_writer
    traffic = asyncio.run(_serving(store, serve).change_traffic("t-web-1", "alice", "rollout",
                                                                {"weights": {"v1": 50, "v2": 50}}))
    assert traffic["weights"] == serve.weights("t-web") == {"v1": 50, "v2": 50}
    assert serve.puts == 2
    assert [c.weights for c in store.serve_changes("t-web-1")] == [{"v1": 50, "v2": 50}]  # recorded once


def test_a_config_something_else_keeps_writing_fails_after_bounded_writes(store: Store) -> None:
    serve = Serve([_entry("web", "/web")])
    stale = copy.deepcopy(serve.config)
    serve.after_put = lambda _config: setattr(serve, "config", copy.deepcopy(stale))
    with pytest.raises(ServeDeployError, match=r"after 3 writes .*something besides cuberay writes"):
        asyncio.run(_serving(store, serve).change_traffic("t-web-1", "alice", "rollout",
                                                          {"weights": {"v1": 50, "v2": 50}}))
    assert serve.puts == serving_mod.WRITES
    assert store.serve_changes("t-web-1") == []  # a change that did not hold is not recorded


def test_a_driver_deploys_only_its_own_app_at_its_route_in_its_running_attempt(store: Store) -> None:
    serve = Serve([{"name": "other", "route_prefix": "/taken", "import_path": "x:y"}])
    serving = _serving(store, serve)
    with pytest.raises(AdmissionError, match="refused to deploy Serve app 't-api' at route '/web' for job t-web-1"):
        asyncio.run(serving.deploy("t-web-1", 1, _entry("api", "/web"), "attempt 1"))
    assert [e.kind for e in store.events("t-web-1")] == ["denied"]
    with pytest.raises(CuberayError, match="attempt 2 of t-web-1 is not its running one"):
        asyncio.run(serving.deploy("t-web-1", 2, _entry("web", "/web"), "attempt 2"))
    weights = asyncio.run(serving.deploy("t-web-1", 1, _entry("web", "/web"), "attempt 1 on 1 node(s)"))
    assert weights == serve.weights("t-web") == {"v1": 90, "v2": 10}
    [deployed] = store.serve_changes("t-web-1")
    assert (deployed.user, deployed.action, deployed.note) == ("alice", "deploy", "attempt 1 on 1 node(s)")
    assert {a["name"] for a in serve.config["applications"]} == {"other", "t-web"}  # the other app kept


def test_a_resize_keeps_the_weights_a_rollout_moved_and_a_stale_driver_removes_nothing(store: Store) -> None:
    serve = Serve([])
    serving = _serving(store, serve)
    asyncio.run(serving.deploy("t-web-1", 1, _entry("web", "/web"), "attempt 1"))
    asyncio.run(serving.change_traffic("t-web-1", "bob", "rollout", {"weights": {"v1": 0, "v2": 100}}))
    asyncio.run(serving.deploy("t-web-1", 1, _entry("web", "/web"), "resized"))  # the spec's 90/10 in the entry
    assert serve.weights("t-web") == {"v1": 0, "v2": 100}
    assert [c.action for c in store.serve_changes("t-web-1")] == ["deploy", "rollout"]
    assert asyncio.run(serving.undeploy("t-web-1", 0)) is False  # an older attempt's driver on its way out
    assert [a["name"] for a in serve.config["applications"]] == ["t-web"]
    assert asyncio.run(serving.undeploy("t-web-1", 1)) is True
    assert serve.config["applications"] == []


def test_a_route_another_serve_app_serves_is_refused_at_deploy(store: Store) -> None:
    serve = Serve([{"name": "outside", "route_prefix": "/web", "import_path": "x:y"}])
    with pytest.raises(AdmissionError, match="route_prefix '/web' is already served by Serve app 'outside'"):
        asyncio.run(_serving(store, serve).deploy("t-web-1", 1, _entry("web", "/web"), "attempt 1"))
    assert serve.puts == 0


def test_live_figures_per_version_from_the_router_or_why_there_are_none(store: Store) -> None:
    serve = Serve([_entry("web", "/web")])
    router = {"weights": {"v1": 90, "v2": 10}, "versions": {
        "v1": {"requests": 120, "errors": 3, "mirrored": 0, "count": 30, "error_rate": 0.1, "p50_ms": 4.0,
               "p99_ms": 40.0},
        "v2": {"requests": 5, "errors": 0, "mirrored": 12, "count": 0, "error_rate": 0.0, "p50_ms": None,
               "p99_ms": None}}}
    asked = []
    serve.stats = lambda name, window_s: asked.append((name, window_s)) or router  # type: ignore[attr-defined]
    serving = _serving(store, serve)
    stats = asyncio.run(serving.stats("t-web-1", 60.0))
    assert asked == [("t-web", 60.0)] and stats.note is None and stats.weights == {"v1": 90, "v2": 10}
    v1, v2 = stats.versions["v1"], stats.versions["v2"]
    assert (v1.rate_per_s, v1.error_rate, v1.p99_ms, v1.requests) == (0.5, 0.1, 40.0, 120)
    assert (v2.count, v2.p50_ms, v2.mirrored) == (0, None, 12)
    # A router that does not answer: the figures are missing, and the page says why.
    serve.stats = lambda name, window_s: (_ for _ in ()).throw(  # type: ignore[attr-defined]
        ServeDeployError("cannot read app 't-web''s traffic from its router (TimeoutError: slow)"))
    assert "TimeoutError" in asyncio.run(serving.stats("t-web-1", 60.0)).note
    with pytest.raises(CuberayError, match=r"window_s 0.5 is outside 1..600 s"):
        asyncio.run(serving.stats("t-web-1", 0.5))
    store.update_job("t-api-1", state=JobState.SUCCEEDED)
    ended = asyncio.run(serving.stats("t-api-1", 60.0))
    assert ended.versions == {} and "SUCCEEDED, not RUNNING" in ended.note
