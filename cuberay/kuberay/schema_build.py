"""Build the strict JSON Schemas shipped in ``cuberay/kuberay/schemas/`` from upstream CRDs.

Maintainer tool, never run by the product: ``python -m cuberay.kuberay.schema_build SRC_DIR``
reads the upstream CRD YAMLs (``SRC_DIR/{kuberay,kueue,volcano}/*.yaml``) and the Kubernetes
core ``pod-v1.json`` (``SRC_DIR/k8s/<version>/``), and writes one gzipped JSON file per
(apiVersion, kind) to ``cuberay/kuberay/schemas/``. PROVENANCE.md there lists the sources.

The conversion keeps the storage version's ``openAPIV3Schema`` and makes it strict the way
kubeconform's "strict" mode does, because the API server silently prunes unknown fields:

- every object with ``properties`` (and no ``additionalProperties`` or
  ``x-kubernetes-preserve-unknown-fields``) gets ``additionalProperties: false``;
- ``nullable: true`` becomes a ``"null"`` member of ``type``;
- a required field that has a ``default`` is no longer required (the API server fills it);
- ``metadata`` is Kubernetes' ObjectMeta (the CRDs only say ``type: object``);
- descriptions, ``status`` and CEL rules are dropped to keep the files small (the CEL rules
  that matter are checked by :mod:`cuberay.kuberay.rules`).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import yaml

SCHEMA_DIR = Path(__file__).with_name("schemas")
_DROP = {"description", "x-kubernetes-validations", "x-kubernetes-list-map-keys", "x-kubernetes-list-type",
         "x-kubernetes-map-type"}


def strict(node: Any) -> Any:
    """A copy of an OpenAPI v3 (CRD) schema node, strict and JSON-Schema-ready (see module doc)."""
    if isinstance(node, list):
        return [strict(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items() if k not in _DROP and k != "properties"}
    if isinstance(node.get("properties"), dict):  # field names, not keywords: keep them all
        out["properties"] = {k: strict(v) for k, v in node["properties"].items()}
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
    props = out.get("properties")
    if isinstance(props, dict):
        if "required" in out:
            required = [r for r in out["required"] if "default" not in props.get(r, {})]
            if required:
                out["required"] = required
            else:
                del out["required"]
        if "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


def object_meta(pod_schema: dict[str, Any]) -> dict[str, Any]:
    """Kubernetes ObjectMeta (strict) from the core Pod schema."""
    return _no_descriptions(pod_schema["properties"]["metadata"])


def _no_descriptions(node: Any) -> Any:
    if isinstance(node, list):
        return [_no_descriptions(x) for x in node]
    if isinstance(node, dict):
        out = {k: _no_descriptions(v) for k, v in node.items() if k not in ("description", "properties")}
        if isinstance(node.get("properties"), dict):
            out["properties"] = {k: _no_descriptions(v) for k, v in node["properties"].items()}
        return out
    return node


def from_crd(crd: dict[str, Any], meta: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(apiVersion, kind, schema) of the storage version of a CRD."""
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    schema = strict(version["schema"]["openAPIV3Schema"])
    schema["properties"].pop("status", None)
    schema["properties"]["metadata"] = meta
    api_version = f"{group}/{version['name']}"
    schema["properties"]["apiVersion"] = {"type": "string", "enum": [api_version]}
    schema["properties"]["kind"] = {"type": "string", "enum": [kind]}
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    return api_version, kind, schema


def core_schemas(meta: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Namespace, ConfigMap (core/v1) and PriorityClass (scheduling.k8s.io/v1): fields of the Kubernetes 1.32 API reference."""
    def obj(kind: str, api_version: str = "v1", **props: Any) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata"],
                "properties": {"apiVersion": {"type": "string", "enum": [api_version]},
                               "kind": {"type": "string", "enum": [kind]}, "metadata": meta, **props}}
    strings = {"type": "object", "additionalProperties": {"type": "string"}}
    return {
        ("v1", "Namespace"): obj("Namespace", spec={
            "type": "object", "additionalProperties": False,
            "properties": {"finalizers": {"type": "array", "items": {"type": "string"}}}}),
        ("v1", "ConfigMap"): obj("ConfigMap", data=strings, binaryData=strings, immutable={"type": "boolean"}),
        ("scheduling.k8s.io/v1", "PriorityClass"): {
            **obj("PriorityClass", "scheduling.k8s.io/v1", value={"type": "integer", "minimum": -2147483648, "maximum": 1000000000},
                  globalDefault={"type": "boolean"}, description={"type": "string"},
                  preemptionPolicy={"type": "string", "enum": ["Never", "PreemptLowerPriority"]}),
            "required": ["apiVersion", "kind", "metadata", "value"]},
    }


def access_schemas(meta: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """NetworkPolicy (networking.k8s.io/v1), Role and RoleBinding (rbac.authorization.k8s.io/v1): fields of the
    Kubernetes 1.32 API reference, strict like the others."""
    def obj(kind: str, api_version: str, required: tuple[str, ...] = (), **props: Any) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False,
                "required": ["apiVersion", "kind", "metadata", *required],
                "properties": {"apiVersion": {"type": "string", "enum": [api_version]},
                               "kind": {"type": "string", "enum": [kind]}, "metadata": meta, **props}}

    def strict_obj(required: tuple[str, ...] = (), **props: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": props}
        if required:
            out["required"] = list(required)
        return out

    strings = {"type": "array", "items": {"type": "string"}}
    selector = strict_obj(
        matchLabels={"type": "object", "additionalProperties": {"type": "string"}},
        matchExpressions={"type": "array", "items": strict_obj(("key", "operator"), key={"type": "string"},
                                                               operator={"type": "string"}, values=strings)})
    peer = strict_obj(podSelector=selector, namespaceSelector=selector,
                      ipBlock=strict_obj(("cidr",), cidr={"type": "string"}, **{"except": strings}))
    port = strict_obj(protocol={"type": "string", "enum": ["TCP", "UDP", "SCTP"]},
                      port={"type": ["integer", "string"]}, endPort={"type": "integer"})
    ports = {"type": "array", "items": port}
    network_policy = strict_obj(
        ("podSelector",), podSelector=selector,
        policyTypes={"type": "array", "items": {"type": "string", "enum": ["Ingress", "Egress"]}},
        ingress={"type": "array", "items": strict_obj(**{"from": {"type": "array", "items": peer}}, ports=ports)},
        egress={"type": "array", "items": strict_obj(to={"type": "array", "items": peer}, ports=ports)})
    rule = strict_obj(("verbs",), apiGroups=strings, resources=strings, verbs=strings, resourceNames=strings,
                      nonResourceURLs=strings)
    subject = strict_obj(("kind", "name"), kind={"type": "string"}, name={"type": "string"},
                         apiGroup={"type": "string"}, namespace={"type": "string"})
    role_ref = strict_obj(("apiGroup", "kind", "name"), apiGroup={"type": "string"}, kind={"type": "string"},
                          name={"type": "string"})
    rbac = "rbac.authorization.k8s.io/v1"
    return {
        ("networking.k8s.io/v1", "NetworkPolicy"): obj("NetworkPolicy", "networking.k8s.io/v1", spec=network_policy),
        (rbac, "Role"): obj("Role", rbac, rules={"type": "array", "items": rule}),
        (rbac, "RoleBinding"): obj("RoleBinding", rbac, ("roleRef",), subjects={"type": "array", "items": subject},
                                   roleRef=role_ref),
    }


def file_name(api_version: str, kind: str) -> str:
    return f"{api_version.replace('/', '_')}_{kind}.json.gz"


def write(schemas: dict[tuple[str, str], dict[str, Any]], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for (api_version, kind), schema in sorted(schemas.items()):
        data = json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()
        # mtime=0: the bytes depend on the schema only, so a rebuild is a no-op in git.
        (out_dir / file_name(api_version, kind)).write_bytes(gzip.compress(data, mtime=0))


def build(src: Path, out_dir: Path = SCHEMA_DIR) -> list[str]:
    pod = json.loads(next(src.glob("k8s/*/pod-v1.json")).read_text())
    meta = object_meta(pod)
    schemas = {**core_schemas(meta), **access_schemas(meta)}
    for path in sorted(src.glob("*/*.yaml")):
        api_version, kind, schema = from_crd(yaml.safe_load(path.read_text()), meta)
        schemas[(api_version, kind)] = schema
    write(schemas, out_dir)
    return [file_name(*key) for key in sorted(schemas)]


if __name__ == "__main__":
    for name in build(Path(sys.argv[1])):
        print(name)
