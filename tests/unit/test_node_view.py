"""A tick after an idle wait reads Ray's nodes before it decides: a node Ray's autoscaler removed while the
controller waited gets no gang (on a stale view the gang was admitted there, lost the node at once and ran again as
a second attempt: seen on a local tenant cluster whose idle nodes went just before a burst of submits)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cuberay.platform import client
from cuberay.platform.policy.autoscale import ENV_WORKER_GROUPS, NEW_NODES
from cuberay.platform.policy.states import JobState
from cuberay.platform.transport.in_process import InProcess
from tests.support import wait_for
from tests.unit.local_cluster import (
    HEAD,
    GiB,
    LocalCluster,
    controller,  # noqa: F401 (a fixture)
    platform_spec,
    two_node_cluster,
)

GPU_NODE = "gpu00000bbbb"


def test_a_node_removed_during_an_idle_wait_gets_no_gang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Any age counts as old here, so the test need not wait out the real threshold.
    monkeypatch.setattr("cuberay.platform.control.controller.NODES_FRESH_S", 0.0)
    cluster = two_node_cluster()
    local = InProcess(platform_spec(tmp_path / "storage", cycle_interval_s=30), cluster, installer="ops")
    try:
        controller = local.controller
        wait_for(lambda: controller._ticks >= 1, 30, "the first tick")  # then the loop waits (30 s)
        del cluster._nodes[GPU_NODE]  # the autoscaler removed the idle GPU node meanwhile
        spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "g", "tenant": "vision"},
                "spec": {"workers": 1, "resources": {"cpu": "1", "gpu": "1"}, "command": "echo hi"}}
        with client.using(local), client.acting_as("alice"):
            ref = client.submit(spec)  # wakes a tick
            wait_for(lambda: controller._ticks >= 2, 30, "the tick the submit woke")
            record = client.status(ref.id)
            kinds = [e.kind for e in client.api().events(ref.id, 100)]
        assert record.state == JobState.QUEUED and record.attempts == 0, (record, kinds)
        assert "admitted" not in kinds and "preempted" not in kinds, kinds
        assert not cluster.launched.jobs, cluster.launched.jobs
    finally:
        local.close()


GROUPS = json.dumps([{"group": "gpu", "pool": "gpu", "max_replicas": 2, "resources": {"CPU": 8.0, "GPU": 4.0},
                      "labels": {"cuberay.io/pool": "gpu"}}])


def test_a_gang_waiting_for_a_new_node_is_admitted_soon_after_it_joins(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A node joining wakes nothing; with a 30 s cycle interval the gang would wait up to 30 s for its next tick.
    While a gang waits for new nodes the head looks for them every NODE_POLL_S."""
    monkeypatch.setenv(ENV_WORKER_GROUPS, GROUPS)
    cluster = LocalCluster({HEAD: {"CPU": 4.0, "memory": 8.0 * GiB}})
    local = InProcess(platform_spec(tmp_path / "storage", cycle_interval_s=30), cluster, installer="ops")
    try:
        spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "g", "tenant": "vision"},
                "spec": {"workers": 1, "resources": {"cpu": "1", "gpu": "2"}, "command": "echo hi"}}
        with client.using(local), client.acting_as("alice"):
            ref = client.submit(spec)
            wait_for(lambda: (client.status(ref.id).reason or "").startswith(NEW_NODES), 10, "the request for nodes")
            cluster._labels["gpu00000cccc"] = {"cuberay.io/pool": "gpu"}  # labels first: the poll reads _nodes
            cluster._nodes["gpu00000cccc"] = {"CPU": 8.0, "GPU": 4.0, "memory": 32.0 * GiB}  # the autoscaler's
            joined = time.monotonic()
            wait_for(lambda: client.status(ref.id).attempts == 1, 10, "the gang to be admitted on the new node",
                     poll_s=0.05)
        assert time.monotonic() - joined < 2  # a poll (0.25 s) and a tick, not the 30 s interval
    finally:
        local.close()


def test_an_attempt_that_lost_its_node_spends_none_of_max_failures(controller: InProcess) -> None:  # noqa: F811
    """max_failures 1: attempt 1 loses its node (requeued as after a preemption, not a failure), attempt 2 fails
    and is retried with the one failure allowed, attempt 3 fails: FAILED after 3 attempts."""
    cluster = controller.cluster
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "t", "tenant": "vision"},
            "spec": {"workers": 1, "resources": {"cpu": "1", "gpu": "1"}, "max_failures": 1, "command": "echo hi"}}
    with client.acting_as("alice"):
        ref = client.submit(spec)

        def attempt(n: int) -> str:
            sid = f"cuberay-{ref.id}" if n == 1 else f"cuberay-{ref.id}-{n}"
            wait_for(lambda: sid in cluster.launched.jobs and client.status(ref.id).attempts == n, 30,
                     f"attempt {n} to start")
            return sid

        attempt(1)
        node = cluster._nodes.pop(GPU_NODE)  # the node goes, with attempt 1 on it
        wait_for(lambda: "preempted" in [e.kind for e in client.api().events(ref.id, 100)], 30, "the node's loss")
        cluster._nodes[GPU_NODE] = node  # a node comes back (a new one, as far as the ledger knows)
        cluster.launched.finish(attempt(2), "FAILED", "boom\n")
        cluster.launched.finish(attempt(3), "FAILED", "boom again\n")
        final = client.wait(ref, timeout=30, poll_s=0.05)
    assert final.state == JobState.FAILED and final.attempts == 3, final
