"""One meaning per flag across the whole CLI, checked by walking the typer app.

``-o/--output`` is the format of what a command prints (table | json | yaml),
in every command that prints data; ``--out PATH`` is the file or directory a
command writes. Commands added later are walked too, so they keep to it.
"""

from __future__ import annotations

import enum
import typing
from pathlib import Path
from typing import Any, Iterator

import pytest
import typer

from cuberay.cli import _register, app, main
from cuberay.cli.output import Format

# Commands that print no records: their output is a log, a live display or nothing.
NO_DATA = {"down", "demo", "logs", "run", "history export", "node start"}  # node start: ray start's own output
# Options that write a file but are named for what they write (a plot is not "the output").
NAMED_WRITES = {"--plot"}


def _commands() -> Iterator[tuple[str, Any]]:
    _register()

    def walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                yield from walk(sub, (*path, name))
        else:
            yield " ".join(path), command

    yield from walk(typer.main.get_command(app), ())


def _options(command: Any) -> list[Any]:
    return [p for p in command.params if getattr(p, "opts", None) and any(o.startswith("-") for o in p.opts)]


def _type(option: Any) -> Any:
    """The option's Python type, without Optional."""
    annotation = option.type_descriptor.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType",
                                                                               None)) and args else annotation


def _writes(option: Any) -> bool:
    """A path option whose help says the command writes there."""
    help_text = (option.help or "").lower()
    return _type(option) in (Path, str) and any(word in help_text for word in ("write", "save"))


COMMANDS = dict(_commands())


def test_the_walk_sees_every_command() -> None:
    assert {"submit", "queue", "status", "cancel", "tenants", "up", "down", "demo", "logs", "run", "sim",
            "spec validate", "spec schema", "history export"} <= set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_dash_o_is_the_output_format_everywhere(name: str) -> None:
    for option in _options(COMMANDS[name]):
        names = set(option.opts) | set(option.secondary_opts)
        if names & {"-o", "--output", "--format"}:
            assert names == {"-o", "--output"}, f"{name}: {sorted(names)} must be exactly -o/--output"
            kind = _type(option)
            assert isinstance(kind, type) and issubclass(kind, enum.Enum), f"{name}: -o takes a format"
            assert [m.value for m in kind] == [m.value for m in Format] == ["table", "json", "yaml"], name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_commands_that_print_data_take_dash_o_and_the_others_do_not(name: str) -> None:
    takes = any("-o" in o.opts for o in _options(COMMANDS[name]))
    assert takes == (name not in NO_DATA), f"{name}: {'drop' if takes else 'add'} -o/--output"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_path_to_write_is_dash_dash_out(name: str) -> None:
    for option in _options(COMMANDS[name]):
        names = set(option.opts) | set(option.secondary_opts)
        if "--out" in names:
            assert names == {"--out"} and _type(option) is Path, f"{name}: --out PATH, no short form"
        elif _writes(option):
            assert names & NAMED_WRITES, f"{name}: {sorted(names)} writes a file; call it --out"


def test_history_export_and_spec_schema_write_to_dash_dash_out(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert {"--out"} <= {o for p in _options(COMMANDS["history export"]) for o in p.opts}
    assert {"--out", "-o"} <= {o for p in _options(COMMANDS["spec schema"]) for o in p.opts}
    assert main(["spec", "schema", "-o", str(tmp_path / "x.json")]) == 2  # a file is not a format
    assert "-o" in capsys.readouterr().err
