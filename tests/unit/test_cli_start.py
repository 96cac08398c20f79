"""A command loads only what it needs: its own module, not the simulator, the renderer, Ray or every spec model.

A command is a process of its own each time (a shell, a script, CI), so what it imports before it does anything
is paid on every call: `cuberay status` should answer in well under a second. How fast it is lives in
benchmarks/bench_cli.py; this checks what makes it so.
"""

from __future__ import annotations

import json
import subprocess
import sys

import cuberay.cli as cli
from cuberay import kinds
from cuberay.cli import COMMAND_MODULES, COMMANDS, app


def test_every_command_is_mapped_to_the_module_that_adds_it() -> None:
    cli._register()
    added = {c.name or c.callback.__name__.replace("_", "-"): c.callback.__module__ for c in app.registered_commands}
    added.update({g.name: g.typer_instance.registered_commands[0].callback.__module__ for g in app.registered_groups})
    assert added == COMMANDS
    assert set(COMMANDS.values()) == set(COMMAND_MODULES)
    assert cli.KINDS_ENV == kinds.KINDS_ENV


def _loaded_by(argv: list[str]) -> dict[str, bool]:
    """Which heavy modules are loaded once the CLI has registered ``argv``'s command (in a fresh interpreter)."""
    heavy = ["ray", "sqlalchemy", "jinja2", "croniter", "numpy", "cuberay.platform.sim", "cuberay.kuberay",
             "cuberay.kinds", "cuberay.platform.spec.jobs", "cuberay.cli.sim_cmd", "cuberay.cli.kube_cmd"]
    code = (f"import json, sys; from cuberay.cli import _register; _register({argv!r}); "
            f"print(json.dumps({{m: m in sys.modules for m in {heavy!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_the_reads_and_cancel_load_no_heavy_module() -> None:
    for command in ("status", "queue", "logs", "cancel", "tenants"):
        loaded = {m for m, yes in _loaded_by([command, "some-job"]).items() if yes}
        assert not loaded, f"`cuberay {command}` loads {sorted(loaded)} at start"


def test_help_and_unknown_commands_register_every_command() -> None:
    assert _loaded_by(["--help"])["cuberay.cli.sim_cmd"]
    assert _loaded_by(["no-such-command"])["cuberay.cli.kube_cmd"]


def test_each_command_runs_with_only_its_own_module_loaded() -> None:
    """In a fresh process a command finds its arguments where a user puts them (`cuberay sim TRACE`, not TRACE as
    a second command name, which an app holding one command took it for)."""
    for name in COMMANDS:
        done = subprocess.run([sys.executable, "-m", "cuberay", name, "--help"], capture_output=True, text=True)
        assert done.returncode == 0, (name, done.stdout, done.stderr)
        assert f"cuberay {name}" in " ".join(done.stdout.split()), (name, done.stdout)
