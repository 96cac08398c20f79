"""User-facing text speaks of the product, never of its work plan (issues, later versions, TODOs)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "cuberay"
# Words that describe the project's plans rather than the product. "later" alone is fine ("a later
# band", "later attempts"); "a later issue", "not supported yet" are not.
PLAN_WORDS = re.compile(r"\b(issue|TODO|FIXME|XXX)\b|\b(a )?later (issue|version|release|change)\b|"
                        r"\bnot (supported|implemented|available)( by [\w ]+)? yet\b|\bcoming soon\b", re.I)


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string literal that is not a docstring (messages, help texts, f-string parts)."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_user_facing_string_mentions_the_work_plan() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, text in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            if PLAN_WORDS.search(text):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}")
    assert not found, "\n".join(found)


def test_the_pattern_catches_the_old_runner_message() -> None:
    assert PLAN_WORDS.search("TuneJob jobs are not supported by the runner yet (a later issue); nothing was run")
    assert not PLAN_WORDS.search("Victims are ordered lowest priority, later band")
