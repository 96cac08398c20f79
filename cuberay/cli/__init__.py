"""The ``cuberay`` command line: a thin layer over the Python API.

Each command group lives in its own module and registers itself on ``app``.
Data goes to stdout; progress and hints go to stderr. Errors derived from
``CuberayError`` are printed without a traceback and map to exit codes:
0 ok, 1 job failed or runtime error, 2 usage/spec error, 3 rejected by
admission, 4 not found. Set ``CUBERAY_DEBUG=1`` to see tracebacks.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from cuberay.errors import CuberayError

app = typer.Typer(
    name="cuberay",
    help="cuberay: a Ray-native compute platform for ML teams (tenants, quotas, gang placement).\n\n"
    "Exit codes: 0 ok, 1 job failed or runtime error, 2 usage/spec error, "
    "3 rejected by admission, 4 not found.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _commands() -> None:
    # A callback keeps `cuberay` a group of commands even when one command module is loaded (see _register):
    # Typer runs an app of a single command as that command, and `cuberay sim TRACE` read TRACE as a second name.
    pass

KINDS_ENV = "CUBERAY_KINDS"  # kinds.KINDS_ENV, named here so a command that reads no spec skips the registry

# Modules that add commands to ``app`` when imported, in the order help lists them. Each stays small.
COMMAND_MODULES = (
    "cuberay.cli.spec_cmd",
    "cuberay.cli.sim_cmd",
    "cuberay.cli.platform_cmd",
    "cuberay.cli.jobs_cmd",
    "cuberay.cli.kube_cmd",
    "cuberay.cli.tune_cmd",
    "cuberay.cli.serve_cmd",
    "cuberay.cli.node_cmd",
    "cuberay.cli.pipeline_cmd",
)
# The module that adds each command (or command group): a command imports its own module only, so `cuberay
# status` does not load the simulator, the Kubernetes renderer and the rest (tests/unit/test_cli_spec.py checks
# this map against what the modules add).
COMMANDS = {
    "spec": "cuberay.cli.spec_cmd", "sim": "cuberay.cli.sim_cmd",
    **dict.fromkeys(("up", "env", "console", "down", "tenants", "demo"), "cuberay.cli.platform_cmd"),
    **dict.fromkeys(("submit", "run", "queue", "status", "logs", "cancel", "history"), "cuberay.cli.jobs_cmd"),
    "kube": "cuberay.cli.kube_cmd", "tune": "cuberay.cli.tune_cmd", "serve": "cuberay.cli.serve_cmd",
    "node": "cuberay.cli.node_cmd", "pipeline": "cuberay.cli.pipeline_cmd",
}


def _register(argv: list[str] | None = None) -> None:
    """Import the module that adds ``argv``'s command; all of them without one (help lists every command, and
    an unknown name gets Typer's suggestions)."""
    first = next((arg for arg in argv if not arg.startswith("-")), None) if argv else None
    for name in (COMMANDS[first],) if first in COMMANDS else COMMAND_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real missing dependency inside the module
                raise


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the process exit code."""
    from typer._click import exceptions as click_exc  # typer 0.29 vendors its own click

    argv = sys.argv[1:] if argv is None else argv
    _register(argv)
    try:
        if os.environ.get(KINDS_ENV):  # plugin kinds, before any spec is read (the registry loads every spec model)
            from cuberay import kinds

            kinds.load_env(os.environ)
        rc = app(args=argv, standalone_mode=False, prog_name="cuberay")
    except CuberayError as exc:
        if os.environ.get("CUBERAY_DEBUG"):
            raise
        from rich.markup import escape

        from cuberay.cli.output import error_console

        # escape: messages quote user text and rule names in [brackets], which are not markup.
        error_console().print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False,
                              soft_wrap=True)
        return exc.exit_code
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except click_exc.ClickException as exc:
        exc.show()
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
    except (KeyboardInterrupt, typer.Abort):
        return 130
    return rc if isinstance(rc, int) else 0


def run() -> None:
    sys.exit(main())
