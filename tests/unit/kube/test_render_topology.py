"""A platform's topology on Kubernetes: Kueue's Topology, flavors' topologyName and pod-set annotations; Volcano's
HyperNodes and the network-topology labels KubeRay copies to the PodGroup; all checked against the real CRDs."""

from __future__ import annotations

import copy
from pathlib import Path

from cuberay.kuberay.labels import Scheduler
from cuberay.kuberay.podgroup import podgroup_object
from cuberay.kuberay.render import all_manifests, render_platform
from cuberay.kuberay.render_cluster import RenderOptions
from cuberay.kuberay.render_job import render_job
from cuberay.kuberay.validate import validate_objects
from cuberay.platform.spec import load_platform, load_spec

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "configs" / "topology"


def _objects(scheduler: Scheduler, platform_file: Path = EXAMPLES / "platform.yaml") -> list[dict]:
    files = render_platform(load_platform(platform_file), RenderOptions(scheduler=scheduler))
    return [m.obj for m in all_manifests(files)]


def _job(name: str, scheduler: Scheduler) -> dict:
    manifests = render_job(load_platform(EXAMPLES / "platform.yaml"), load_spec(EXAMPLES / f"{name}.yaml"),
                           RenderOptions(scheduler=scheduler))
    assert validate_objects(m.obj for m in manifests) == []
    return next(m.obj for m in manifests if m.obj["kind"] in ("RayJob", "RayService"))


def test_kueue_gets_a_topology_named_by_every_flavor_and_the_cluster_prefers_one_rack():
    objs = _objects(Scheduler.kueue)
    assert validate_objects(objs) == []
    topology = next(o for o in objs if o["kind"] == "Topology")
    assert topology["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [
        "cuberay.io/block", "cuberay.io/rack", "kubernetes.io/hostname"]
    flavors = [o for o in objs if o["kind"] == "ResourceFlavor"]
    assert len(flavors) == 4 and {f["spec"]["topologyName"] for f in flavors} == {topology["metadata"]["name"]}
    cluster = next(o for o in objs if o["kind"] == "RayCluster")
    for group in cluster["spec"]["workerGroupSpecs"]:
        assert group["template"]["metadata"]["annotations"] == {
            "kueue.x-k8s.io/podset-preferred-topology": "cuberay.io/rack"}
        assert group["labels"]["cuberay.io/rack"]  # Ray sees the levels as node labels too


def test_a_job_asks_kueue_for_its_level_on_its_worker_pods():
    rack = _job("train-rack", Scheduler.kueue)
    for group in rack["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        assert group["template"]["metadata"]["annotations"] == {
            "kueue.x-k8s.io/podset-required-topology": "cuberay.io/rack"}
    near = _job("sweep-preferred", Scheduler.kueue)
    for group in near["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        assert group["template"]["metadata"]["annotations"] == {
            "kueue.x-k8s.io/podset-preferred-topology": "cuberay.io/rack"}


def test_volcano_gets_hypernodes_racks_at_tier_1_and_blocks_above_them():
    objs = _objects(Scheduler.volcano)
    assert validate_objects(objs) == []
    nodes = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "HyperNode"}
    racks = {n: s for n, s in nodes.items() if s["tier"] == 1}
    blocks = {n: s for n, s in nodes.items() if s["tier"] == 2}
    assert len(racks) == 4 and len(blocks) == 2 and {s["tierName"] for s in nodes.values()} == {"rack", "block"}
    assert racks["racks-rack-b0-r1"]["members"] == [{"type": "Node", "selector": {"labelMatch": {
        "matchLabels": {"cuberay.io/block": "b0", "cuberay.io/rack": "r1"}}}}]
    assert [m["selector"]["exactMatch"]["name"] for m in blocks["racks-block-b1"]["members"]] == [
        "racks-rack-b1-r0", "racks-rack-b1-r1"]
    cluster = next(o for o in objs if o["kind"] == "RayCluster")
    assert cluster["metadata"]["labels"]["volcano.sh/network-topology-mode"] == "soft"


def test_a_job_becomes_a_podgroup_with_network_topology_that_the_crd_accepts():
    rack = _job("train-rack", Scheduler.volcano)
    pg = podgroup_object(rack)
    assert pg["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    assert pg["spec"]["queue"] == "research" and validate_objects([pg]) == []
    near = podgroup_object(_job("sweep-preferred", Scheduler.volcano))
    assert near["spec"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 1}
    bad = copy.deepcopy(pg)
    bad["spec"]["networkTopology"]["mode"] = "strict"
    assert any("networkTopology" in p.path for p in validate_objects([bad]))


def test_a_platform_without_topology_gets_none_of_it():
    for scheduler in (Scheduler.kueue, Scheduler.volcano):
        objs = _objects(scheduler, REPO / "configs" / "kube" / "platform-large.yaml")
        assert not [o for o in objs if o["kind"] in ("Topology", "HyperNode")]
        assert not [o for o in objs if o["kind"] == "ResourceFlavor" and "topologyName" in o["spec"]]


def test_the_crd_rules_the_schemas_drop_are_checked():
    topology = next(o for o in _objects(Scheduler.kueue) if o["kind"] == "Topology")
    wrong = copy.deepcopy(topology)
    wrong["spec"]["levels"] = [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "cuberay.io/rack"},
                               {"nodeLabel": "cuberay.io/rack"}]
    rules = {p.rule for p in validate_objects([wrong])}
    assert {"kueue.topology-hostname-lowest", "kueue.topology-levels-unique"} <= rules
    typo = copy.deepcopy(topology)
    typo["spec"]["levels"][0] = {"nodelabel": "cuberay.io/block"}
    assert any(p.rule == "schema" for p in validate_objects([typo]))
    hyper = next(o for o in _objects(Scheduler.volcano) if o["kind"] == "HyperNode")
    two = copy.deepcopy(hyper)
    two["spec"]["members"][0]["selector"]["exactMatch"] = {"name": "n1"}
    assert "volcano.hypernode-one-selector" in {p.rule for p in validate_objects([two])}
    kind = copy.deepcopy(hyper)
    kind["spec"]["members"][0]["type"] = "HyperNode"
    assert "volcano.hypernode-label-match-nodes" in {p.rule for p in validate_objects([kind])}


def test_a_document_that_is_not_a_mapping_is_a_problem_not_a_crash():
    problems = validate_objects(["FILE KIND NAME"])  # e.g. a table printed instead of -o yaml
    assert len(problems) == 1 and "not a mapping" in problems[0].message
