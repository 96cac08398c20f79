"""The import rules of cuberay, read from its source: the graph, the rank of every package, what breaks them.

Used by tests/unit/test_layering.py on the real package and on synthetic trees (which is how each rule is shown
able to fail). Names in ``LAYERS`` and ``ALLOWED`` are relative to the root package, so a synthetic ``pkg`` gets
the same ranks as ``cuberay``.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

# Every module belongs to the layer of its longest matching name; a "*" in a name stands for any one package
# (kinds.*.driver: the driver module of every kind's adapter). A module imports only its own layer and layers
# of a lower rank; layers of one rank are siblings and import nothing of each other.
LAYERS: dict[str, tuple[int, tuple[str, ...]]] = {
    "base": (0, ("errors", "platform", "home")),     # the error root; cuberay's home; platform/__init__ is empty
    "spec": (1, ("platform.spec",)),
    "policy": (2, ("platform.policy",)),
    "api": (3, ("platform.api",)),                    # callers, access rules, the controller's methods
    "kinds": (3, ("kinds",)),                         # the registry, and each kind's facts: what control/ asks
    "sim": (4, ("platform.sim",)),
    "control": (4, ("platform.control",)),
    "transport": (5, ("platform.transport",)),        # how the client reaches the controller and reads it in pages
    "runtime": (5, ("runtime",)),                     # what runs users' code: processes, env, small jobs
    "console": (6, ("console",)),                     # the HTTP API server on the head: a client of the controller
    "client": (7, ("platform.client",)),
    # Workloads: what a job runs, and the small APIs a pipeline step's code calls.
    "train": (8, ("train",)),
    "tune": (8, ("tune",)),
    "serve": (8, ("serve",)),
    "outputs": (8, ("outputs",)),
    "pipelines": (8, ("pipelines",)),
    "examples": (9, ("examples",)),                   # programs written against the workloads' APIs
    "driver": (10, ("platform.runner", "run", "kinds.*.driver")),  # `python -m cuberay.run <job-id>`, and the
    #                                                   run(job, ctx) of each kind, which the runner loads by name
    "kuberay": (10, ("kuberay",)),                     # renders the workloads for Kubernetes; the CLI calls it
    "demo": (10, ("platform.demo",)),
    "cli": (11, ("cli",)),
    "facade": (12, ("", "__main__")),                 # `import cuberay`, `python -m cuberay`
}
# Names that stand for the package's __init__ alone, not for what lies under it.
WHOLE = frozenset({"", "platform"})
PURE = ("spec", "policy", "api", "sim", "kinds")
HEAVY = frozenset({"ray", "kubernetes", "sqlalchemy"})
KUBERNETES_LAYER = "kuberay"  # the only layer that may import the kubernetes client
# What a job runs reaches the controller through the client (its calls ride out a restart and carry the caller),
# never by importing the controller's own layer.
WORKLOADS = frozenset({"train", "tune", "serve", "outputs", "pipelines", "examples"})
NOT_FROM_WORKLOADS = frozenset({"control"})

# Imports of today's code that break the ranks above, accepted on purpose (importer, imported): why.
ALLOWED: dict[tuple[str, str], str] = {
    ("kuberay.labels", ""):
        "reads cuberay.__version__ for the default image tag; the facade defines it without importing anything "
        "(its names load on first use), so this pulls in no client.",
}


@dataclass(frozen=True)
class Graph:
    """What each module of one package imports, from its import statements at any depth."""

    package: str
    files: dict[str, Path]
    edges: dict[str, set[str]]     # modules of the package it names: `import x.y`, `from x import name`, import_module
    through: dict[str, set[str]]   # packages it reaches only as the parent of submodules (`from pkg import sub`)
    external: dict[str, set[str]]  # top-level names of other packages it imports

    @property
    def packages(self) -> frozenset[str]:
        return frozenset(m for m, path in self.files.items() if path.name == "__init__.py")

    def ancestors(self, module: str) -> list[str]:
        """The packages above ``module`` whose __init__ Python runs before it."""
        parts = module.split(".")
        return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in self.files]


def module_files(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for path in (root / package.replace(".", "/")).rglob("*.py"):
        rel = path.relative_to(root).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def _dynamic_import(node: ast.Call) -> tuple[str, str | None] | None:
    """(name, package argument) of ``importlib.import_module("x")`` / ``import_module`` / ``__import__("x")``."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None  # a name computed at run time: nothing to read here
    package = node.args[1] if name == "import_module" and len(node.args) > 1 else next(
        (k.value for k in node.keywords if k.arg == "package"), None)
    if isinstance(package, ast.Constant) and isinstance(package.value, str):
        return first.value, package.value
    return first.value, "" if package is not None else None  # "": the calling module's own package


def import_graph(root: Path, package: str) -> Graph:
    files = module_files(root, package)
    top = package.split(".")[0]

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in files}
    through: dict[str, set[str]] = {m: set() for m in files}
    external: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        own_package = module if path.name == "__init__.py" else module.rpartition(".")[0]

        def relative(level: int, name: str, anchor: str = own_package) -> str:
            parts = anchor.split(".")
            parts = parts[: len(parts) - level + 1]
            return ".".join(parts + ([name] if name else []))

        for node in ast.walk(ast.parse(path.read_text())):
            named: list[str] = []   # what the statement imports by name
            parents: list[str] = []  # packages it passes through to reach a submodule
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = relative(node.level, node.module or "") if node.level else node.module or ""
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in files]
                named = subs + ([base] if len(subs) < len(node.names) else [])  # a name of base's __init__
                parents = [base] if subs else []
            elif isinstance(node, ast.Call) and (dynamic := _dynamic_import(node)):
                name, anchor = dynamic
                if name.startswith("."):  # relative to the package argument (None: Python refuses the call)
                    level = len(name) - len(name.lstrip("."))
                    name = relative(level, name.lstrip("."), anchor or own_package) if anchor is not None else ""
                named = [name] if name else []
            for target in named:
                if target.split(".")[0] != top:
                    external[module].add(target.split(".")[0])
                elif (resolved := resolve(target)) and resolved != module:
                    edges[module].add(resolved)
            for target in parents:
                if (resolved := resolve(target)) and resolved != module and resolved not in edges[module]:
                    through[module].add(resolved)
    return Graph(package, files, edges, through, external)


def circles(graph: Graph) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan) over every import, ``from pkg import sub`` too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    packages = graph.packages

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.edges[v] | graph.through[v]:
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
    for v in graph.edges:
        if v not in index:
            visit(v)
    return found


def _relative(module: str, package: str) -> str:
    return "" if module == package else module[len(package) + 1:]


def _names(rel: str, name: str) -> bool:
    """Whether the LAYERS name ``name`` covers the module ``rel``: it, or what lies under it; "*" is any package."""
    if name in WHOLE:
        return rel == name
    parts, wanted = rel.split("."), name.split(".")
    return len(parts) >= len(wanted) and all(w in ("*", p) for w, p in zip(wanted, parts))


def layer_of(module: str, package: str) -> tuple[str, int] | None:
    """(layer, rank) of ``module``, or None if no entry of ``LAYERS`` names it."""
    rel = _relative(module, package)
    best: tuple[int, str, int] | None = None
    for layer, (rank, names) in LAYERS.items():
        for name in names:
            if _names(rel, name) and (best is None or len(name) > best[0]):
                best = (len(name), layer, rank)
    return (best[1], best[2]) if best else None


def unranked(graph: Graph) -> list[str]:
    return sorted(m for m in graph.files if layer_of(m, graph.package) is None)


def _runs(graph: Graph, package: str) -> tuple[set[str], set[str]]:
    """What Python runs for ``package``'s __init__: (the modules it names, every module it runs).

    A package passed on the way (an ancestor, or ``pkg`` of ``from pkg import sub``) runs its __init__ but is not
    itself imported by name, so what that __init__ names is named here too. Beyond the first names each import is
    checked where it is made, so those are enough for the ranks; the modules run, all of them, are for Ray.
    """
    def passed(m: str) -> set[str]:
        return graph.through[m] | set(graph.ancestors(m))

    named: set[str] = set()
    seen, todo = {package}, [package]
    while todo:  # the package and the packages it passes through: their names are its own
        m = todo.pop()
        named |= graph.edges[m]
        todo += [n for n in passed(m) if n not in seen]
        seen |= passed(m)
    ran, todo = set(seen), list(seen)
    while todo:
        m = todo.pop()
        todo += [n for n in graph.edges[m] | passed(m) if n not in ran]
        ran |= graph.edges[m] | passed(m)
    return named - {package}, ran


class _Check:
    """The rules applied to one graph; ``allowed`` holds pairs of names relative to the package."""

    def __init__(self, graph: Graph, allowed: dict[tuple[str, str], str]) -> None:
        self.graph, self.allowed, self.pkg = graph, allowed, graph.package
        self.runs: dict[str, tuple[set[str], set[str]]] = {}

    def layer(self, module: str) -> tuple[str, int]:
        return layer_of(module, self.pkg) or ("?", -1)

    def breaks(self, module: str, target: str) -> str | None:
        (layer, rank), (other, other_rank) = self.layer(module), self.layer(target)
        if other == layer or other_rank < rank or (_relative(module, self.pkg), _relative(target, self.pkg)) in \
                self.allowed:
            return None
        return f"{module} ({layer}) imports {target} ({other})"

    def through_inits(self, module: str) -> list[str]:
        """`import pkg.a.b` and `from pkg import a` run pkg/__init__.py first: what it imports comes in here too.

        Each import once, named with the outermost package it came through; Ray and friends once per module."""
        g, layer = self.graph, self.layer(module)[0]
        problems, reported, heavy_told = [], set(g.edges[module]), False
        for parent in sorted(set(g.ancestors(module)) | g.through[module], key=lambda p: (len(p), p)):
            named, ran = self.runs.setdefault(parent, _runs(g, parent))
            for target in sorted(named - reported - {module}):
                reported.add(target)
                if problem := self.breaks(module, target):
                    problems.append(f"{problem} through {parent}'s __init__")
            heavy = {m: g.external[m] & HEAVY for m in sorted(ran - {module}) if g.external[m] & HEAVY}
            if layer in PURE and heavy and not heavy_told:
                heavy_told = True
                problems.append(f"{module} ({layer}) imports {sorted(set().union(*heavy.values()))} through "
                                f"{parent}'s __init__ (in {', '.join(heavy)})")
        return problems

    def of(self, module: str) -> list[str]:
        g, layer = self.graph, self.layer(module)[0]
        problems = [p for t in sorted(g.edges[module]) if (p := self.breaks(module, t))]
        problems += self.through_inits(module)
        if layer in PURE and g.external[module] & HEAVY:
            problems.append(f"{module} ({layer}) imports {sorted(g.external[module] & HEAVY)}")
        if layer != KUBERNETES_LAYER and "kubernetes" in g.external[module]:
            problems.append(f"{module} ({layer}) imports kubernetes")
        if layer in WORKLOADS:
            problems += [f"{module} ({layer}) imports {t} (control): a workload calls the controller through the "
                         f"client" for t in sorted(g.edges[module]) if self.layer(t)[0] in NOT_FROM_WORKLOADS]
        return problems


def layering_problems(graph: Graph, allowed: dict[tuple[str, str], str] | None = None) -> list[str]:
    """Each import that points up or sideways, pulls Ray/Kubernetes/SQLAlchemy into a pure layer, or Kubernetes
    outside kuberay/; ``allowed`` defaults to ``ALLOWED``."""
    check = _Check(graph, ALLOWED if allowed is None else allowed)
    return [p for module in sorted(graph.files) for p in check.of(module)]
