"""Rendered Kubernetes objects with the comments that explain them, and their YAML text.

A :class:`Manifest` is a plain dict (what the API server gets) plus comments for people:
a header above the object and end-of-line notes on chosen fields (``("spec", "resourceGroups",
0, "flavors", 1, "resources", 0, "nominalQuota")``). ruamel.yaml writes both, so a platform
engineer reads the quota mapping next to the numbers.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

Path_ = tuple[Any, ...]


@dataclass
class Manifest:
    """One Kubernetes object and its comments."""

    obj: dict[str, Any]
    header: list[str] = field(default_factory=list)
    notes: dict[Path_, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.obj["kind"]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def namespace(self) -> str | None:
        return self.obj["metadata"].get("namespace")

    def note(self, path: Sequence[Any], text: str) -> None:
        self.notes[tuple(path)] = text


def _commented(data: Any) -> Any:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import LiteralScalarString

    if isinstance(data, dict):
        out = CommentedMap()
        for k, v in data.items():
            out[k] = _commented(v)
        return out
    if isinstance(data, list):
        return CommentedSeq([_commented(v) for v in data])
    if isinstance(data, str) and "\n" in data:
        return LiteralScalarString(data)  # runtimeEnvYAML, serveConfigV2, platform.yaml: keep them readable
    return data


def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 4096  # never fold long commands or comments
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def to_yaml(manifests: Iterable[Manifest]) -> str:
    """Multi-document YAML with the headers and notes as comments."""
    yaml = _yaml()
    docs = []
    for m in manifests:
        root = _commented(m.obj)
        for path, text in m.notes.items():
            parent = root
            for key in path[:-1]:
                parent = parent[key]
            parent.yaml_add_eol_comment(text, path[-1], column=0)  # one column for all: "value # note"
        buf = io.StringIO()
        yaml.dump(root, buf)
        header = "".join(f"# {line}".rstrip() + "\n" for line in m.header)
        docs.append(header + buf.getvalue())
    return "---\n".join(docs)


def write_files(files: dict[str, list[Manifest] | str], out_dir: Path) -> list[Path]:
    """Write ``name -> manifests`` (or text) under ``out_dir``; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in files.items():
        path = out_dir / name
        path.write_text(content if isinstance(content, str) else to_yaml(content), encoding="utf-8")
        written.append(path)
    return written
