"""Each tenant's namespace gets a NetworkPolicy that keeps other tenants' pods off its Ray ports, and RBAC for
its own members only; both validate against the shipped schemas."""

from __future__ import annotations

from pathlib import Path

from cuberay.kuberay.render import render_platform
from cuberay.kuberay.render_cluster import RenderOptions
from cuberay.kuberay.validate import validate_objects
from cuberay.platform.spec import load_platform

PLATFORM = load_platform(Path(__file__).resolve().parents[3] / "configs" / "platform.yaml")


def by_kind(tenant: str) -> dict[str, dict]:
    return {m.kind: m.obj for m in render_platform(PLATFORM, RenderOptions())[f"{tenant}.yaml"]}


def test_only_the_tenants_own_pods_reach_its_ray_ports() -> None:
    policy = by_kind("vision")["NetworkPolicy"]
    assert policy["metadata"]["namespace"] == "vision"
    spec = policy["spec"]
    assert spec["podSelector"] == {} and spec["policyTypes"] == ["Ingress"]  # every pod, ingress denied by default
    own, operator, serve = spec["ingress"]
    assert own == {"from": [{"podSelector": {}}]}  # a podSelector alone means: this namespace only
    assert operator["ports"] == [{"protocol": "TCP", "port": 8265}] and "namespaceSelector" in operator["from"][0]
    assert serve == {"ports": [{"protocol": "TCP", "port": 8000}]}
    assert all(6379 not in [p["port"] for p in rule.get("ports", [])] for rule in spec["ingress"][1:])


def test_rbac_binds_the_tenants_named_members_in_its_namespace_only() -> None:
    for tenant in PLATFORM.tenants:
        objs = by_kind(tenant.name)
        binding = objs["RoleBinding"]
        names = {s["name"] for s in binding["subjects"]}
        assert names == {u for u in (*tenant.members, *tenant.admins) if u != "*"}
        assert binding["metadata"]["namespace"] == tenant.name == objs["Role"]["metadata"]["namespace"]
        assert binding["roleRef"]["name"] == objs["Role"]["metadata"]["name"]


def test_the_access_objects_validate_and_a_wrong_field_is_caught() -> None:
    objs = by_kind("vision")
    access = [objs["NetworkPolicy"], objs["Role"], objs["RoleBinding"]]
    assert validate_objects(access) == []
    broken = {**objs["NetworkPolicy"], "spec": {**objs["NetworkPolicy"]["spec"], "ingres": []}}
    assert [p.rule for p in validate_objects([broken])] == ["schema"]
