"""In-cluster capacity on KubeRay (policy/autoscale.py): worker groups count up to maxReplicas."""

from __future__ import annotations

import json

from cuberay.platform.policy.autoscale import (
    as_requested,
    headroom,
    packed_nodes,
    parse_groups,
    scale_up_request,
    with_headroom,
)
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.spec.resources import CPU, GPU, parse_worker
from tests.unit.helpers import add, admitted, cycle, quota, state, submit

GROUPS = json.dumps([
    {"group": "gpu", "pool": "gpu", "max_replicas": 3, "resources": {CPU: 8, GPU: 4},
     "labels": {"cuberay.io/pool": "gpu"}},
    {"group": "cpu", "pool": "cpu", "max_replicas": 2, "resources": {CPU: 16}, "labels": {"cuberay.io/pool": "cpu"}},
])


def _gpu_job(job_id: str, workers: int, tenant: str = "a") -> JobRequest:
    return JobRequest(job_id, tenant, parse_worker(cpu="1", gpu="4"), workers, "pack")


def _one_gpu_node() -> Ledger:
    ledger = Ledger()
    add(ledger, "gpu-0", gpus=4, cpus=8, labels={"cuberay.io/pool": "gpu"})
    return ledger


def test_headroom_is_max_replicas_minus_existing_nodes() -> None:
    groups = parse_groups(GROUPS)
    room = headroom(groups, _one_gpu_node().nodes)
    assert sorted(room) == ["autoscale:cpu:0", "autoscale:cpu:1", "autoscale:gpu:0", "autoscale:gpu:1"]
    assert parse_groups(None) == []


def test_a_gang_larger_than_the_live_nodes_is_accepted_and_asks_for_nodes() -> None:
    st = state(_one_gpu_node())
    groups = parse_groups(GROUPS)
    job = _gpu_job("big", workers=3)
    assert st.submit(job) is not None  # without headroom: larger than the cluster, rejected
    with with_headroom(st, groups):
        assert st.submit(job) is None  # with it: the group may grow to 3 nodes
    assert set(st.ledger.nodes) == {"gpu-0"}  # headroom is gone again
    scale = scale_up_request(st, groups, now=0.0)
    request = scale.bundles
    assert len(request) == 3
    assert scale.workers == {"big": {"gpu": 2}} and scale.new_nodes == {"gpu": 2}  # gpu-0 exists; 2 more
    assert "2 new nodes of worker group gpu (room for 2 of this gang's workers)" in scale.reason("big", "gang of 3")
    assert scale.reason("other", "x") == "x"
    once = scale.reason("big", "gang of 3")
    assert scale.reason("big", once) == once  # a reason kept from the last cycle is not explained twice
    assert scale.reason("other", once) == "gang of 3"  # nor kept once nothing is asked for the gang
    # the worker the what-if put on gpu-0 is asked for there, the two others on new nodes of the gpu pool
    assert sorted(map(str, (sel for _, sel in request))) == sorted(map(str, [
        {"ray.io/node-id": "gpu-0"}, {"cuberay.io/pool": "gpu"}, {"cuberay.io/pool": "gpu"}]))
    assert all(bundle[GPU] == 4 for bundle, _ in request)
    assert set(st.ledger.nodes) == {"gpu-0"}
    assert "big" not in admitted(cycle(st))  # admission places on real nodes only


def test_running_work_is_part_of_the_request() -> None:
    st = state(_one_gpu_node())
    groups = parse_groups(GROUPS)
    submit(st, _gpu_job("first", workers=1))
    cycle(st)
    assert "first" in st.running
    submit(st, _gpu_job("second", workers=1))
    request = scale_up_request(st, groups, now=1.0).bundles
    # first's bundle on its node (the autoscaler keeps that node), then second's on a new gpu node
    assert [sel for _, sel in request] == [{"ray.io/node-id": "gpu-0"}, {"cuberay.io/pool": "gpu"}]


def test_admitted_work_keeps_its_nodes_when_nothing_waits() -> None:
    st = state(_one_gpu_node())
    groups = parse_groups(GROUPS)
    submit(st, _gpu_job("running", workers=1))
    cycle(st)
    scale = scale_up_request(st, groups, now=1.0)
    assert [sel for _, sel in scale.bundles] == [{"ray.io/node-id": "gpu-0"}] and scale.workers == {}
    mine = st.running.pop("running")  # the same allocation as other Ray work's usage: not cuberay's to keep
    assert scale_up_request(st, groups, now=1.5).bundles == []
    st.running["running"] = mine
    st.finish("running")
    assert scale_up_request(st, groups, now=2.0).bundles == []  # ended: the node may go when idle


def test_new_nodes_are_counted_as_the_autoscaler_packs_them() -> None:
    two_cpu = {CPU: 2.0, "memory": 2.0}
    assert packed_nodes([{CPU: 1.0, "memory": 0.5}] * 2, two_cpu) == 1  # a spread gang may share one node
    assert packed_nodes([{CPU: 1.5}, {CPU: 1.0}, {CPU: 0.5}], two_cpu) == 2
    assert packed_nodes([{CPU: 2.0}] * 3, two_cpu) == 3
    gpu_node = {CPU: 2.0, GPU: 2.0}  # a group's model is its label, a worker's is a marker resource
    assert packed_nodes([{CPU: 1.0, GPU: 1.0, "accelerator_type:A100": 0.001}] * 2, gpu_node) == 1


def test_no_request_when_quota_is_what_blocks() -> None:
    st = state(_one_gpu_node(), quota("a", 0, 4))
    groups = parse_groups(GROUPS)
    submit(st, _gpu_job("first", workers=1))
    cycle(st)
    submit(st, _gpu_job("second", workers=1))  # tenant a is at its max of 4 GPUs
    scale = scale_up_request(st, groups, now=1.0)
    assert scale.workers == {} and [sel for _, sel in scale.bundles] == [{"ray.io/node-id": "gpu-0"}]


def test_no_request_when_live_nodes_suffice_or_nothing_waits() -> None:
    st = state(_one_gpu_node())
    groups = parse_groups(GROUPS)
    assert scale_up_request(st, groups, now=0.0).bundles == []
    submit(st, _gpu_job("fits", workers=1))
    assert scale_up_request(st, groups, now=0.0).bundles == []


def test_request_is_what_rays_request_resources_accepts() -> None:
    from ray._private.label_utils import validate_label_selector

    st = state(_one_gpu_node())
    groups = parse_groups(GROUPS)
    with with_headroom(st, groups):
        submit(st, _gpu_job("two", workers=2))
    request = scale_up_request(st, groups, now=0.0).bundles
    assert request
    for bundle, selector in request:
        assert all(isinstance(k, str) and isinstance(v, float) and not isinstance(v, bool)
                   for k, v in bundle.items())
        assert validate_label_selector(selector) is None


class _Cluster:
    """Ray's request_resources as the controller calls it: records each request, or fails like an unreachable GCS."""

    def __init__(self) -> None:
        self.requests: list[list[dict]] = []
        self.down = False

    def request_resources(self, bundles: list[dict], selectors: list[dict]) -> None:
        if self.down:
            raise ConnectionError("GCS unreachable")
        self.requests.append(selectors)


def test_reasons_say_asked_only_for_a_request_ray_took_and_never_stay_stale() -> None:
    import asyncio

    from cuberay.platform.control.scaling import ScaleRequests

    st = state(_one_gpu_node())
    cluster, groups = _Cluster(), parse_groups(GROUPS)
    scaling = ScaleRequests(cluster, groups)
    with with_headroom(st, groups):
        submit(st, _gpu_job("big", workers=3))
    asyncio.run(scaling.update(st, 0.0))
    asyncio.run(scaling.update(st, 0.5))
    assert len(cluster.requests) == 1  # unchanged: asked once
    waits = {"big": "gang of 3"}
    scaling.explain(waits)
    assert waits["big"].startswith("waiting for new nodes:") and waits["big"].endswith("; gang of 3")
    cluster.down = True
    with with_headroom(st, groups):  # a gang for a new cpu node: the request changes, and Ray cannot take it
        submit(st, JobRequest("cpu", "a", parse_worker(cpu="16"), 1, "pack"))
    asyncio.run(scaling.update(st, 1.0))
    scaling.explain(waits)
    assert waits["big"] == "gang of 3"  # not "asked" when the ask failed, nor the last tick's text kept


def test_fractional_bundles_pack_on_as_few_nodes_in_rays_autoscaler_as_they_run_on() -> None:
    """Ray's autoscaler packs a request with float subtraction (its own functions, used here): twenty 0.1-CPU
    bundles fill a 2-CPU node in Ray's raylet and in the ledger, but not in its packing, which added a second
    node for the last one (seen on a local tenant cluster). What cuberay sends packs twenty."""
    from ray.autoscaler._private.resource_demand_scheduler import _fits, _inplace_subtract

    node_shape = {CPU: 2.0, "memory": 2.0 * 2**30}

    def fitted(bundles: list[dict[str, float]]) -> int:
        node, fits = dict(node_shape), 0
        for bundle in bundles:
            if _fits(node, bundle):
                _inplace_subtract(node, bundle)
                fits += 1
        return fits

    tenth = {CPU: 0.1, "memory": 100.0 * 2**20}
    assert fitted([tenth] * 20) == 19  # Ray's own packing of the raw amounts
    assert fitted([as_requested(tenth)] * 20) == 20
    assert packed_nodes([tenth] * 20, node_shape) == 1  # the reason's count: one new node
    assert as_requested({CPU: 2.0, GPU: 1.0, "memory": 2.0**30}) == {CPU: 2.0, GPU: 1.0, "memory": 2.0**30}
    assert fitted([as_requested({CPU: 0.1})] * 21) == 20  # and never one more than fits
