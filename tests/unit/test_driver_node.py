"""A platform whose scheduler.driver_resource no live node offers keeps its admitted jobs waiting, saying why and
what to do, instead of handing Ray a Ray Job that would wait unseen; a node that offers it starts them."""

from __future__ import annotations

from pathlib import Path

from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from cuberay.platform.transport.in_process import InProcess
from tests.support import wait_for
from tests.unit.local_cluster import platform_spec, two_node_cluster

TASK = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "t", "tenant": "vision"},
        "spec": {"workers": 1, "resources": {"cpu": "1"}, "command": "echo hi"}}


def test_no_node_offering_the_driver_resource_is_the_reason_an_admitted_job_waits(tmp_path: Path) -> None:
    cluster = two_node_cluster()
    local = InProcess(platform_spec(tmp_path / "storage", driver_resource="cuberay_driver"), cluster,
                      installer="ops")
    try:
        with client.using(local), client.acting_as("alice"):
            ref = client.submit(TASK)
            why = wait_for(lambda: "cuberay_driver" in (r := client.status(ref.id).reason or "") and r, 30,
                           "the job to wait for a node that offers the driver resource")
            assert why.startswith("admitted; waiting for a node that offers the Ray resource 'cuberay_driver'"), why
            assert "scheduler.driver_resource" in why and "--resources=" in why, why
            assert client.status(ref.id).state == JobState.ADMITTED
            assert not cluster.launched.jobs  # no Ray Job was handed to Ray

            cluster._nodes["drv00000cccc"] = {"CPU": 2.0, "cuberay_driver": 4.0}  # such a node joins
            wait_for(lambda: client.status(ref.id).state == JobState.RUNNING, 30, "the job's driver to start")
            assert list(cluster.launched.jobs) == [f"cuberay-{ref.id}"]
    finally:
        local.close()
