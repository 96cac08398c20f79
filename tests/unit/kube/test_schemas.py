"""The shipped schemas: strict conversion of CRDs, package data, and the real CRDs they came from."""

from __future__ import annotations

from pathlib import Path

from cuberay.kuberay.schema_build import strict
from cuberay.kuberay.validate import check_schema, known_kinds

REPO = Path(__file__).resolve().parents[3]


def test_strict_conversion_forbids_unknown_fields_but_keeps_open_maps() -> None:
    crd = {"type": "object", "description": "x", "required": ["a", "b"], "properties": {
        "a": {"type": "string"},
        "b": {"type": "integer", "default": 0},
        "description": {"type": "string", "description": "a field named description stays"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"k": {}}},
        "maybe": {"type": "string", "nullable": True},
    }}
    out = strict(crd)
    assert out["additionalProperties"] is False
    assert out["required"] == ["a"]  # b has a default the API server fills
    assert "description" in out["properties"] and "description" not in out
    assert out["properties"]["labels"]["additionalProperties"] == {"type": "string"}
    assert "additionalProperties" not in out["properties"]["free"]
    assert out["properties"]["maybe"]["type"] == ["string", "null"]


def test_every_kind_the_renderer_writes_has_a_schema() -> None:
    assert {"Namespace", "ConfigMap", "PriorityClass", "RayCluster", "RayJob", "RayService", "ResourceFlavor",
            "ClusterQueue", "LocalQueue", "WorkloadPriorityClass", "Queue", "PodGroup"} <= set(known_kinds())


def test_schemas_are_package_data() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert '"cuberay.kuberay" = ["schemas/*.json.gz", "schemas/PROVENANCE.md"]' in text
    assert (REPO / "cuberay" / "kuberay" / "schemas" / "PROVENANCE.md").exists()


def test_metadata_is_kubernetes_object_meta() -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "lables": {}}}
    (problem,) = check_schema(ns)
    assert problem.path == "metadata" and "'lables' was unexpected" in problem.message


def test_crd_enums_are_enforced() -> None:
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "a"},
          "spec": {"preemption": {"reclaimWithinCohort": "Sometimes"}}}
    (problem,) = check_schema(cq)
    assert problem.path == "spec.preemption.reclaimWithinCohort"
