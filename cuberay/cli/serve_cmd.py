"""``cuberay serve``: deploy a ServeApp, see it, move its traffic, undo, delete.

    cuberay serve deploy FILE           check, submit, wait until Serve runs it (--no-wait: once queued)
    cuberay serve status APP            state, nodes, weights, per-version requests/errors/latency
    cuberay serve rollout APP --to V    shift traffic to V step by step; rolls back by itself on errors or no data
                                        (it waits: it ends with the rollout, exit 1 if it rolled back)
    cuberay serve rollback APP          restore the weights before the last rollout (--to ID: those of a change)
    cuberay serve history APP           every traffic change: id, when, who, what
    cuberay serve delete APP            take it off Serve and free its quota
    cuberay serve import FILE           a Serve config file (`serve build` output): one ServeApp per application
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Optional

import typer
import yaml

from cuberay.cli import app
from cuberay.cli.output import Format, emit, error_console
from cuberay.errors import CuberayError, SpecError

serve_app = typer.Typer(help="Serving apps on Ray Serve: deploy, status, rollout, rollback, history, delete.",
                        no_args_is_help=True)
app.add_typer(serve_app, name="serve")

OUTPUT = typer.Option(Format.table, "--output", "-o", help="table | json | yaml (json/yaml: the records only).")
TENANT = typer.Option(None, "--tenant", "-t", help="Tenant of the app (default: the spec's, else your only one).")


def _ops() -> Any:
    from cuberay.serve import ops  # imports Ray and torch: only when a serve command runs

    return ops


@serve_app.command()
def deploy(file: Path = typer.Argument(..., metavar="FILE", help="A ServeApp spec (YAML)."),
           tenant: Optional[str] = TENANT,
           wait: bool = typer.Option(True, "--wait/--no-wait",
                                     help="Wait until Serve runs the app (the default, up to 5 minutes; exit 1 if "
                                          "it ends instead); --no-wait returns once it is queued (then `cuberay "
                                          "serve status APP`)."),
           output: Format = OUTPUT) -> None:
    """Check FILE (checkpoints, route, engine), submit it and wait until Serve runs it (--no-wait: don't)."""
    record = _ops().deploy_app(file, tenant, wait_s=300.0 if wait else 0.0)
    if output == Format.table:
        where = _ops().app_url(record)
        print(f"App '{record.id}' {record.state.value.lower()}" + (f" at {where}" if where else ""))
        error_console().print(f"  status:   cuberay serve status {record.name}\n"
                              f"  rollout:  cuberay serve rollout {record.name} --to VERSION", highlight=False)
    else:
        emit(record, output)


@serve_app.command()
def status(name: str = typer.Argument(..., metavar="APP"), tenant: Optional[str] = TENANT,
           output: Format = OUTPUT) -> None:
    """State, nodes and per-version traffic of APP."""
    info = _ops().status(name, tenant)
    if output != Format.table:
        emit(info, output)
        return
    print(f"{info['app']}: {info['state']}, Serve {info['serve']}, route {info['route']} ({info['url']}), "
          f"nodes {', '.join(n[:8] for n in info['nodes']) or '-'}")
    weights = info.get("weights") or {}
    rows = [{"version": v, "weight": weights.get(v), "requests": f.get("requests"), "errors": f.get("errors"),
             "mirrored": f.get("mirrored"), "p50_ms": _ms(f.get("p50_ms")), "p99_ms": _ms(f.get("p99_ms"))}
            for v, f in sorted({**{v: {} for v in weights}, **info["versions"]}.items())]
    emit(rows, output, columns=["version", "weight", "requests", "errors", "mirrored", "p50_ms", "p99_ms"])


def _ms(value: Any) -> str | None:
    return None if value is None else f"{value:.1f}"


@serve_app.command()
def rollout(name: str = typer.Argument(..., metavar="APP"),
            to: str = typer.Option(..., "--to", help="The version that gets all the traffic."),
            steps: Optional[str] = typer.Option(None, "--steps", help='Steps: a count, or percentages "10,50,100" '
                                                                     "(default: the spec's rollout.steps)."),
            interval: Optional[float] = typer.Option(None, "--interval", help="Seconds at each step (default: the "
                                                                              "spec's rollout.interval)."),
            step_timeout: Optional[float] = typer.Option(
                None, "--step-timeout", help="Seconds a step may wait for rollout.min_requests on --to before it "
                                             "rolls back (default: the spec's rollout.step_timeout)."),
            probe: Optional[Path] = typer.Option(
                None, "--probe", metavar="FILE", help="While it runs, POST this JSON request body to the app's "
                                                      "route --probe-rate times a second, so that steps have "
                                                      "answers to judge without users' traffic."),
            probe_rate: float = typer.Option(10.0, "--probe-rate", min=0.1, max=100.0, metavar="N",
                                             help="Requests a second that --probe sends."),
            tenant: Optional[str] = TENANT, output: Format = OUTPUT) -> None:
    """Shift traffic to --to step by step; a step passes once --to answered rollout.min_requests within the
    health limits. It always waits: it returns once all traffic is on --to (exit 0), or a step broke a limit
    or got too few requests in time and it rolled back (exit 1); a line per step on stderr meanwhile."""
    parsed: Any = None
    if steps:
        parsed = int(steps) if steps.isdigit() else [float(s) for s in steps.split(",")]
    body = _probe_body(probe) if probe else None
    outcome = _ops().run_rollout(name, to, tenant, steps=parsed, interval_s=interval, step_timeout_s=step_timeout,
                                 say=lambda line: error_console().print(line, highlight=False),
                                 probe=(body, probe_rate) if body is not None else None)
    if output != Format.table:
        emit({"completed": outcome.completed, "applied": outcome.applied, "reason": outcome.reason}, output)
    if not outcome.completed:
        raise CuberayError(f"rollout to {to} rolled back: {outcome.reason}")
    if output == Format.table:
        print(f"App '{name}': all traffic on {to}")


def _probe_body(path: Path) -> bytes:
    """The request --probe sends: a JSON file, checked here so a typo fails before traffic moves."""
    import json

    try:
        body = path.read_bytes()
        json.loads(body)
    except OSError as err:
        raise SpecError(f"--probe {path}: cannot read it ({err.strerror}); give a JSON request body file",
                        path="--probe") from None
    except ValueError as err:
        raise SpecError(f"--probe {path} is not JSON ({err}); give the body of one request to the app, e.g. "
                        f'{{"inputs": [[...]]}}', path="--probe") from None
    return body


@serve_app.command()
def rollback(name: str = typer.Argument(..., metavar="APP"),
             to: Optional[int] = typer.Option(None, "--to", metavar="ID", help="Restore the weights of this change "
                                                                            "(an id of `cuberay serve history`)."),
             tenant: Optional[str] = TENANT, output: Format = OUTPUT) -> None:
    """Restore the weights APP had before its last rollout (without one: before its last change), or with --to
    those of any change of its running deployment."""
    weights = _ops().rollback(name, tenant, to)
    if output == Format.table:
        print(f"App '{name}': weights {weights}")
    else:
        emit({"weights": weights}, output)


@serve_app.command()
def history(name: str = typer.Argument(..., metavar="APP"), tenant: Optional[str] = TENANT,
            output: Format = OUTPUT) -> None:
    """Every traffic change of APP: id (for `rollback --to`), when, who, what."""
    changes = _ops().history(name, tenant)
    if output != Format.table:
        emit(changes, output)
        return
    rows = [{"id": c.id, "time": dt.datetime.fromtimestamp(c.time).strftime("%Y-%m-%d %H:%M:%S"), "app": c.app,
             "user": c.user, "action": c.action, "weights": c.weights, "note": c.note} for c in changes]
    emit(rows, output, columns=["id", "time", "app", "user", "action", "weights", "note"])


@serve_app.command()
def delete(name: str = typer.Argument(..., metavar="APP"), tenant: Optional[str] = TENANT,
           output: Format = OUTPUT) -> None:
    """Take APP off Serve and free its quota."""
    record = _ops().delete(name, tenant)
    if output == Format.table:
        print(f"App '{record.id}' deleted")
    else:
        emit(record, output)


@serve_app.command("import")
def import_config(file: Path = typer.Argument(..., metavar="FILE", help="A Ray Serve config file (what `serve "
                                                                        "build` writes, `serve deploy` takes)."),
                  tenant: Optional[str] = TENANT,
                  dry_run: bool = typer.Option(False, "--dry-run", help="Print the ServeApps (YAML) and exit; "
                                                                        "submit nothing."),
                  wait: bool = typer.Option(False, "--wait", "-w", help="Wait until Serve runs each app (up to 5 "
                                                                        "minutes each)."),
                  output: Format = OUTPUT) -> None:
    """Deploy each application of FILE as a ServeApp, as written: its bound application and its deployments'
    settings; fields cuberay cannot honour are refused by name (exit 2) before anything is submitted."""
    from cuberay.platform.spec import load_spec
    from cuberay.serve.import_config import load_config, no_effect, to_serve_apps

    config = load_config(file)
    ignored = no_effect(config)
    if ignored:
        error_console().print(f"{file}: {', '.join(ignored)} have no effect here: the platform's Serve (its "
                              f"proxies, ports and logs) is shared by every app", highlight=False)
    specs = to_serve_apps(config, str(file), tenant, graph_of=_graph_of)
    apps = [load_spec(spec) for spec in specs]  # the spec's own checks, for every app, before any is submitted
    if dry_run:
        print(yaml.safe_dump_all(specs, sort_keys=False).rstrip())
        return
    records = [_ops().deploy_app(app, tenant, wait_s=300.0 if wait else 0.0) for app in apps]
    if output == Format.table:
        for record in records:
            print(f"App '{record.id}' {record.state.value.lower()}")
    else:
        emit(records, output)


def _graph_of(import_path: str) -> list[dict[str, Any]] | None:
    """A bound application's deployments as its code sets them, when it can be imported here."""
    from cuberay.serve import graph

    try:
        found = graph.inspect(import_path)
    except Exception:  # noqa: BLE001 - not importable here: the file's listing stands (the driver checks it)
        return None
    return list(found.deployments) if found.kind == graph.BOUND_APP else None
