"""What a live reload of the platform file changes, and what it refuses while jobs run (reloading.changes)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cuberay.errors import AdmissionError, SpecError
from cuberay.platform.control.reloading import changes
from cuberay.platform.spec import load_platform

BASE: dict[str, Any] = {
    "apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "p"},
    "spec": {"storage": "/tmp/cuberay-reload", "tenants": [
        {"name": "a", "members": ["u"], "quota": {"guaranteed": {"gpu": "4"}, "max": {"gpu": "8"}}},
        {"name": "b", "members": ["u"]}]}}


def edited(**spec: Any) -> Any:
    data = copy.deepcopy(BASE)
    data["spec"].update(spec)
    return load_platform(data)


def test_a_lowered_max_below_use_is_reported_and_applied_not_refused() -> None:
    tenants = copy.deepcopy(BASE["spec"]["tenants"])
    tenants[0]["quota"]["max"]["gpu"] = "2"
    tenants[0]["quota"]["guaranteed"]["gpu"] = "2"
    out = changes(load_platform(BASE), edited(tenants=tenants), {"a": 1}, {"a": {"GPU": 4.0}})
    assert out[0] == "tenant a changed"
    assert "uses more than its new max (GPU): it admits nothing more" in out[1]


def test_tenants_added_members_and_scheduler_changes_are_listed() -> None:
    tenants = copy.deepcopy(BASE["spec"]["tenants"]) + [{"name": "c", "members": ["v"]}]
    tenants[1]["members"] = ["u", "w"]
    out = changes(load_platform(BASE), edited(tenants=tenants, scheduler={"max_drivers": 2}), {}, {})
    assert out == ["tenant c added", "tenant b changed", "scheduler settings changed"]
    assert changes(load_platform(BASE), load_platform(BASE), {}, {}) == ["no change"]


def test_a_tenant_with_jobs_cannot_be_dropped_and_storage_cannot_move() -> None:
    only_a = edited(tenants=BASE["spec"]["tenants"][:1])
    with pytest.raises(AdmissionError, match="b still have waiting or running jobs"):
        changes(load_platform(BASE), only_a, {"b": 2}, {})
    assert changes(load_platform(BASE), only_a, {}, {}) == ["tenant b removed"]
    with pytest.raises(SpecError) as moved:
        changes(load_platform(BASE), edited(storage="/elsewhere"), {}, {})
    assert moved.value.path == "spec.storage"
