"""The commands of the README's shell blocks, as a reader would type them, with the marks the README gives them.

A command is one line of a ```bash block (lines ending in a backslash joined with the next), its comment kept
for the marks. Marks are words in a command's comment, visible to readers:

- ``needs Kubernetes`` / ``needs a GPU``: the command is left out where neither runs (this test machine);
- ``exits N``: the command is expected to exit with N (a refusal the README shows on purpose).

``make demo`` and ``make test`` are left out too: CI runs the one and the examples test the other's work.
tests/integration/test_readme.py runs the rest in order; tests/unit/test_readme_commands.py checks this parser.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^\s*```(\w*)\s*$")
NEEDS = re.compile(r"\bneeds (Kubernetes|a GPU)\b")
EXITS = re.compile(r"\bexits (\d)\b")
LEFT_OUT = ("make demo", "make test")


@dataclass(frozen=True)
class Command:
    """One README command: the text bash runs, the README line it starts on, and what its marks say."""

    text: str          # the command without its comment
    comment: str       # the comment after it ('' if none)
    line: int          # 1-based line in the README
    needs: str | None  # "Kubernetes" or "a GPU" if marked so
    exits: int         # the exit code the README expects

    @property
    def runs_here(self) -> bool:
        return self.needs is None and not self.text.startswith(LEFT_OUT)


def commands(text: str) -> list[Command]:
    """Every command of every ```bash block of ``text``, in order."""
    out: list[Command] = []
    lang: str | None = None
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        fence = FENCE.match(raw)
        if fence:
            lang = (fence.group(1) or "text") if lang is None else None
            continue
        if lang != "bash":
            continue
        line = raw.strip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        full, pending = pending + line, ""
        if full and not full.startswith("#"):
            out.append(_command(full, start))
    return out


def _command(full: str, line: int) -> Command:
    code, comment = split_comment(full)
    needs = NEEDS.search(comment)
    exits = EXITS.search(comment)
    return Command(code, comment, line, needs.group(1) if needs else None, int(exits.group(1)) if exits else 0)


def split_comment(full: str) -> tuple[str, str]:
    """``full`` as (command, comment): the comment starts at the first ``#`` that bash would read as one."""
    for match in re.finditer(r"(?:^|\s)#", full):
        cut = match.start() if full[match.start()] == "#" else match.start() + 1
        if _balanced(full[:cut]):
            return full[:cut].rstrip(), full[cut + 1:].strip()
    return full.rstrip(), ""


def _balanced(prefix: str) -> bool:
    """Whether ``prefix`` ends outside any quote (a ``#`` inside quotes is text, not a comment)."""
    try:
        shlex.split(prefix)
    except ValueError:
        return False
    return True


def readme_commands(path: Path = README) -> list[Command]:
    return commands(path.read_text())
