"""Topology on a live cluster: a `required: rack` gang is refused while no rack could hold it, then runs in one rack.

Nodes join as `cuberay node start -- --labels=cuberay.io/rack=...` registers them (Ray node labels); the platform
declares the level `rack`. The session's own nodes carry no rack label, so they belong to no rack and the gang
can only land on the labelled ones.
"""

from __future__ import annotations

import copy
import re
import sys
import uuid
from typing import Any

import pytest
import ray

from cuberay.errors import AdmissionError
from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.support import wait_for

RACK = "cuberay.io/rack"
NODE_LINE = re.compile(r"node=([0-9a-f]{20,})")


def rack_gang() -> dict[str, Any]:
    command = f"{sys.executable} -c \"import os; print('node=' + os.environ['CUBERAY_NODE_ID'], flush=True)\""
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
            "metadata": {"name": f"rack-{uuid.uuid4().hex[:6]}", "tenant": "a"},
            "spec": {"workers": 2, "resources": {"cpu": "1"}, "topology": {"required": "rack"},
                     "command": command}}


def racked() -> dict[str, str]:
    """node id -> rack, for the live nodes that carry a rack label."""
    return {n["NodeID"]: n["Labels"][RACK] for n in ray.nodes() if n["Alive"] and RACK in (n.get("Labels") or {})}


def _refusal() -> str | None:
    """The submit's refusal once the controller sees both racks (before that it names no rack at all)."""
    try:
        ref = client.submit(rack_gang())
    except AdmissionError as err:
        return str(err) if "at most 1" in str(err) else None
    client.cancel(ref.id)
    raise AssertionError(f"a 2-worker gang was accepted with one 1-CPU node per rack: {ref.id}")


def _accepted():
    try:
        return client.submit(rack_gang())
    except AdmissionError:
        return None  # the controller has not followed the new node yet


@pytest.mark.timeout(300)
def test_a_required_rack_gang_is_refused_until_one_rack_holds_it_then_runs_inside_it(platform, ray_cluster,
                                                                                    job_client) -> None:
    spec = copy.deepcopy(platform.spec)
    spec["spec"]["topology"] = {"levels": [{"name": "rack"}]}
    client.install(spec, address=ray_cluster.address, replace=True)
    added = []
    try:
        for rack in ("r9", "r8"):
            added.append(ray_cluster.cluster.add_node(num_cpus=1, memory=2**30, labels={RACK: rack}, wait=False))
        wait_for(lambda: len(racked()) == 2 or None, 120, "two racked nodes to join")
        # No rack could ever hold 2 one-CPU workers: refused at submit (exit 3), naming the level and the largest.
        message = wait_for(_refusal, 60, "the controller to see both racks")
        assert "inside one rack" in message and "the largest rack" in message, message

        added.append(ray_cluster.cluster.add_node(num_cpus=1, memory=2**30, labels={RACK: "r9"}, wait=False))
        wait_for(lambda: len(racked()) == 3 or None, 120, "a second r9 node to join")
        ref = wait_for(_accepted, 60, "the controller to see rack r9 with two nodes")
        record = client.wait(ref.id, timeout=180)
        logs = job_client.get_job_logs(record.submission_id)
        assert record.state == JobState.SUCCEEDED, (record.message, logs[-1500:])
        racks = racked()
        ran_on = NODE_LINE.findall(logs)  # each worker prints the node it ran on
        assert len(set(ran_on)) == 2 and {racks.get(n) for n in ran_on} == {"r9"}, (ran_on, racks, logs[-1500:])
    finally:
        for node in added:
            ray_cluster.cluster.remove_node(node)
        wait_for(lambda: not racked() or None, 90, "the racked nodes to leave")
