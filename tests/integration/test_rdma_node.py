"""RDMA on a live cluster: a node registered as `cuberay node start` does is the only home of a `1(roce)` job."""

from __future__ import annotations

import copy
import re
import sys
import uuid
from typing import Any

import pytest
import ray

from cuberay.cli.node_cmd import discover_rdma, registration, resolve
from cuberay.errors import AdmissionError
from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.support import wait_for

NODE_LINE = re.compile(r"node=([0-9a-f]{20,})")


def rdma_task(workers: int = 1) -> dict[str, Any]:
    command = (f"{sys.executable} -c \"import os; print('node=' + os.environ['CUBERAY_NODE_ID'] + ' ib_disable=' "
               f"+ os.environ['NCCL_IB_DISABLE'], flush=True)\"")
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
            "metadata": {"name": f"rdma-{uuid.uuid4().hex[:6]}", "tenant": "a"},
            "spec": {"workers": workers, "resources": {"cpu": "1", "rdma": "1(roce)"}, "command": command}}


def roce_nodes() -> list[str]:
    return [n["NodeID"] for n in ray.nodes()
            if n["Alive"] and (n.get("Labels") or {}).get("cuberay.io/rdma") == "roce"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_roce_job_is_rejected_without_rdma_nodes_and_lands_on_the_roce_node(platform, ray_cluster,
                                                                            job_client) -> None:
    assert not roce_nodes()
    # Tenant a may use RDMA (the session platform's tenants have no rdma quota): the rejection below is then
    # about the cluster, not the quota.
    spec = copy.deepcopy(platform.spec)
    spec["spec"]["tenants"][0]["quota"]["max"]["rdma"] = "4"
    client.install(spec, address=ray_cluster.address, replace=True)
    with pytest.raises(AdmissionError) as rejected:
        client.submit(rdma_task())
    assert "rdma" in str(rejected.value) and "quota" not in str(rejected.value), rejected.value
    # A node registered as `cuberay node start --rdma roce --rdma-domain test-fabric` registers it (the sysfs here
    # has no RDMA devices, so the fabric is given).
    resources, labels = registration(resolve(discover_rdma("/nonexistent"), fabric="roce", count=1,
                                             domain="test-fabric"))
    assert resources == {"rdma": 1.0} and labels == {"cuberay.io/rdma": "roce", "cuberay.io/rdma-domain": "test-fabric"}
    node = ray_cluster.cluster.add_node(num_cpus=2, memory=4 * 2**30, resources=resources, labels=labels, wait=False)
    try:
        (node_id,) = wait_for(roce_nodes, 120, "the roce node to join")
        ref = wait_for(lambda: _submit_when_seen(), 60, "the controller to see the roce node")
        record = client.wait(ref.id, timeout=120)
        logs = job_client.get_job_logs(record.submission_id)
        assert record.state == JobState.SUCCEEDED, (record.message, logs[-1500:])
        assert NODE_LINE.findall(logs) == [node_id], logs[-1500:]
        # Registered by hand on a machine without RDMA devices: the worker's own discovery finds none,
        # so NCCL stays on sockets rather than failing on a missing HCA.
        assert "ib_disable=1" in logs
    finally:
        ray_cluster.cluster.remove_node(node)
        wait_for(lambda: not roce_nodes(), 90, "the roce node to leave")


def _submit_when_seen():
    try:
        return client.submit(rdma_task())
    except AdmissionError:
        return None  # the controller has not followed Ray's nodes yet
