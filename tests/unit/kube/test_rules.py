"""Mutations of valid rendered manifests each fail validation with the rule they break named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import pytest

from cuberay.kuberay.labels import Scheduler
from cuberay.kuberay.render import all_manifests, render_platform
from cuberay.kuberay.render_cluster import RenderOptions
from cuberay.kuberay.render_job import render_job
from cuberay.kuberay.validate import validate_objects
from cuberay.platform.spec import load_platform, load_spec

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "configs" / "platform.yaml"
LARGE = REPO / "configs" / "kube" / "platform-large.yaml"


def _objects(platform: Path = LARGE, scheduler: Scheduler = Scheduler.kueue) -> dict[str, dict[str, Any]]:
    files = render_platform(load_platform(platform), RenderOptions(scheduler=scheduler))
    return {f"{m.kind}/{m.name}": copy.deepcopy(m.obj) for m in all_manifests(files)}


def _rayjob() -> dict[str, Any]:
    manifests = render_job(load_platform(EXAMPLE), load_spec(REPO / "configs" / "jobs" / "train-ddp.yaml"),
                           RenderOptions())
    return copy.deepcopy(next(m.obj for m in manifests if m.kind == "RayJob"))


def _rules(obj: dict[str, Any]) -> set[str]:
    return {p.rule for p in validate_objects([obj]) if p.severity == "error"}


def _head_group(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    obj = objs["RayCluster/llm"]
    obj["spec"]["workerGroupSpecs"][0]["groupName"] = "head"
    return obj


def _cluster_selector(_: dict[str, dict[str, Any]]) -> dict[str, Any]:
    obj = _rayjob()
    del obj["spec"]["rayClusterSpec"]
    obj["spec"]["clusterSelector"] = {"ray.io/cluster": "vision"}
    return obj


def _no_cohort(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    obj = objs["ClusterQueue/llm"]
    del obj["spec"]["cohortName"]
    return obj


def _flavor_missing_resource(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    obj = objs["ClusterQueue/llm"]
    resources = obj["spec"]["resourceGroups"][0]["flavors"][1]["resources"]
    resources[:] = [r for r in resources if r["name"] != "rdma/hca"]
    return obj


def _unknown_field(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    obj = objs["RayCluster/vision"]
    obj["spec"]["workerGroupSpecs"][0]["replica"] = 2  # a typo the API server would silently drop
    return obj


def _min_above_max(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    obj = objs["RayCluster/vision"]
    obj["spec"]["workerGroupSpecs"][0]["minReplicas"] = 9
    return obj


def _ft_conflict(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    obj = objs["RayCluster/vision"]
    obj["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    obj["metadata"].setdefault("annotations", {})["ray.io/ft-enabled"] = "true"
    return obj


def _autoscaling_without_elastic(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    obj = objs["RayCluster/vision"]
    del obj["metadata"]["annotations"]
    return obj


MUTATIONS: dict[str, tuple[Callable[[dict[str, dict[str, Any]]], dict[str, Any]], str]] = {
    "worker group named head under Kueue": (_head_group, "kueue.head-group-name"),
    "RayJob with clusterSelector under Kueue": (_cluster_selector, "kueue.rayjob-cluster-selector"),
    "borrowingLimit without a cohort": (_no_cohort, "kueue.borrowing-limit-needs-cohort"),
    "ResourceFlavor missing a covered resource": (_flavor_missing_resource, "kueue.flavor-covers-resources"),
    "unknown field": (_unknown_field, "schema"),
    "minReplicas above maxReplicas": (_min_above_max, "kuberay.replicas-range"),
    "GCS FT annotation and options": (_ft_conflict, "kuberay.gcs-ft-conflict"),
    "autoscaling under Kueue without elastic-job": (_autoscaling_without_elastic, "kueue.autoscaling-needs-elastic-job"),
}


def test_unmutated_objects_are_valid() -> None:
    """The baseline of every mutation passes, so each failure below is the mutation's."""
    assert validate_objects([*_objects().values(), _rayjob()]) == []


@pytest.mark.parametrize("case", list(MUTATIONS))
def test_mutation_fails_with_the_rule_named(case: str) -> None:
    mutate, rule = MUTATIONS[case]
    problems = validate_objects([mutate(_objects())])
    assert rule in {p.rule for p in problems}, [str(p) for p in problems]
    assert all(f"[{p.rule}]" in str(p) for p in problems)


def test_sixty_character_tenant_fails_the_name_rule() -> None:
    data = load_platform(EXAMPLE).model_dump(mode="json", by_alias=True)
    long_name = "t" + "a" * 59
    data["spec"]["tenants"][0]["name"] = long_name
    files = render_platform(load_platform(data), RenderOptions())
    cluster = next(m.obj for m in all_manifests(files) if m.kind == "RayCluster" and m.name == long_name)
    problems = validate_objects([cluster])
    assert [p.rule for p in problems] == ["kuberay.name-length"]
    assert "60 characters" in problems[0].message and "at most 53" in problems[0].message


def test_pool_named_head_is_renamed_for_kueue() -> None:
    data = load_platform(EXAMPLE).model_dump(mode="json", by_alias=True)
    data["spec"]["node_pools"][0]["name"] = "head"
    files = render_platform(load_platform(data), RenderOptions())
    assert validate_objects(m.obj for m in all_manifests(files)) == []


def test_kueue_rules_apply_only_to_queued_objects() -> None:
    obj = _cluster_selector({})
    del obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert "kueue.rayjob-cluster-selector" not in _rules(obj)


def test_rayjob_name_limit_is_47() -> None:
    obj = _rayjob()
    obj["metadata"]["name"] = "j" * 48
    assert _rules(obj) == {"kuberay.name-length"}
    obj["metadata"]["name"] = "j" * 47
    assert _rules(obj) == set()


def test_name_must_be_dns_1035() -> None:
    obj = _rayjob()
    obj["metadata"]["name"] = "1job"
    assert _rules(obj) == {"kuberay.name-dns1035"}


def test_unknown_kind_is_a_warning_not_an_error() -> None:
    (problem,) = validate_objects([{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}}])
    assert (problem.rule, problem.severity) == ("schema.unknown-kind", "warning")
