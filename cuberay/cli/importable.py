"""Does a spec's code exist here? The import check of ``cuberay spec validate``.

A job names its code by import path (``entrypoint: pkg.module:train_func``,
``import_path: pkg.module:app``); the spec model checks the shape only, so a
typo would be found by the job's driver, after the job waited in the queue and
held its quota. This check finds the module with ``importlib.util.find_spec``
(which imports the parent packages, not the module itself) and looks for the
attribute among the module's top-level definitions by reading its source, so
the module's own imports (torch, Ray) never run. A module that builds its names
at run time (a star import, a module ``__getattr__``) is given the benefit of
the doubt for the attribute.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Collection, Iterator, Mapping

from cuberay import kinds


def import_paths(spec: Any, fields: Collection[str] | None = None, path: str = "") -> Iterator[tuple[str, str]]:
    """(field path, import path) for every import-path field in a job spec dict, e.g. ("spec.versions[0].import_path", ...).

    ``fields`` are the names of the fields that hold import paths (its kind's ``import_fields``); by default
    those of every registered kind.
    """
    if fields is None:
        fields = {name for kind in kinds.registered() for name in kind.import_fields}
    if isinstance(spec, Mapping):
        for key, value in spec.items():
            where = f"{path}.{key}" if path else str(key)
            if key in fields and isinstance(value, str) and ":" in value:
                file, _, name = value.rpartition(":")
                if file.endswith(".py") and spec.get("code_dir"):  # a TuneJob's "trial.py:main"
                    value = f"{Path(str(spec['code_dir'])) / file}:{name}"
                yield where, value
            else:
                yield from import_paths(value, fields, where)
    elif isinstance(spec, (list, tuple)):
        for i, item in enumerate(spec):
            yield from import_paths(item, fields, f"{path}[{i}]")


def import_problem(target: str) -> str | None:
    """Why ``module:attribute`` cannot be imported here, or None if it can (as far as a static look tells)."""
    module, _, attribute = target.rpartition(":")
    if module.endswith(".py"):  # a file, as ``python trial.py`` runs it
        if not Path(module).is_file():
            return f"file {module!r} does not exist"
        names = _top_level_names(module)
        if names is not None and attribute.split(".")[0] not in names:
            return f"file {module!r} defines no {attribute.split('.')[0]!r} at its top level"
        return None
    try:
        with _cwd_on_path():
            found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:  # a parent package is missing or broken
        return f"module {module!r} cannot be found ({type(exc).__name__}: {exc})"
    if found is None:
        return f"module {module!r} cannot be found on this Python's path or in the current directory"
    names = _top_level_names(found.origin)
    if names is not None and attribute.split(".")[0] not in names:
        return f"module {module!r} ({found.origin}) defines no {attribute.split('.')[0]!r} at its top level"
    return None


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    """Look in the current directory too, as ``python -m`` and a driver started there would."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added:
            sys.path.remove(cwd)


def _top_level_names(origin: str | None) -> set[str] | None:
    """Names a module's source binds at its top level; None when that cannot be known without running it."""
    if not origin or not origin.endswith(".py"):
        return None  # a namespace package or a compiled module: trust find_spec
    try:
        tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    names: set[str] = set()
    for node in tree.body:
        names |= _bound(node)
    if "*" in names or "__getattr__" in names:
        return None
    return names


def _bound(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, (ast.If, ast.Try, ast.With)):  # names bound on either branch count
        inner = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                 *(h for handler in getattr(node, "handlers", []) for h in handler.body)]
        return set().union(*(_bound(n) for n in inner)) if inner else set()
    return set()
