"""No code outside the kind adapters (cuberay/kinds/) and the spec layer (which defines the models) tests a job's
kind by name: it asks the registry (``kinds.of(job.kind).service``) instead, so a new kind is one package.

The scan reads every module's AST and reports, outside those two places:

- a comparison (``==``, ``!=``, ``in``, ``not in``, ``is``) with a kind name: a string constant, a tuple, list or
  set holding one, or a name bound to such a value; or with a kind's model class (``type(job) is Task``);
- ``isinstance`` / ``issubclass`` against a kind's model class;
- a ``match`` case on a kind name or model class;
- a dict keyed by kind names (a dispatch table by name).

The kind names and model classes are the registry's, so a kind added later is scanned for too. The synthetic
tree at the bottom shows each pattern found, and the allowed places left alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

from cuberay import kinds

REPO_ROOT = Path(__file__).resolve().parents[2]
ALLOWED = ("kinds", "platform/spec")  # under the package: the adapters, and the spec layer that defines the models


def _names_and_models() -> tuple[frozenset[str], frozenset[str]]:
    return frozenset(kinds.names()), frozenset(k.model.__name__ for k in kinds.registered())


def _aliases(tree: ast.AST, names: frozenset[str]) -> set[str]:
    """Names bound to a kind name, or to a tuple/list/set of kind names only (``KIND = "Task"``)."""
    def only_kinds(value: ast.AST) -> bool:
        if isinstance(value, ast.Constant):
            return value.value in names
        return isinstance(value, (ast.Tuple, ast.List, ast.Set)) and bool(value.elts) and all(
            isinstance(e, ast.Constant) and e.value in names for e in value.elts)

    out = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) and node.value is not None else []
        if targets and only_kinds(node.value):  # type: ignore[union-attr]
            out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return out


def _kind_in(node: ast.AST, names: frozenset[str], models: frozenset[str], aliases: set[str]) -> str | None:
    """The kind name or model class ``node`` stands for, if it stands for one."""
    if isinstance(node, ast.Constant) and node.value in names:
        return repr(node.value)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return next((found for e in node.elts if (found := _kind_in(e, names, models, aliases))), None)
    if isinstance(node, ast.Name) and (node.id in aliases or node.id in models):
        return node.id
    if isinstance(node, ast.Attribute) and node.attr in models:
        return node.attr
    return None


def kind_name_tests(root: Path, package: str = "cuberay") -> list[str]:
    """``file:line: what`` for each test of a kind by name outside the allowed places."""
    names, models = _names_and_models()
    base = root / package
    allowed = tuple(base / a for a in ALLOWED)
    found = []
    for path in sorted(base.rglob("*.py")):
        if any(path.is_relative_to(a) for a in allowed):
            continue
        tree = ast.parse(path.read_text())
        aliases = _aliases(tree, names)
        hits: list[tuple[int, str]] = []
        for node in ast.walk(tree):
            what = None
            if isinstance(node, ast.Compare):
                hit = next((k for side in [node.left, *node.comparators]
                            if (k := _kind_in(side, names, models, aliases))), None)
                what = hit and f"compares with {hit}"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
                hit = _kind_in(node.args[1], frozenset(), models, set())
                what = hit and f"{node.func.id}(..., {hit})"
            elif isinstance(node, ast.match_case):
                pattern = node.pattern
                hit = _kind_in(pattern.value, names, models, aliases) if isinstance(pattern, ast.MatchValue) else \
                    _kind_in(pattern.cls, names, models, aliases) if isinstance(pattern, ast.MatchClass) else None
                what = hit and f"matches {hit}"
            elif isinstance(node, ast.Dict):
                hit = next((k for key in node.keys if key is not None
                            and (k := _kind_in(key, names, frozenset(), set()))), None)
                what = hit and f"a dict keyed by {hit}"
            if what:
                hits.append((getattr(node, "lineno", None) or node.pattern.lineno, what))  # type: ignore[attr-defined]
        found += [f"{path.relative_to(root)}:{line}: {what}" for line, what in sorted(hits)]
    return found


def test_no_code_outside_the_adapters_and_the_spec_tests_a_kind_by_name() -> None:
    found = kind_name_tests(REPO_ROOT)
    assert not found, (
        "kind names tested outside the kind adapters:\n  " + "\n  ".join(found) + "\nRule: only a kind's adapter "
        "(cuberay/kinds/<kind>/) and the spec layer know a kind by name; everything else asks the registry. Fix: "
        "add the fact to JobKind (cuberay/kinds/registry.py), answer it in each adapter, and ask "
        "kinds.of(job.kind) for it.")


# ---------------------------------------------------------------- the scan can fail

BROKEN = '''\
from pkg.platform.spec import ServeApp, TrainJob
import pkg.platform.spec as spec

SERVICES = ("ServeApp",)
KIND: str = "TuneJob"


def f(job, rec, kind):
    a = job.kind == "ServeApp"
    b = rec.kind != "Task"
    c = kind in ("TrainJob", "Task")
    d = "TuneJob" == kind
    e = rec.kind in SERVICES
    g = kind is KIND
    h = isinstance(job, TrainJob)
    i = isinstance(job, (spec.Task, int))
    j = type(job) is ServeApp
    k = {"TrainJob": 1, "other": 2}[kind]
    match kind:
        case "Task":
            pass
    match job:
        case TrainJob():
            pass
    # None of these tests a kind by name:
    message = f"a {job.kind} job, not a TrainJob"
    document = {"kind": "TuneJob", "apiVersion": "v1"}
    same = rec.kind == job.kind and kind in kinds_of_the_registry
    return a, b, c, d, e, g, h, i, j, k, message, document, same
'''


def test_the_scan_finds_every_pattern_and_leaves_the_adapters_and_the_spec_alone(tmp_path: Path) -> None:
    for name in ("pkg/platform/control/convert.py", "pkg/kinds/toy/__init__.py", "pkg/platform/spec/jobs.py"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(BROKEN)
    where = "pkg/platform/control/convert.py"
    assert kind_name_tests(tmp_path, "pkg") == [
        f"{where}:9: compares with 'ServeApp'",
        f"{where}:10: compares with 'Task'",
        f"{where}:11: compares with 'TrainJob'",
        f"{where}:12: compares with 'TuneJob'",
        f"{where}:13: compares with SERVICES",
        f"{where}:14: compares with KIND",
        f"{where}:15: isinstance(..., TrainJob)",
        f"{where}:16: isinstance(..., Task)",
        f"{where}:17: compares with ServeApp",
        f"{where}:18: a dict keyed by 'TrainJob'",
        f"{where}:20: matches 'Task'",
        f"{where}:23: matches TrainJob",
    ]
