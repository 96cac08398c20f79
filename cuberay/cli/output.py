"""One renderer for every command: rich tables for people, JSON/YAML for machines.

The flags every command shares are made here, so they mean the same thing
everywhere: ``-o/--output table|json|yaml`` is the format of what a command
prints, and ``--out PATH`` is the file (or directory) a command writes.

Tables never cut a value: a column that holds an id, a name or a number keeps
it whole on one line, and free text (a reason, a message) wraps instead. When
the whole-value columns alone are wider than the console (a pipe counts as 80
columns), the table is printed wider than the console rather than cut.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import typer
import yaml
from rich.console import Console
from rich.table import Table

# Columns of free text: these wrap; every other column keeps its values whole on one line.
WRAP_COLUMNS = frozenset({"reason", "message", "value", "result", "summary"})
_WRAP_MIN = 24  # the narrowest a wrapping column gets before the table grows past the console
OUTPUT_HELP = "table | json | yaml (json/yaml: the API's records, nothing else on stdout)."


class Format(str, enum.Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


def output_option(default: Format = Format.table, help: str = OUTPUT_HELP) -> Any:
    """``-o/--output``: the format of what the command prints. Every command that prints data takes it."""
    return typer.Option(default, "--output", "-o", help=help)


def out_option(help: str, metavar: str = "PATH") -> Any:
    """``--out PATH``: the file or directory the command writes (the one flag for that, in every command)."""
    return typer.Option(None, "--out", metavar=metavar, help=help)


def console(width: int | None = None) -> Console:
    return Console(soft_wrap=True, width=width)


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


def make_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], title: str | None = None) -> Table:
    """A rich Table of ``rows``: whole-value columns never wrap or cut, free-text columns wrap."""
    table = Table(title=title, header_style="bold")
    for col in columns:
        wraps = col in WRAP_COLUMNS
        table.add_column(col.upper().replace("_", " "), no_wrap=not wraps, overflow="fold")
    for row in rows:
        table.add_row(*[_cell(row, c) for c in columns])
    return table


def _cell(row: Mapping[str, Any], column: str) -> str:
    value = row.get(column)
    return "" if value is None else str(value)


def table_width(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> int:
    """The narrowest width that shows every whole-value cell whole (what a console must offer the table)."""
    width = len(columns) + 1  # the vertical rules
    for col in columns:
        cells = [_cell(row, col) for row in rows]
        longest = max([len(col), *(max((len(line) for line in c.splitlines()), default=0) for c in cells)])
        width += 2 + (min(longest, _WRAP_MIN) if col in WRAP_COLUMNS else longest)  # 2: cell padding
    return width


PLAIN_ROWS = 200  # above this many rows a table is laid out as plain aligned text: rich takes ~1 ms a row


def plain_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Aligned columns without rules or wrapping (every cell whole on one line), for long listings."""
    cells = [[col.upper().replace("_", " ") for col in columns]]
    cells += [[" ".join(_cell(row, col).split()) for col in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells)


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], title: str | None = None,
                out: Console | None = None) -> None:
    """Print rows as a table on ``out`` (stdout), widening past the console rather than cutting an id."""
    out = out or console()
    if len(rows) > PLAIN_ROWS:
        out.file.write((f"{title}\n" if title else "") + plain_table(rows, columns) + "\n")
        return
    needed = table_width(rows, columns)
    if needed > out.width:
        out = Console(file=out.file, soft_wrap=True, width=needed, force_terminal=out.is_terminal)
    out.print(make_table(rows, columns, title))


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
    print_table(rows, cols, title)


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (the ``--out`` of a command); a SpecError that names the path if it cannot."""
    from cuberay.errors import SpecError

    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot write {path}: {exc.strerror}; pick a writable --out path") from None
