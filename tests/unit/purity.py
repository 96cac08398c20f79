"""No file or network I/O in the pure layers, beyond reading the files they are handed.

Two checks, used by tests/unit/test_layering.py:

- ``io_calls`` reads each module's source (AST) for calls and imports that touch files, the network or other
  processes, at any depth, so call time counts as well as import time; ``READS_HANDED`` names the few functions
  whose job is to read (or write) a file their caller hands them;
- ``PROBE`` imports modules in a fresh interpreter with the file, socket and process calls wrapped, and lists
  each call that came from a pure module's own code while it was imported.

Both see only what the code names: a pure module that hands a path to a library that opens it is read as pure.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.layering import layer_of

# Modules whose import alone means files, sockets or processes.
IO_MODULES = frozenset({"socket", "ssl", "subprocess", "multiprocessing", "asyncio", "selectors", "select",
                        "urllib", "http", "requests", "httpx", "aiohttp", "ftplib", "smtplib", "webbrowser",
                        "shutil", "tempfile", "glob", "sqlite3", "mmap", "fcntl"})
# Methods of pathlib.Path (and a chart's savefig) that touch the file system. `resolve` counts only when called
# with no argument (Path.resolve()); with one it is the spec's own Placement.resolve(req).
PATH_METHODS = frozenset({"open", "read_text", "read_bytes", "write_text", "write_bytes", "touch", "mkdir",
                          "rmdir", "unlink", "rename", "exists", "is_file", "is_dir", "is_symlink", "iterdir",
                          "glob", "rglob", "stat", "lstat", "chmod", "samefile", "symlink_to", "hardlink_to",
                          "readlink", "savefig"})
# Functions of os, os.path, io and time that do.
FUNCTIONS = frozenset({
    *(f"os.{f}" for f in ("open", "remove", "unlink", "rename", "replace", "mkdir", "makedirs", "rmdir",
                          "removedirs", "listdir", "scandir", "walk", "stat", "lstat", "chmod", "chown", "symlink",
                          "link", "truncate", "utime", "access", "system", "popen", "fork", "kill", "chdir",
                          "getcwd", "execv", "execvp", "spawnv")),
    *(f"os.path.{f}" for f in ("exists", "lexists", "isfile", "isdir", "islink", "getsize", "getmtime",
                               "getatime", "getctime", "realpath", "samefile")),
    "io.open", "open", "time.sleep",
})

# The functions of the pure layers that touch a file, each because its caller hands it that file: (module, function
# as Class.method or function): why.
READS_HANDED: dict[tuple[str, str], str] = {
    ("platform.spec.documents", "_read_bounded"):
        "reads the spec file read_documents(path) is handed, refusing one over MAX_SPEC_BYTES before reading it all",
    ("platform.spec.deepspeed", "read"):
        "reads the ds_config.json a TrainJob's `deepspeed:` names by path",
    ("platform.spec.tune", "TuneSpec._space_file"):
        "reads the search-space file a TuneJob's `search_space:` names, beside the spec file",
    ("platform.spec.tune", "TuneSpec._code_dir"):
        "Path.resolve() of the `code_dir:` beside the spec file, which it stores absolute (follows symlinks only)",
    ("platform.spec.pipeline", "_inline_files"):
        "checks and reads the job spec files a pipeline's steps name (`file:`), beside the pipeline file",
    ("platform.sim.trace", "load_philly"): "reads the Philly trace file it is handed",
    ("platform.sim.trace", "load_generic"): "reads the CSV trace file it is handed",
    ("platform.sim.inputs", "_header"): "reads the header of the trace file it is handed, to tell its format",
    ("platform.sim.inputs", "first_philly_submission"): "reads the Philly trace file it is handed",
    ("platform.sim.plot", "plot_reports"):
        "writes the chart to the path it is handed (`cuberay sim --plot PATH`): the one write, the caller's own file",
}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def io_calls(path: Path) -> list[tuple[str, int, str]]:
    """(function as Class.method, or "" at module level; line; what) for each I/O the module's source names."""
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, f"{where}.{child.name}" if where else child.name)
                continue
            what = _io_of(child)
            if what:
                found.append((where, child.lineno, what))
            visit(child, where)

    visit(ast.parse(path.read_text()), "")
    return found


def _io_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import):
        hit = [a.name for a in node.names if a.name.split(".")[0] in IO_MODULES]
        return f"import {', '.join(hit)}" if hit else None
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        if node.module.split(".")[0] in IO_MODULES:
            return f"from {node.module} import ..."
        hit = [a.name for a in node.names if f"{node.module}.{a.name}" in FUNCTIONS]
        return f"from {node.module} import {', '.join(hit)}" if hit else None
    if not isinstance(node, ast.Call):
        return None
    name = _dotted(node.func)
    if name in FUNCTIONS:
        return f"{name}()"
    if isinstance(node.func, ast.Attribute) and not (name and name.split(".")[0] in ("os", "io", "time")):
        attr = node.func.attr
        if attr in PATH_METHODS or (attr == "resolve" and not node.args):
            return f".{attr}()"
    return None


def pure_files(files: dict[str, Path], package: str, pure: tuple[str, ...]) -> dict[str, Path]:
    """The modules of ``files`` that belong to a pure layer."""
    return {m: path for m, path in files.items() if (layer_of(m, package) or ("",))[0] in pure}


def io_problems(root: Path, files: dict[str, Path], package: str, pure: tuple[str, ...],
                allowed: dict[tuple[str, str], str] | None = None) -> tuple[list[str], set[tuple[str, str]]]:
    """(each I/O outside ``allowed``, the allowed entries that were used) over the modules of the pure layers."""
    allowed = READS_HANDED if allowed is None else allowed
    problems, used = [], set()
    for module, path in sorted(pure_files(files, package, pure).items()):
        rel = module[len(package) + 1:]
        for where, line, what in io_calls(path):
            if (rel, where) in allowed:
                used.add((rel, where))
            else:
                problems.append(f"{path.relative_to(root)}:{line} {where or '<module>'}: {what}")
    return problems, used


# argv[1]: the files whose code must do no I/O while imported; argv[2:]: the modules to import. Prints one
# JSON line: {"heavy": Ray/Kubernetes/SQLAlchemy modules loaded, "io": [file:line: call] from those files}.
PROBE = r'''
import builtins, importlib, io, json, os, pathlib, socket, subprocess, sys, sysconfig, time
pure = frozenset(os.path.realpath(f) for f in sys.argv[1].split(os.pathsep))
paths = sysconfig.get_paths()
lib = tuple(os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib"))
site = tuple(os.path.realpath(paths[k]) + os.sep for k in ("purelib", "platlib"))
seen = []

def in_stdlib(file):
    file = os.path.realpath(file)
    return file.startswith(lib) and not file.startswith(site)

def origin():
    f = sys._getframe(2)
    while f is not None and (f.f_code.co_filename.startswith("<") or in_stdlib(f.f_code.co_filename)):
        f = f.f_back  # the standard library on the way (pathlib -> io.open): the caller is further out
    return f

inside = []  # a wrapped call under way: the calls it makes (Path.read_text -> Path.open -> io.open) are its own

def wrap(owner, name):
    real = getattr(owner, name)
    def wrapper(*args, **kwargs):
        if inside:
            return real(*args, **kwargs)
        f = origin()
        if f is not None and os.path.realpath(f.f_code.co_filename) in pure:
            seen.append(f"{f.f_code.co_filename}:{f.f_lineno}: {getattr(owner, '__name__', owner)}.{name}")
        inside.append(name)
        try:
            return real(*args, **kwargs)
        finally:
            inside.pop()
    setattr(owner, name, wrapper)

for owner, names in ((builtins, ["open"]), (io, ["open"]), (time, ["sleep"]),
                     (os, ["open", "listdir", "scandir", "stat", "remove", "unlink", "rename", "replace", "mkdir",
                           "makedirs", "system", "popen"]),
                     (pathlib.Path, ["open", "read_text", "read_bytes", "write_text", "write_bytes", "exists",
                                     "is_file", "is_dir", "iterdir", "glob", "mkdir", "unlink", "touch", "stat"]),
                     (socket, ["create_connection", "getaddrinfo"]), (socket.socket, ["__init__"]),
                     (subprocess.Popen, ["__init__"])):
    for name in names:
        wrap(owner, name)
for name in sys.argv[2:]:
    importlib.import_module(name)
heavy = sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'kubernetes', 'sqlalchemy'})
print(json.dumps({"heavy": heavy, "io": seen}))
'''
