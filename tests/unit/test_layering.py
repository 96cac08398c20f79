"""The layers of cuberay/platform hold: spec -> policy -> sim | control -> top; no import circles anywhere.

Two checks, both able to fail (the synthetic-tree tests at the bottom prove it):

- a static import graph of the whole package, read from every import statement
  at any depth (function-level and ``TYPE_CHECKING`` imports count), which finds
  circles and imports that point up or sideways between layers;
- a fresh interpreter per pure layer that imports all its modules and reports
  whether Ray, Kubernetes or SQLAlchemy came in with them (directly or through
  ``cuberay/__init__.py``).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PLATFORM = "cuberay.platform"
# Rank of each layer; a module may import only modules of its own layer or of a lower rank.
# sim and control are siblings: neither imports the other.
LAYERS = {"spec": 0, "policy": 1, "api": 2, "sim": 3, "control": 3}
TOP = 4  # client, runner, demo, cli, and everything else in the package
BASE = {"cuberay.errors": -1}  # the error hierarchy sits below every layer
PURE = ("spec", "policy", "api", "sim")
HEAVY = frozenset({"ray", "kubernetes", "sqlalchemy"})


def module_files(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for path in (root / package.replace(".", "/")).rglob("*.py"):
        rel = path.relative_to(root).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def packages_of(root: Path, package: str) -> frozenset[str]:
    return frozenset(m for m, path in module_files(root, package).items() if path.name == "__init__.py")


def import_graph(root: Path, package: str) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Edges between the package's modules and the external top-level packages each one imports."""
    files = module_files(root, package)

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in files}
    external: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                    base = ".".join(parts + ([base] if base else []))
                # `from pkg import sub` runs pkg/__init__.py too: an edge to the submodule (if it is one) and to pkg.
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in files)]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == package.split(".")[0]:
                    resolved = resolve(target)
                    if resolved and resolved != module:
                        edges[module].add(resolved)
                else:
                    external[module].add(target.split(".")[0])
    return edges, external


def circles(edges: dict[str, set[str]], packages: frozenset[str] = frozenset()) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan); ``packages`` are the modules that are __init__s."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            # Packages whose __init__ re-exports their own modules make parent<->child pairs; a circle made only of
            # packages is no circle. One that runs through a plain module is (e.g. a module of a package importing
            # `from <its package> import x` while the package's __init__ imports that module).
            if len(comp) > 1 and not all(x in packages for x in comp):
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in edges:
        if v not in index:
            visit(v)
    return found


def layer_of(module: str, platform: str = PLATFORM) -> tuple[str, int]:
    if module in BASE:
        return "base", BASE[module]
    if module.startswith(platform + "."):
        name = module[len(platform) + 1:].split(".")[0]
        if name in LAYERS:
            return name, LAYERS[name]
    return "top", TOP


def layering_problems(edges: dict[str, set[str]], external: dict[str, set[str]],
                      platform: str = PLATFORM) -> list[str]:
    problems = []
    for module, targets in sorted(edges.items()):
        layer, rank = layer_of(module, platform)
        for target in sorted(targets):
            if module.startswith(target + "."):
                continue  # its own package's __init__ (run on any import of the module)
            other, other_rank = layer_of(target, platform)
            if other != layer and other_rank >= rank:
                problems.append(f"{module} ({layer}) imports {target} ({other})")
        if layer in PURE and external[module] & HEAVY:
            problems.append(f"{module} ({layer}) imports {sorted(external[module] & HEAVY)}")
    return problems


# ---------------------------------------------------------------- the real package

def test_no_import_circles() -> None:
    edges, _ = import_graph(REPO_ROOT, "cuberay")
    found = circles(edges, packages_of(REPO_ROOT, "cuberay"))
    assert not found, (
        f"import circles: {found}. Rule: no module imports, at any depth, a module that imports it back. "
        "Fix: move the shared name down to the lower module, or pass it in as an argument.")


def test_layers_import_only_downwards() -> None:
    edges, external = import_graph(REPO_ROOT, "cuberay")
    problems = layering_problems(edges, external)
    assert not problems, (
        "layering broken:\n  " + "\n  ".join(problems) + "\nRule: spec <- policy <- sim | control <- client/runner/"
        "cli; spec, policy and sim import no Ray, Kubernetes or SQLAlchemy. Fix: move the code to the layer it "
        "belongs to (Ray and database code into platform/control/, Kubernetes into cuberay/kuberay/).")


def test_every_platform_module_is_in_a_layer_or_top() -> None:
    """New modules land in a layer folder; only the Python API, the driver and the demo sit at the top."""
    loose = sorted(p.name for p in (REPO_ROOT / "cuberay" / "platform").glob("*.py"))
    assert loose == ["__init__.py", "client.py", "demo.py", "runner.py"], loose


PROBE = (
    "import importlib, sys\n"
    "for name in sys.argv[1:]: importlib.import_module(name)\n"
    "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'kubernetes', 'sqlalchemy'}))"
)


def _probe(modules: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", PROBE, *modules], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("layer", PURE)
def test_pure_layer_loads_no_ray_kubernetes_or_database(layer: str) -> None:
    modules = sorted(m for m in module_files(REPO_ROOT, "cuberay") if m.startswith(f"{PLATFORM}.{layer}"))
    assert len(modules) >= 3, f"layer {layer} has no modules: {modules}"
    result = _probe(modules)
    assert result.returncode == 0, f"importing the {layer} layer failed:\n{result.stderr}"
    heavy = result.stdout.strip().splitlines()[-1]
    assert heavy == "[]", f"importing platform/{layer}/ also imported {heavy}; the pure layers never do"


# ---------------------------------------------------------------- the checks can fail

def test_probe_detects_ray() -> None:
    result = _probe(["ray"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "['ray']"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in {"pkg/__init__.py": "", "pkg/platform/__init__.py": "", **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_checker_finds_a_circle_through_a_type_checking_import(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "pkg/a.py": "from pkg.b import x\n",
        "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import y\n",
        "pkg/c.py": "def f():\n    from pkg import a\n",
    })
    edges, _ = import_graph(root, "pkg")
    assert circles(edges, packages_of(root, "pkg")) == [["pkg.a", "pkg.b"]]


def test_checker_finds_a_circle_through_a_package_init(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "pkg/sub/__init__.py": "from pkg.sub.jobs import J\n",
        "pkg/sub/jobs.py": "from pkg.sub.train import T\n",
        "pkg/sub/train.py": "from pkg.sub import helpers\n",
        "pkg/sub/helpers.py": "",
        "pkg/other/__init__.py": "from pkg.other.m import x\n",
        "pkg/other/m.py": "import pkg.other.n\n",
        "pkg/other/n.py": "",
    })
    edges, _ = import_graph(root, "pkg")
    assert circles(edges, packages_of(root, "pkg")) == [["pkg.sub", "pkg.sub.jobs", "pkg.sub.train"]]


def test_checker_finds_upward_and_heavy_imports(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "pkg/platform/spec/__init__.py": "",
        "pkg/platform/spec/m.py": "from pkg.platform.policy import p\n",
        "pkg/platform/policy/__init__.py": "",
        "pkg/platform/policy/p.py": "import ray\nfrom pkg.platform.spec import m\n",
        "pkg/platform/sim/__init__.py": "",
        "pkg/platform/sim/s.py": "def f():\n    from pkg.platform.control import c\n",
        "pkg/platform/control/__init__.py": "",
        "pkg/platform/control/c.py": "from pkg.platform import client\n",
        "pkg/platform/client.py": "from pkg.platform.control import c\n",
    })
    edges, external = import_graph(root, "pkg")
    assert layering_problems(edges, external, platform="pkg.platform") == [
        "pkg.platform.control.c (control) imports pkg.platform.client (top)",
        "pkg.platform.policy.p (policy) imports ['ray']",
        "pkg.platform.sim.s (sim) imports pkg.platform.control (control)",
        "pkg.platform.sim.s (sim) imports pkg.platform.control.c (control)",
        "pkg.platform.spec.m (spec) imports pkg.platform.policy (policy)",
        "pkg.platform.spec.m (spec) imports pkg.platform.policy.p (policy)",
    ]
