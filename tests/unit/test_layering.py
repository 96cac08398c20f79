"""cuberay's layers hold: every package has a rank and imports only downwards; no import circles anywhere; the pure
layers (spec, policy, api, sim, and kinds: the registry with each kind's facts) import no Ray, Kubernetes or
SQLAlchemy and do no I/O beyond the files they are handed; only kuberay/ imports the kubernetes client.

The checks (tests/unit/layering.py, tests/unit/purity.py), each able to fail (the synthetic-tree tests at the
bottom prove it):

- a static import graph of the whole package, read from every import statement at any depth (function-level and
  ``TYPE_CHECKING`` imports count) and from ``importlib.import_module("x")`` / ``__import__("x")`` with a string,
  which finds circles and imports that point up or sideways between layers; a package's __init__ runs before any
  module under it, so what it imports counts for them too, and ``from cuberay import submit`` is an import of the
  facade;
- a static scan of the pure layers' source for file, network and process calls;
- a fresh interpreter per pure layer that imports all its modules with those calls wrapped, and reports whether
  Ray, Kubernetes or SQLAlchemy came in with them and whether their code touched a file while imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.layering import (
    ALLOWED,
    LAYERS,
    PURE,
    circles,
    import_graph,
    layer_of,
    layering_problems,
    module_files,
    unranked,
)
from tests.unit.purity import PROBE, READS_HANDED, io_problems, pure_files

REPO_ROOT = Path(__file__).resolve().parents[2]
GRAPH = import_graph(REPO_ROOT, "cuberay")  # read once: every test of the real package shares it


# ---------------------------------------------------------------- the real package

def test_no_import_circles() -> None:
    found = circles(GRAPH)
    assert not found, (
        f"import circles: {found}. Rule: no module imports, at any depth, a module that imports it back. "
        "Fix: move the shared name down to the lower module, or pass it in as an argument.")


def test_every_module_has_a_layer() -> None:
    loose = unranked(GRAPH)
    assert not loose, (f"{loose} belong to no layer. Rule: every package of cuberay has a rank "
                       "(tests/unit/layering.py, LAYERS). Fix: put the module in an existing package, or give its "
                       "new package a rank there.")


def test_layers_import_only_downwards() -> None:
    problems = layering_problems(GRAPH)
    ranks = " < ".join("|".join(n for n, (r, _) in LAYERS.items() if r == rank)
                       for rank in sorted({r for r, _ in LAYERS.values()}))
    shown = problems[:40] + ([f"... and {len(problems) - 40} more"] if len(problems) > 40 else [])
    assert not problems, (
        "layering broken:\n  " + "\n  ".join(shown) + f"\nRule: {ranks}; a layer imports only its own and lower "
        f"ranks; {', '.join(PURE)} import no Ray, Kubernetes or SQLAlchemy; only kuberay/ imports kubernetes. "
        "Fix: move the code to the layer it belongs to (Ray and database code into platform/control/, Kubernetes "
        "into cuberay/kuberay/), or pass the value in from above.")


def test_every_allowed_import_is_still_made_and_still_breaks_a_rank() -> None:
    """An entry the code no longer needs goes, so the list stays the exact set of known exceptions."""
    without = layering_problems(GRAPH, allowed={})
    for importer, imported in ALLOWED:
        module, target = f"cuberay.{importer}".rstrip("."), f"cuberay.{imported}".rstrip(".")
        assert any(p.startswith(f"{module} (") and f" imports {target} (" in p for p in without), (
            f"ALLOWED names {module} -> {target}, which no longer breaks a rank; remove the entry")


def test_every_platform_module_is_in_a_layer_folder_or_named_at_the_top() -> None:
    """New platform modules land in a layer folder; only the Python API, the driver and the demo sit beside them."""
    loose = sorted(p.name for p in (REPO_ROOT / "cuberay" / "platform").glob("*.py"))
    assert loose == ["__init__.py", "client.py", "demo.py", "runner.py"], loose


def test_pure_layers_do_no_io_beyond_the_files_they_are_handed() -> None:
    problems, used = io_problems(REPO_ROOT, GRAPH.files, "cuberay", PURE)
    assert not problems, (
        "file, network or process calls in a pure layer:\n  " + "\n  ".join(problems) + f"\nRule: {', '.join(PURE)} "
        "decide from what they are given; they read only a file their caller hands them. Fix: move the call "
        "to control/ or the caller and pass the data in, or, for a function whose job is to read the file it is "
        "handed, name it in READS_HANDED (tests/unit/purity.py) with why.")
    assert used == set(READS_HANDED), f"READS_HANDED entries no code needs any more: {set(READS_HANDED) - used}"


def _probe(modules: list[str], root: Path = REPO_ROOT, package: str = "cuberay") -> dict[str, list[str]]:
    pure = os.pathsep.join(str(p) for p in pure_files(module_files(root, package), package, PURE).values())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", PROBE, pure, *modules], cwd=root, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, f"importing {modules} failed:\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("layer", PURE)
def test_pure_layer_loads_no_ray_kubernetes_or_database_and_touches_no_file_on_import(layer: str) -> None:
    modules = sorted(m for m in GRAPH.files if (layer_of(m, "cuberay") or ("",))[0] == layer)
    assert len(modules) >= 3, f"layer {layer} has no modules: {modules}"
    seen = _probe(modules)
    assert seen["heavy"] == [], f"importing layer {layer} also imported {seen['heavy']}; the pure layers never do"
    assert seen["io"] == [], f"importing layer {layer} touched files or the network: {seen['io']}"


# ---------------------------------------------------------------- the checks can fail

def test_probe_detects_ray() -> None:
    assert _probe(["ray"])["heavy"] == ["ray"]


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in {"pkg/__init__.py": "", "pkg/platform/__init__.py": "", **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _problems(tmp_path: Path, files: dict[str, str], allowed: dict | None = None) -> list[str]:
    return layering_problems(import_graph(_tree(tmp_path, files), "pkg"), allowed={} if allowed is None else allowed)


def test_checker_finds_a_circle_through_a_type_checking_import(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "pkg/a.py": "from pkg.b import x\n",
        "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import y\n",
        "pkg/c.py": "def f():\n    from pkg import a\n",
    })
    assert circles(import_graph(root, "pkg")) == [["pkg.a", "pkg.b"]]


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
    assert circles(import_graph(root, "pkg")) == [["pkg.sub", "pkg.sub.jobs", "pkg.sub.train"]]


def test_checker_finds_upward_and_heavy_imports(tmp_path: Path) -> None:
    assert _problems(tmp_path, {
        "pkg/platform/spec/__init__.py": "",
        "pkg/platform/spec/m.py": "from pkg.platform.policy import p\n",
        "pkg/platform/policy/__init__.py": "",
        "pkg/platform/policy/p.py": "import ray\nfrom pkg.platform.spec import m\n",
        "pkg/platform/sim/__init__.py": "",
        "pkg/platform/sim/s.py": "def f():\n    from pkg.platform.control import c\n",
        "pkg/platform/control/__init__.py": "",
        "pkg/platform/control/c.py": "from pkg.platform import client\n",
        "pkg/platform/client.py": "from pkg.platform.control import c\n",
    }) == [
        "pkg.platform.control.c (control) imports pkg.platform.client (client)",
        "pkg.platform.policy.p (policy) imports ['ray']",
        "pkg.platform.sim.s (sim) imports pkg.platform.control.c (control)",
        "pkg.platform.spec.m (spec) imports pkg.platform.policy.p (policy)",
    ]


def test_checker_ranks_every_package_above_the_platform(tmp_path: Path) -> None:
    """client < workloads (siblings) < examples < driver | kuberay | demo < cli < facade, each way up refused."""
    down = ("from pkg import errors\nfrom pkg.platform.spec import s\nfrom pkg.platform.policy import p\n"
            "from pkg.platform.control import c\n")
    files = {
        "pkg/errors.py": "", "pkg/platform/spec/__init__.py": "", "pkg/platform/spec/s.py": "",
        "pkg/platform/policy/__init__.py": "", "pkg/platform/policy/p.py": "",
        "pkg/platform/control/__init__.py": "", "pkg/platform/control/c.py": "",
        "pkg/platform/client.py": down + "def install():\n    from pkg.train import small\n",
        "pkg/train/__init__.py": "", "pkg/train/small.py": down + "from pkg.platform import client\n",
        "pkg/tune/__init__.py": "", "pkg/tune/job.py": "from pkg.train import small\n",
        "pkg/serve/__init__.py": "", "pkg/serve/app.py": "from pkg.platform import runner\n",
        "pkg/outputs.py": "", "pkg/pipelines.py": "from pkg.platform import client\n",
        "pkg/examples/__init__.py": "", "pkg/examples/digits.py": "import pkg.train.small\nimport pkg.outputs\n",
        "pkg/platform/runner.py": "from pkg.tune import job\nfrom pkg.examples import digits\nfrom pkg import kuberay\n",
        "pkg/run.py": "from pkg.platform.runner import main\n",
        "pkg/kuberay/__init__.py": "", "pkg/kuberay/render.py": "from pkg.serve import app\nfrom pkg.cli import x\n",
        "pkg/platform/demo.py": "from pkg.pipelines import p\n",
        "pkg/cli/__init__.py": "", "pkg/cli/x.py": "from pkg.platform import demo, runner\nimport pkg.kuberay.render\n",
        "pkg/__main__.py": "from pkg.cli import x\n",
    }
    assert _problems(tmp_path, files) == [
        "pkg.kuberay.render (kuberay) imports pkg.cli.x (cli)",
        "pkg.platform.client (client) imports pkg.train.small (train)",
        "pkg.platform.runner (driver) imports pkg.kuberay (kuberay)",
        "pkg.serve.app (serve) imports pkg.platform.runner (driver)",
        "pkg.train.small (train) imports pkg.platform.control.c (control): a workload calls the controller through "
        "the client",
        "pkg.tune.job (tune) imports pkg.train.small (train)",
    ]
    # An allowed pair is accepted, and only that pair.
    assert _problems(tmp_path, files, allowed={("platform.client", "train.small"): "why"}) == [
        "pkg.kuberay.render (kuberay) imports pkg.cli.x (cli)",
        "pkg.platform.runner (driver) imports pkg.kuberay (kuberay)",
        "pkg.serve.app (serve) imports pkg.platform.runner (driver)",
        "pkg.train.small (train) imports pkg.platform.control.c (control): a workload calls the controller through "
        "the client",
        "pkg.tune.job (tune) imports pkg.train.small (train)",
    ]
    assert [layer_of(m, "pkg")[0] for m in ("pkg", "pkg.__main__", "pkg.platform", "pkg.run", "pkg.examples")] == [
        "facade", "facade", "base", "driver", "examples"]


def test_checker_ranks_the_kinds_registry_and_each_kinds_driver(tmp_path: Path) -> None:
    """kinds (the registry and every kind's facts) sits over spec and policy, beside api, under control, and is pure;
    a kind's driver (kinds.<kind>.driver) ranks with the runner. So control/ asks the facts but never loads a
    driver, and the facts reach no workload, driver, api or Ray; each way is refused."""
    files = {
        "pkg/errors.py": "",
        "pkg/platform/spec/__init__.py": "", "pkg/platform/spec/s.py": "",
        "pkg/platform/policy/__init__.py": "", "pkg/platform/policy/states.py": "",
        "pkg/platform/api/__init__.py": "", "pkg/platform/api/records.py": "",
        "pkg/platform/control/__init__.py": "",
        "pkg/platform/control/c.py": "from pkg import kinds\nfrom pkg.kinds.toy import driver\n",
        "pkg/platform/client.py": "", "pkg/platform/runner.py": "from pkg import kinds\n",
        "pkg/train/__init__.py": "", "pkg/train/gang.py": "",
        "pkg/cli/__init__.py": "", "pkg/cli/x.py": "",
        "pkg/kinds/__init__.py": "from pkg.kinds import registry, toy\n",
        "pkg/kinds/registry.py": "from pkg import errors\nfrom pkg.platform.spec import s\n"
                                 "from pkg.platform.policy import states\n",
        "pkg/kinds/toy/__init__.py": "from pkg.kinds.registry import JobKind\n",
        "pkg/kinds/toy/driver.py": "from pkg.kinds import toy\nfrom pkg.train import gang\n"
                                   "from pkg.platform import client, runner\n",
        "pkg/kinds/bad/__init__.py": "import ray\nfrom pkg.platform.api import records\n"
                                     "def f():\n    from pkg.train import gang\n    from pkg.kinds.bad import driver\n",
        "pkg/kinds/bad/driver.py": "from pkg.cli import x\n",
    }
    assert _problems(tmp_path, files) == [
        "pkg.kinds.bad (kinds) imports pkg.kinds.bad.driver (driver)",
        "pkg.kinds.bad (kinds) imports pkg.platform.api.records (api)",
        "pkg.kinds.bad (kinds) imports pkg.train.gang (train)",
        "pkg.kinds.bad (kinds) imports ['ray']",
        "pkg.kinds.bad.driver (driver) imports pkg.cli.x (cli)",
        "pkg.platform.control.c (control) imports pkg.kinds.toy.driver (driver)",
    ]
    assert [layer_of(m, "pkg")[0] for m in ("pkg.kinds", "pkg.kinds.registry", "pkg.kinds.toy",
                                            "pkg.kinds.toy.driver", "pkg.kinds.toy.driver.part")] == [
        "kinds", "kinds", "kinds", "driver", "driver"]


def test_checker_finds_a_module_in_no_layer(tmp_path: Path) -> None:
    graph = import_graph(_tree(tmp_path, {"pkg/errors.py": "", "pkg/helpers.py": "", "pkg/platform/web.py": ""}),
                         "pkg")
    assert unranked(graph) == ["pkg.helpers", "pkg.platform.web"]


def test_checker_counts_the_facade_and_what_a_package_init_imports(tmp_path: Path) -> None:
    """`from pkg import submit` and `import pkg` import the facade; `from pkg import errors` only errors; what a
    package's __init__ imports is imported by every module under it and by `from that.package import sub`."""
    assert _problems(tmp_path, {
        "pkg/errors.py": "",
        "pkg/platform/client.py": "",
        "pkg/platform/spec/__init__.py": "",
        "pkg/platform/spec/a.py": "from pkg import submit\n",
        "pkg/platform/spec/b.py": "def f():\n    import pkg\n",
        "pkg/platform/spec/c.py": "from pkg import errors\nfrom pkg.platform.spec import a\n",
        "pkg/platform/policy/__init__.py": "from pkg.platform.client import submit\n",
        "pkg/platform/policy/p.py": "",
        "pkg/platform/sim/__init__.py": "",
        "pkg/platform/sim/s.py": "from pkg.platform.policy import p\n",
        "pkg/platform/control/__init__.py": "import sqlalchemy\n",
        "pkg/platform/control/store.py": "",
        "pkg/platform/sim/t.py": "from pkg.platform.control import store\n",
    }) == [
        "pkg.platform.policy (policy) imports pkg.platform.client (client)",
        "pkg.platform.policy.p (policy) imports pkg.platform.client (client) through pkg.platform.policy's __init__",
        "pkg.platform.sim.s (sim) imports pkg.platform.client (client) through pkg.platform.policy's __init__",
        "pkg.platform.sim.t (sim) imports pkg.platform.control.store (control)",
        "pkg.platform.sim.t (sim) imports ['sqlalchemy'] through pkg.platform.control's __init__ "
        "(in pkg.platform.control)",
        "pkg.platform.spec.a (spec) imports pkg (facade)",
        "pkg.platform.spec.b (spec) imports pkg (facade)",
    ]


def test_checker_reads_import_module_strings(tmp_path: Path) -> None:
    assert _problems(tmp_path, {
        "pkg/platform/spec/__init__.py": "",
        "pkg/platform/spec/a.py": "import importlib\ndef f():\n    importlib.import_module('pkg.platform.policy.p')\n",
        "pkg/platform/spec/b.py": "def f():\n    __import__('ray.util')\n",
        "pkg/platform/spec/c.py": "from importlib import import_module\nm = import_module('..control.c', __package__)\n",
        "pkg/platform/spec/d.py": "import importlib\nNAME = 'pkg.platform.control.c'\nimportlib.import_module(NAME)\n",
        "pkg/platform/policy/__init__.py": "",
        "pkg/platform/policy/p.py": "",
        "pkg/platform/control/__init__.py": "",
        "pkg/platform/control/c.py": "",
    }) == [
        "pkg.platform.spec.a (spec) imports pkg.platform.policy.p (policy)",
        "pkg.platform.spec.b (spec) imports ['ray']",
        "pkg.platform.spec.c (spec) imports pkg.platform.control.c (control)",
    ]  # d: a name computed at run time is out of a static check's sight


def test_checker_finds_kubernetes_outside_kuberay(tmp_path: Path) -> None:
    assert _problems(tmp_path, {
        "pkg/kuberay/__init__.py": "",
        "pkg/kuberay/kube_client.py": "def f():\n    from kubernetes import client\n",
        "pkg/cli/__init__.py": "",
        "pkg/cli/kube_cmd.py": "def f():\n    if True:\n        import kubernetes.config\n",
        "pkg/serve/__init__.py": "",
        "pkg/serve/deploy.py": "import importlib\nimportlib.import_module('kubernetes.client')\n",
    }) == ["pkg.cli.kube_cmd (cli) imports kubernetes", "pkg.serve.deploy (serve) imports kubernetes"]


IO_SOURCE = """\
import os, time
from pathlib import Path
import subprocess
from os.path import exists

def load(path):
    return Path(path).read_text()

class Spec:
    def check(self, path):
        if os.path.isfile(path):
            os.remove(path)
        return self.placement.resolve(path)  # not a path: one argument

    def where(self):
        return Path('.').resolve()

def wait():
    time.sleep(1)
    open('/etc/hosts')
    Path('x').mkdir()
    fig.savefig('x.png')
"""


def test_io_check_finds_file_process_and_sleep_calls_in_a_pure_layer(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "pkg/platform/policy/__init__.py": "",
        "pkg/platform/policy/p.py": IO_SOURCE,
        "pkg/platform/control/__init__.py": "",
        "pkg/platform/control/c.py": IO_SOURCE,  # control is not pure: anything goes
    })
    files = module_files(root, "pkg")
    problems, used = io_problems(root, files, "pkg", PURE, allowed={("platform.policy.p", "load"): "why"})
    assert problems == [
        "pkg/platform/policy/p.py:3 <module>: import subprocess",
        "pkg/platform/policy/p.py:4 <module>: from os.path import exists",
        "pkg/platform/policy/p.py:11 Spec.check: os.path.isfile()",
        "pkg/platform/policy/p.py:12 Spec.check: os.remove()",
        "pkg/platform/policy/p.py:16 Spec.where: .resolve()",
        "pkg/platform/policy/p.py:19 wait: time.sleep()",
        "pkg/platform/policy/p.py:20 wait: open()",
        "pkg/platform/policy/p.py:21 wait: .mkdir()",
        "pkg/platform/policy/p.py:22 wait: .savefig()",
    ]
    assert used == {("platform.policy.p", "load")}


def test_probe_finds_a_pure_module_touching_a_file_on_import(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "pkg/platform/spec/__init__.py": "",
        "pkg/platform/spec/reads.py": "from pathlib import Path\nTEXT = Path(__file__).read_text()\n",
        "pkg/platform/spec/later.py": "def load(path):\n    return open(path).read()\n",  # call time: the AST's part
        "pkg/platform/sim/__init__.py": "",
        "pkg/platform/sim/net.py": "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9), 0.1)\n"
                                   "except OSError:\n    pass\n",
    })
    seen = _probe(["pkg.platform.spec.reads", "pkg.platform.spec.later", "pkg.platform.sim.net"], root, "pkg")
    assert seen["heavy"] == []
    assert [line.split(str(root) + os.sep)[1] for line in seen["io"]] == [
        "pkg/platform/spec/reads.py:2: Path.read_text",
        "pkg/platform/sim/net.py:3: socket.create_connection",
    ]


def test_checker_finds_a_workload_that_reaches_into_the_controller(tmp_path: Path) -> None:
    files = {
        "pkg/errors.py": "", "pkg/platform/spec/__init__.py": "", "pkg/platform/policy/__init__.py": "",
        "pkg/platform/control/__init__.py": "", "pkg/platform/control/head.py": "",
        "pkg/platform/client.py": "from pkg.platform.control import head\n",
        "pkg/train/__init__.py": "", "pkg/train/usage.py": "from pkg.platform.control.head import NAME\n",
        "pkg/serve/__init__.py": "", "pkg/serve/ops.py": "from pkg.platform import client\n",
    }
    assert _problems(tmp_path, files) == [
        "pkg.train.usage (train) imports pkg.platform.control.head (control): a workload calls the controller "
        "through the client"]
