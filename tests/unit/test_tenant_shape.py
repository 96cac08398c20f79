"""A tenant's RayCluster as Ray's autoscaler sees it (kuberay/tenant_shape.py): node types from the render."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuberay.errors import SpecError
from cuberay.kuberay.tenant_shape import (
    FAKE_HEAD_TYPE,
    FAKE_PROVIDER,
    OBJECT_STORE_BYTES,
    autoscaling_config,
    head_cpus,
    head_env,
    tenant_raycluster,
)
from cuberay.platform.spec import load_platform

PLATFORM = Path(__file__).resolve().parents[2] / "configs" / "tenant-cluster" / "platform.yaml"


def _config(idle: float | None = None) -> tuple[dict, dict]:
    cluster, _ = tenant_raycluster(load_platform(PLATFORM), "vision")
    return cluster, autoscaling_config(cluster, "127.0.0.1:6379", idle)


def test_every_worker_group_is_a_node_type_with_its_resources_labels_and_replicas() -> None:
    cluster, config = _config()
    groups = {g["groupName"]: g for g in cluster["spec"]["workerGroupSpecs"]}
    types = config["available_node_types"]
    assert config["head_node_type"] == FAKE_HEAD_TYPE and set(types) == {FAKE_HEAD_TYPE, *groups}
    for name, group in groups.items():
        assert types[name]["min_workers"] == group["minReplicas"] and types[name]["max_workers"] == group["maxReplicas"]
        assert types[name]["labels"]["cuberay.io/pool"] == name
        assert types[name]["resources"]["CPU"] == 2 and types[name]["resources"]["memory"] == 2 * 2**30
        assert types[name]["resources"]["object_store_memory"] == OBJECT_STORE_BYTES
    assert types["gpu"]["resources"]["GPU"] == 2
    assert types["gpu"]["labels"]["ray.io/accelerator-type"] == "A100"  # what Ray's GPU detection would set
    assert "ray.io/accelerator-type" not in types["cpu"]["labels"]
    assert types[FAKE_HEAD_TYPE]["resources"].get("CPU", 0) == 0 == head_cpus(cluster)  # the head runs no work
    assert config["provider"]["module"] == FAKE_PROVIDER and config["provider"]["gcs_address"] == "127.0.0.1:6379"


def test_the_head_gets_the_rendered_worker_groups_and_the_idle_timeout_can_be_shortened() -> None:
    cluster, config = _config(idle=5)
    assert '"group":"gpu"' in head_env(cluster)["CUBERAY_KUBE_WORKER_GROUPS"]
    assert config["idle_timeout_minutes"] * 60 == pytest.approx(5)
    assert _config()[1]["idle_timeout_minutes"] * 60 == pytest.approx(60)  # the RayCluster's own


def test_an_unknown_tenant_is_named_with_the_ones_there_are() -> None:
    with pytest.raises(SpecError, match="no tenant 'nobody'.*vision"):
        tenant_raycluster(load_platform(PLATFORM), "nobody")
