"""``cuberay kube validate``: manifests against the shipped schemas, then the operator-only rules.

Schemas (``cuberay/kuberay/schemas/``, see PROVENANCE.md there) are the real CRDs of KubeRay
1.7, Kueue 0.19 and Volcano 1.15 and Kubernetes 1.32 core objects, made strict: an unknown
field is an error, as ``kubectl --validate=strict`` would report it (the API server would
silently drop it). Rules the schemas cannot express are in :mod:`cuberay.kuberay.rules`.
"""

from __future__ import annotations

import functools
import gzip
import json
from importlib import resources as pkg_resources
from pathlib import Path
from typing import Any, Iterable

import yaml

from cuberay.errors import SpecError
from cuberay.kuberay.problems import Problem, ident, json_path
from cuberay.kuberay.rules import check_rules


def _schema_file(api_version: str, kind: str) -> str:
    return f"{api_version.replace('/', '_')}_{kind}.json.gz"


@functools.lru_cache(maxsize=None)
def _validator(api_version: str, kind: str) -> Any:
    from jsonschema import Draft7Validator

    ref = pkg_resources.files("cuberay.kuberay").joinpath("schemas", _schema_file(api_version, kind))
    if not ref.is_file():
        return None
    return Draft7Validator(json.loads(gzip.decompress(ref.read_bytes())))


def known_kinds() -> list[str]:
    folder = pkg_resources.files("cuberay.kuberay").joinpath("schemas")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".json.gz"))
    return [n.removesuffix(".json.gz").rsplit("_", 1)[-1] for n in names]


def check_schema(obj: dict[str, Any]) -> list[Problem]:
    if not isinstance(obj, dict):
        return [Problem("schema", "?", "?", "", f"a document is {type(obj).__name__}, not a mapping; it is not a "
                                               f"Kubernetes object (was it a table or log output?)")]
    kind, name = ident(obj)
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or not isinstance(obj.get("kind"), str):
        return [Problem("schema", kind, name, "", "the document has no apiVersion and kind; it is not a "
                                                  "Kubernetes object")]
    validator = _validator(api_version, obj["kind"])
    if validator is None:
        return [Problem("schema.unknown-kind", kind, name, "", f"no schema is shipped for {api_version} {kind}, "
                        f"so only its rules were checked (schemas: {', '.join(known_kinds())})", severity="warning")]
    problems = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        problems.append(Problem("schema", kind, name, json_path(error.absolute_path),
                                f"{_short(error.message)} (CRD schema of {api_version} {kind})"))
    return problems


def _short(message: str) -> str:
    return message if len(message) <= 300 else message[:297] + "..."


def validate_objects(objs: Iterable[dict[str, Any]], file: str | None = None) -> list[Problem]:
    """Schema and operator-rule problems of every object (errors and warnings)."""
    out: list[Problem] = []
    for obj in objs:
        found = check_schema(obj) + (check_rules(obj) if isinstance(obj, dict) else [])
        out += [Problem(p.rule, p.kind, p.name, p.path, p.message, file, p.severity) for p in found]
    return out


def manifest_files(target: Path) -> list[Path]:
    if target.is_dir():
        return sorted(p for p in target.rglob("*") if p.suffix in (".yaml", ".yml", ".json") and p.is_file())
    if not target.exists():
        raise SpecError(f"{target} does not exist; pass a manifest file or a directory of them")
    return [target]


def load_objects(path: Path) -> list[dict[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except yaml.YAMLError as exc:
        raise SpecError(f"not valid YAML: {exc}", file=str(path)) from None
    out: list[dict[str, Any]] = []
    for doc in docs:
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            out += doc["items"]
        else:
            out.append(doc)
    return out


def validate_path(target: Path) -> tuple[int, list[Problem]]:
    """(objects checked, problems) for a manifest file or a directory of them."""
    count, problems = 0, []
    for path in manifest_files(target):
        objs = load_objects(path)
        count += len(objs)
        problems += validate_objects(objs, str(path))
    return count, problems


def errors(problems: Iterable[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]
