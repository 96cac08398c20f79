"""Render options and pod details: GCS fault tolerance, no autoscaling, storage, RDMA pods, tolerations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cuberay.errors import SpecError
from cuberay.kuberay.labels import Scheduler
from cuberay.kuberay.podgroup import podgroup
from cuberay.kuberay.render import all_manifests, render_platform
from cuberay.kuberay.render_cluster import RenderOptions
from cuberay.kuberay.storage import tenant_storage
from cuberay.kuberay.validate import validate_objects
from cuberay.platform.spec import load_platform

REPO = Path(__file__).resolve().parents[3]
LARGE = REPO / "configs" / "kube" / "platform-large.yaml"


def _cluster(opts: RenderOptions, tenant: str = "llm") -> dict[str, Any]:
    files = render_platform(load_platform(LARGE), opts)
    objs = [m.obj for m in all_manifests(files)]
    assert validate_objects(objs) == []
    return next(o for o in objs if o["kind"] == "RayCluster" and o["metadata"]["name"] == tenant)


def test_gcs_fault_tolerance_with_external_redis() -> None:
    spec = _cluster(RenderOptions(redis_address="redis.cuberay:6379", redis_password_secret="redis"))["spec"]
    assert spec["gcsFaultToleranceOptions"] == {
        "redisAddress": "redis.cuberay:6379",
        "redisPassword": {"valueFrom": {"secretKeyRef": {"name": "redis", "key": "password"}}}}


def test_without_autoscaling_kueue_needs_no_elastic_annotation() -> None:
    obj = _cluster(RenderOptions(autoscaling=False))
    assert "enableInTreeAutoscaling" not in obj["spec"] and "annotations" not in obj["metadata"]
    assert podgroup(obj).min_member == 4  # replicas = minReplicas: head + 1 cpu + 2 h100


def test_rdma_pool_pods() -> None:
    groups = {g["groupName"]: g for g in _cluster(RenderOptions())["spec"]["workerGroupSpecs"]}
    pod = groups["h100-ib"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["rdma/hca"] == "8"
    assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "effect": "NoSchedule",
                                   "value": "present"}]
    assert pod["nodeSelector"] == {"cuberay.io/pool": "h100-ib"}
    # What the controller's ledger reads from Ray: the pool and fabric labels, rdma and the card model.
    assert groups["h100-ib"]["labels"] == {"cuberay.io/rdma-domain": "spine-1", "cuberay.io/pool": "h100-ib",
                                           "cuberay.io/rdma": "ib"}
    assert groups["h100-ib"]["resources"] == {"rdma": "8", "accelerator_type:H100": "1"}
    assert "securityContext" not in groups["cpu"]["template"]["spec"]["containers"][0]


def test_volcano_labels_and_no_kueue_labels() -> None:
    labels = _cluster(RenderOptions(scheduler=Scheduler.volcano))["metadata"]["labels"]
    assert labels["volcano.sh/queue-name"] == "llm"
    assert labels["ray.io/priority-class-name"] == "prod-priority-20"
    assert not any(k.startswith("kueue.") for k in labels)


def test_storage_per_member_subpaths_and_shared_claims() -> None:
    tenant = load_platform(LARGE).tenant("vision")
    volumes, mounts = tenant_storage(tenant)
    assert [v["name"] for v in volumes] == ["vision-workspace", "pvc-share-vision-datasets"]
    assert {"name": "vision-workspace", "mountPath": "/mnt/alice", "subPath": "alice"} in mounts
    assert {"name": "vision-workspace", "mountPath": "/mnt/bob", "subPath": "bob"} in mounts
    assert {"name": "pvc-share-vision-datasets", "mountPath": "/datasets"} in mounts


def test_open_tenant_mounts_the_whole_claim_and_nfs_is_refused() -> None:
    data = load_platform(LARGE).model_dump(mode="json", by_alias=True)
    data["spec"]["tenants"][2]["mounts"] = ["scratch(pvc):/mnt"]
    research = load_platform(data).tenant("research")  # members ["*"]
    assert tenant_storage(research)[1] == [{"name": "scratch", "mountPath": "/mnt"}]
    data["spec"]["tenants"][2]["mounts"] = ["server:/export(nfs):/data"]
    with pytest.raises(SpecError, match="create a PVC"):
        tenant_storage(load_platform(data).tenant("research"))


def test_a_tenant_guaranteed_a_pool_it_gets_no_group_in_is_refused() -> None:
    data = load_platform(REPO / "configs" / "platform.yaml").model_dump(mode="json", by_alias=True)
    nlp = data["spec"]["tenants"][1]
    nlp["quota"] = {"guaranteed": {"gpu": "2"}, "max": {"cpu": "4", "memory": "4Gi", "gpu": "2"}}  # < a gpu node
    with pytest.raises(SpecError, match="tenant 'nlp': its Ray cluster could not start its controller"):
        render_platform(load_platform(data), RenderOptions())


def test_each_tenant_platform_file_loads() -> None:
    for config in (REPO / "configs" / "platform.yaml", LARGE):
        files = render_platform(load_platform(config), RenderOptions())
        for m in all_manifests(files):
            if m.kind == "ConfigMap":
                platform = load_platform(m.obj["data"]["platform.yaml"])
                assert [t.name for t in platform.tenants] == [m.namespace]


def test_the_head_tells_the_controller_its_worker_groups() -> None:
    """The renderer's env and the controller's parser agree (in-cluster capacity up to maxReplicas)."""
    from cuberay.platform.policy.autoscale import ENV_WORKER_GROUPS, parse_groups

    spec = _cluster(RenderOptions())["spec"]
    env = {e["name"]: e["value"] for e in spec["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]}
    groups = {g.group: g for g in parse_groups(env[ENV_WORKER_GROUPS])}
    assert {name: g.max_replicas for name, g in groups.items()} == \
        {g["groupName"]: g["maxReplicas"] for g in spec["workerGroupSpecs"]}
    assert groups["h100-ib"].labels["cuberay.io/pool"] == "h100-ib"
    assert groups["h100-ib"].resources == {"CPU": 96.0, "GPU": 8.0, "memory": 1024.0 * 2**30, "rdma": 8.0}


def test_with_a_driver_resource_every_worker_group_offers_drivers_places_and_the_head_none() -> None:
    """The platform's scheduler.driver_resource keeps job drivers off the head (they then outlive its restart)."""
    data = load_platform(LARGE).model_dump(by_alias=True, mode="json")
    data["spec"]["scheduler"].update(driver_resource="cuberay_driver", max_drivers=12)
    files = render_platform(load_platform(data), RenderOptions(redis_address="redis.cuberay:6379"))
    objs = [m.obj for m in all_manifests(files)]
    assert validate_objects(objs) == []
    clusters = [o for o in objs if o["kind"] == "RayCluster"]
    assert clusters and all(g["resources"]["cuberay_driver"] == "12"
                            for o in clusters for g in o["spec"]["workerGroupSpecs"])
    assert all("resources" not in o["spec"]["headGroupSpec"] for o in clusters)
    plain = [o for o in (m.obj for m in all_manifests(render_platform(load_platform(LARGE), RenderOptions())))
             if o["kind"] == "RayCluster"]
    assert not any("cuberay_driver" in g.get("resources", {}) for o in plain for g in o["spec"]["workerGroupSpecs"])
