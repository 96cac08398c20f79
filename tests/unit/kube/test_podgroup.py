"""Volcano PodGroup arithmetic (kuberay.md 1c): what KubeRay derives equals the gang floor we intend."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cuberay.kuberay.labels import Scheduler
from cuberay.kuberay.podgroup import podgroup
from cuberay.kuberay.render import all_manifests, render_platform
from cuberay.kuberay.render_cluster import RenderOptions
from cuberay.kuberay.render_queues import gang_floor
from cuberay.platform.policy.pool_shares import platform_shares
from cuberay.platform.spec import load_platform

REPO = Path(__file__).resolve().parents[3]
GiB = Decimal(2**30)


@pytest.mark.parametrize("config", ["configs/platform.yaml", "configs/kube/platform-large.yaml"])
def test_podgroup_of_each_rendered_cluster_is_the_tenant_gang_floor(config: str) -> None:
    platform = load_platform(REPO / config)
    opts = RenderOptions(scheduler=Scheduler.volcano)
    shares = platform_shares(platform)
    clusters = [m.obj for m in all_manifests(render_platform(platform, opts)) if m.kind == "RayCluster"]
    assert len(clusters) == len(platform.tenants)
    for obj in clusters:
        members, resources = gang_floor(shares[obj["metadata"]["name"]], opts)
        group = podgroup(obj)
        assert group.name == f"ray-{obj['metadata']['name']}-pg"
        assert group.min_member == members
        assert group.min_resources == {k: Decimal(str(v)) for k, v in resources.items() if v}


def test_large_platform_floor_in_numbers() -> None:
    """llm holds its head, one CPU node and two H100 nodes: 4 pods, whatever the autoscaler adds."""
    platform = load_platform(REPO / "configs" / "kube" / "platform-large.yaml")
    files = render_platform(platform, RenderOptions(scheduler=Scheduler.volcano))
    llm = next(m.obj for m in all_manifests(files) if m.kind == "RayCluster" and m.name == "llm")
    group = podgroup(llm)
    assert group.min_member == 4
    assert group.min_resources == {"cpu": Decimal(1 + 32 + 2 * 96), "memory": (4 + 128 + 2 * 1024) * GiB,
                                   "nvidia.com/gpu": Decimal(16), "rdma/hca": Decimal(16)}


def _group(replicas: int, low: int, high: int, cpu: str = "2", **extra: Any) -> dict[str, Any]:
    return {"groupName": "g", "replicas": replicas, "minReplicas": low, "maxReplicas": high, **extra,
            "template": {"spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": cpu}}}]}}}


def _cluster(*groups: dict[str, Any], autoscaling: bool = False) -> dict[str, Any]:
    head = {"template": {"spec": {"containers": [{"name": "h", "resources": {"limits": {"cpu": "1"}}}]}}}
    spec: dict[str, Any] = {"headGroupSpec": head, "workerGroupSpecs": list(groups)}
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "c"}, "spec": spec}


def test_without_autoscaling_members_clamp_replicas_but_resources_do_not() -> None:
    group = podgroup(_cluster(_group(replicas=5, low=1, high=3)))
    assert group.min_member == 1 + 3
    assert group.min_resources == {"cpu": Decimal(1 + 5 * 2)}  # KubeRay's raw replicas in the resource sum


def test_with_autoscaling_min_replicas_count_times_hosts() -> None:
    group = podgroup(_cluster(_group(replicas=4, low=2, high=8, numOfHosts=2), autoscaling=True))
    assert group.min_member == 1 + 2 * 2
    assert group.min_resources == {"cpu": Decimal(1 + 2 * 2 * 2)}


def test_suspended_groups_are_skipped_and_limits_stand_in_for_requests() -> None:
    group = podgroup(_cluster(_group(2, 2, 2), _group(3, 3, 3, suspend=True)))
    assert (group.min_member, group.min_resources) == (3, {"cpu": Decimal(5)})


def test_rayjob_adds_the_submitter_to_resources_not_members() -> None:
    cluster = _cluster(_group(2, 2, 2))
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "j"},
           "spec": {"rayClusterSpec": cluster["spec"]}}
    group = podgroup(job)
    assert group.name == "ray-j-pg"
    assert group.min_member == 3
    assert group.min_resources == {"cpu": Decimal("5.5"), "memory": Decimal(200 * 2**20)}
