"""One renderer for every command: rich tables for people, JSON/YAML for machines."""

from __future__ import annotations

import enum
import json
from typing import Any, Iterable, Mapping, Sequence

import yaml
from rich.console import Console
from rich.table import Table


class Format(str, enum.Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


def console() -> Console:
    return Console(soft_wrap=True)


def error_console() -> Console:
    return Console(stderr=True, soft_wrap=True)


def _plain(data: Any) -> Any:
    if hasattr(data, "model_dump"):
        return data.model_dump(mode="json")
    if isinstance(data, enum.Enum):
        return data.value
    if isinstance(data, Mapping):
        return {str(k): _plain(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_plain(v) for v in data]
    return data


def emit(data: Any, fmt: Format, *, columns: Sequence[str] | None = None, title: str | None = None) -> None:
    """Print ``data`` (a record, a list of records or a mapping) in ``fmt``."""
    plain = _plain(data)
    if fmt == Format.json:
        print(json.dumps(plain, indent=2, sort_keys=False))
        return
    if fmt == Format.yaml:
        print(yaml.safe_dump(plain, sort_keys=False).rstrip())
        return
    rows: Iterable[Mapping[str, Any]] = plain if isinstance(plain, list) else [plain]
    rows = list(rows)
    cols = list(columns or (rows[0].keys() if rows else []))
    table = Table(title=title, header_style="bold")
    for col in cols:
        table.add_column(col.upper().replace("_", " "))
    for row in rows:
        table.add_row(*["" if row.get(c) is None else str(row.get(c)) for c in cols])
    console().print(table)
