"""A node being drained (Ray's autoscaler removing it as idle, or an operator) takes no new work.

Ray's autoscaler removes an idle node by draining it first; the node stays alive in ``ray.nodes()`` until it
goes. A gang admitted onto it in that window loses the node before its workers start, and runs again as a second
attempt. The controller reads the draining nodes with the others and admits nowhere near them; the work a
draining node already holds stays where it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from cuberay.platform import client
from cuberay.platform.control.nodes import live_nodes
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.spec.resources import Resources, WorkerRequest
from cuberay.platform.transport.in_process import InProcess
from tests.support import wait_for
from tests.unit.local_cluster import HEAD, GiB, LocalCluster, platform_spec

A, B = "gpuaaaa00000", "gpubbbb00000"


def test_live_nodes_carry_the_draining_mark() -> None:
    nodes = live_nodes([{"NodeID": A, "Alive": True, "Resources": {"CPU": 1.0}, "Draining": True},
                        {"NodeID": B, "Alive": True, "Resources": {"CPU": 1.0}}])
    assert (nodes[A].draining, nodes[B].draining) == (True, False)


def test_a_closed_node_keeps_its_allocation_and_takes_no_more() -> None:
    ledger = Ledger()
    ledger.add_node(A, {"CPU": 4.0})
    one = WorkerRequest(Resources({"CPU": 1.0}))
    ledger.allocate("held", one, [A])
    version = ledger.version
    assert ledger.set_alive(A, False) and not ledger.set_alive(A, False)
    assert ledger.version > version and [n.id for n in ledger.alive_nodes()] == []
    assert ledger.allocations["held"].node_ids == [A] and ledger.nodes[A].free["CPU"] == 3.0
    assert ledger.set_alive(A, True) and [n.id for n in ledger.alive_nodes()] == [A]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    gpu = {"CPU": 8.0, "GPU": 4.0, "memory": 32.0 * GiB}
    cluster = LocalCluster({HEAD: {"CPU": 4.0, "memory": 8.0 * GiB}, A: gpu, B: gpu})
    cluster.draining.add(A)
    local = InProcess(platform_spec(tmp_path / "storage"), cluster, installer="ops")
    try:
        with client.using(local):
            yield cluster
    finally:
        local.close()


def _task(name: str, tenant: str) -> dict:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name, "tenant": tenant},
            "spec": {"workers": 1, "resources": {"cpu": "1", "gpu": "3"}, "command": "true"}}


def test_gangs_are_admitted_only_where_no_drain_is_under_way(cluster: LocalCluster) -> None:
    with client.acting_as("alice"):
        first = client.submit(_task("one", "vision")).id
        rec = wait_for(lambda: (r := client.status(first)).allocation and r, 10, "the first task to be admitted")
    assert [slot["node_id"] for slot in rec.allocation] == [B]  # A is as free as B, but being drained
    with client.acting_as("nina"):
        second = client.submit(_task("two", "nlp")).id  # 3 GPUs: B has 1 left, A is being drained
        wait_for(lambda: client.status(second).reason, 10, "the second task's reason")
        assert client.status(second).state.value == "QUEUED"
    with client.acting_as("ops"):
        events = [e.message for e in client.api().events(limit=100) if e.kind == "node_draining"]
    assert any(A in m for m in events), events
    cluster.draining.clear()  # the drain is called off: the node takes work again
    with client.acting_as("nina"):
        rec = wait_for(lambda: (r := client.status(second)).allocation and r, 10, "the second task to be admitted")
    assert [slot["node_id"] for slot in rec.allocation] == [A]
