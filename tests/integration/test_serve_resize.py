"""A ServeApp's replicas above min are lent: granted while capacity is idle, shrunk on reclaim, in place on Serve."""

from __future__ import annotations

import sys
import uuid
from typing import Any

import pytest

from cuberay.platform import client
from cuberay.platform.control.head import free_port
from cuberay.platform.policy.states import JobState
from cuberay.serve import deploy, ops
from cuberay.serve.config import AppPlan
from tests.support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ON_V100 = {"ray.io/accelerator-type": "V100"}  # one 4-CPU worker node of the session cluster


@pytest.fixture
def serving_platform(ray_cluster, job_client, tmp_path) -> Any:
    """Tenants a (guaranteed 4 CPUs) and b (guaranteed 1 CPU, max 16): b borrows above 1 CPU."""
    from ray import serve

    from tests.integration.conftest import _empty_platform, platform_test_spec

    spec = platform_test_spec(tmp_path / "cuberay")
    spec["spec"]["tenants"][1]["quota"]["guaranteed"]["cpu"] = "1"
    mp = pytest.MonkeyPatch()
    mp.setenv("CUBERAY_USER", "tester")
    client.install(spec, address=ray_cluster.address, replace=True)
    serve.start(proxy_location="HeadOnly", http_options={"port": free_port()})
    try:
        yield spec
    finally:
        _empty_platform(client, job_client)
        serve.shutdown()
        mp.undo()


def _replicas(serve_name: str) -> dict:
    plan = AppPlan.from_args(deploy.deployed_config(serve_name)["args"]["plan"])
    return plan.versions[0].replicas


def test_replicas_above_min_are_shrunk_on_reclaim(serving_platform) -> None:
    name = f"echo-{uuid.uuid4().hex[:6]}"
    app = {"apiVersion": "cuberay.io/v1alpha1", "kind": "ServeApp", "metadata": {"name": name, "tenant": "b"},
           "spec": {"resources": {"cpu": "1"}, "node_selector": ON_V100, "route_prefix": f"/{name}",
                    "versions": [{"name": "v1", "model": "cuberay.examples.echo_serve:Echo", "weight": 100,
                                  "replicas": {"min": 1, "max": 3}}]}}
    record = ops.deploy_app(app, wait_s=500)
    assert record.state == JobState.RUNNING, record.reason
    serve_name = f"b-{name}"
    assert len(record.allocation or []) == 3  # idle capacity: granted its max, 2 slots borrowed above b's 1 CPU
    assert _replicas(serve_name)["autoscaling_config"]["max_replicas"] == 3
    # Tenant a, under its guarantee, needs 3 of the node's 4 CPUs: the app's lent slots go back, nobody is preempted.
    task = client.submit({"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
                          "metadata": {"name": f"reclaim-{uuid.uuid4().hex[:6]}", "tenant": "a"},
                          "spec": {"workers": 3, "resources": {"cpu": "1"}, "node_selector": ON_V100,
                                   "command": f"{sys.executable} -c 'import time; time.sleep(600)'"}})
    wait_for(lambda: client.status(task.id).state.holds_resources, 120, "the reclaiming task to be admitted")
    assert len(client.status(record.id).allocation or []) == 1  # down to its min
    assert client.status(record.id).state == JobState.RUNNING  # shrunk, not preempted
    wait_for(lambda: _replicas(serve_name) == {"num_replicas": 1}, 120, "Serve to take the new replica limit")
    assert deploy.wait_running(serve_name, timeout_s=300)["status"] == "RUNNING"  # still serving
    kinds = [e.kind for e in client.api().events(record.id, 100)]
    assert "resized" in kinds and "resize_applied" in kinds and "preempted" not in kinds, kinds
    client.cancel(task.id)
