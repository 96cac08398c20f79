"""Platform commands: ``up``, ``down``, ``tenants`` and ``demo``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Group
from rich.live import Live
from rich.text import Text

from cuberay.cli import app, views
from cuberay.cli.output import Format, emit, error_console
from cuberay.errors import JobFailedError
from cuberay.platform import client


@app.command()
def up(
    platform: Optional[Path] = typer.Option(
        None, "--platform", "-p", metavar="FILE",
        help="Platform file with tenants and quotas (default: configs/platform.yaml)."),
    address: Optional[str] = typer.Option(
        None, "--address", metavar="ADDR",
        help="Install the controller on this running Ray cluster instead of starting a local one."),
    output: Format = typer.Option(Format.table, "--output", "-o", "--format", help="table | json | yaml."),
) -> None:
    """Start a local Ray head with its dashboard and the cuberay controller; print the dashboard URL."""
    where = f"the Ray cluster at {address}" if address else "a local Ray head"
    err = error_console()
    with err.status(f"starting the cuberay controller on {where} ..."):
        url = client.up(str(platform) if platform else None, address)
    if output != Format.table:
        emit({"dashboard_url": url}, output)
        return
    print(f"Ray dashboard: {url}")
    err.print("cuberay is up. Next: `cuberay tenants`, `cuberay submit configs/jobs/train-ddp.yaml --wait`, "
              "`cuberay queue`; stop with `cuberay down`.", highlight=False)


@app.command()
def down() -> None:
    """Stop the controller (and the local Ray head that `cuberay up` started)."""
    client.down()
    error_console().print("cuberay is down.")


@app.command()
def tenants(
    output: Format = typer.Option(Format.table, "--output", "-o", "--format", help="table | json | yaml."),
) -> None:
    """Each tenant's guaranteed and max quota, what it uses now, and how much of that is borrowed."""
    usages = client.tenants()
    if output != Format.table:
        emit(views.plain(usages), output)
        return
    emit(views.tenant_rows(usages), output, columns=views.TENANT_COLUMNS)


@app.command()
def demo(
    platform: Optional[Path] = typer.Option(
        None, "--platform", "-p", metavar="FILE", help="Platform file (default: configs/platform.yaml)."),
    timeout: float = typer.Option(600.0, "--timeout", help="Give up (and shut down) after this many seconds."),
) -> None:
    """Start a local platform, run three example jobs while showing the queue, print results, shut down.

    Submits a 2-worker DDP TrainJob (an MLP on sklearn's digits), a command-mode
    Task, and a job that must wait for its tenant's quota. Exit 1 if a job failed.
    """
    from cuberay.platform import demo as demo_run

    err = error_console()
    started = time.monotonic()
    with Live(Text("starting a local Ray head and the cuberay controller ..."), console=err,
              refresh_per_second=4, transient=False) as live:
        def show(snapshot: demo_run.Snapshot) -> None:
            live.update(_demo_view(snapshot, time.monotonic() - started))

        result = demo_run.run_demo(platform_file=str(platform) if platform else None, on_tick=show,
                                   timeout_s=timeout)
    emit(_result_rows(result), Format.table, columns=("job", "tenant", "kind", "state", "runtime", "result"),
         title="cuberay demo: results")
    print(f"Ray dashboard (while it ran): {result.dashboard_url}")
    if result.accuracy is not None:
        print(f"digits DDP test accuracy: {result.accuracy:.3f}")
    if result.metrics_seen:
        print(f"cuberay metrics on Ray's Prometheus endpoint: {', '.join(result.metrics_seen)}")
    err.print(f"demo took {views.span(time.monotonic() - started)} "
              f"({time.monotonic() - started:.0f} s); the platform is shut down.", highlight=False)
    if result.failed:
        raise JobFailedError(f"demo job(s) did not succeed: {', '.join(result.failed)}; "
                             f"rerun with CUBERAY_DEBUG=1 or read the logs in the results above")


def _demo_view(snapshot, elapsed_s: float):
    """The live queue table plus a line of context (what the demo waits for)."""
    rows = views.queue_rows(snapshot.queue)
    done = [f"{r.id}: {r.state.value}" for r in snapshot.finished]
    parts = [views.table(rows, views.QUEUE_COLUMNS, title=f"cuberay queue  ({views.span(elapsed_s)})")]
    if done:
        parts.append(Text("finished: " + ", ".join(done)))
    parts.append(Text(snapshot.note, style="dim"))
    return Group(*parts)


def _result_rows(result) -> list[dict[str, str]]:
    rows = []
    for record in result.records:
        row = views.job_row(record)
        row["result"] = result.notes.get(record.id, record.message or "")
        rows.append(row)
    return rows
