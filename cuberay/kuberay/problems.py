"""A problem found in a manifest: the rule, the object, the field path and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class Problem:
    """One rule an object breaks: which rule, where, and how to fix it."""

    rule: str
    kind: str
    name: str
    path: str
    message: str
    file: str | None = None
    severity: str = "error"  # or "warning" (e.g. a kind without a shipped schema)

    def __str__(self) -> str:
        where = f"{self.file}: " if self.file else ""
        at = f" {self.path}" if self.path else ""
        return f"{where}{self.kind}/{self.name}{at}: [{self.rule}] {self.message}"


def json_path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def ident(obj: Any) -> tuple[str, str]:
    if not isinstance(obj, dict):
        return "?", "?"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return str(obj.get("kind", "?")), str(meta.get("name", "?"))
