"""``cuberay pipeline``: DAGs of jobs with retries, timeouts, outputs and cron schedules.

    cuberay pipeline submit FILE        store it; without a schedule it also runs now (--wait: until it ends)
    cuberay pipeline run NAME           a manual run (waits its turn; --supersede cancels running runs first;
                                        --wait: until it ends)
    cuberay pipeline list               stored pipelines: steps, schedule, the next ticks
    cuberay pipeline runs [NAME]        runs: trigger, execution date, state, why
    cuberay pipeline status RUN|NAME    a run's steps: state, attempts, job, outputs
    cuberay pipeline cancel RUN|NAME    cancel a run and its steps' jobs
    cuberay pipeline graph RUN|NAME|FILE [--out dag.png]
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Optional

import typer
import yaml

from cuberay.cli import app, progress
from cuberay.cli.output import Format, emit, error_console, out_option, output_option
from cuberay.errors import SpecError

pipeline_app = typer.Typer(help="Pipelines: DAGs of jobs with retries, timeouts, outputs and cron schedules.",
                           no_args_is_help=True)
app.add_typer(pipeline_app, name="pipeline")

TENANT = typer.Option(None, "--tenant", "-t", help="Tenant of the pipeline (default: the spec's, else your only one).")
RUN_COLUMNS = ["run", "pipeline", "trigger", "execution_date", "state", "message"]
WAIT_HELP = ("Follow the run until it ends, a line per change (steps starting, ending, retrying); exit 1 if it "
             "FAILED, 0 if it SUCCEEDED or was CANCELLED, as `cuberay submit --wait`.")
STEP_COLUMNS = ["step", "state", "attempt", "job", "outputs", "message"]


def _api() -> Any:
    import cuberay.pipelines as pipelines

    return pipelines


def _when(ts: float | None) -> str:
    return "" if ts is None else dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _run_row(run: Any) -> dict[str, Any]:
    return {"run": run.id, "pipeline": run.pipeline, "trigger": run.trigger,
            "execution_date": _when(run.execution_time), "state": run.state.value, "message": run.message}


@pipeline_app.command()
def submit(file: Path = typer.Argument(..., metavar="FILE", help="A Pipeline spec (YAML)."),
           tenant: Optional[str] = TENANT,
           run: bool = typer.Option(True, "--run/--no-run", help="Start a run now (pipelines without a schedule)."),
           wait: bool = typer.Option(False, "--wait", "-w", help=WAIT_HELP),
           output: Format = output_option()) -> None:
    """Store the pipeline in FILE (a new one, or a new version of it). Exit 2 on a spec error."""
    if wait and not run:  # refused before anything is stored
        raise SpecError("--wait follows the run submit starts, and --no-run starts none; drop one of them (or "
                        "follow a later run with `cuberay pipeline run NAME --wait`)")
    info = _api().submit(file, tenant, run=run)
    if wait and info["run"] is None:
        why = "it has a schedule" if info["scheduled"] else "--no-run"
        raise SpecError(f"pipeline {info['pipeline']!r} was stored, but --wait has no run to follow ({why}: "
                        f"submit started none); start one and follow it with `cuberay pipeline run "
                        f"{info['pipeline']} --wait`")
    if output == Format.table:
        print(f"Pipeline '{info['tenant']}/{info['pipeline']}' stored in tenant {info['tenant']} "
              f"({info['tenant_why']})")
        if info["run"] is not None:
            print(f"Run '{info['run'].id}' submitted")
        err = error_console()
        if info["scheduled"]:
            err.print("Its schedule makes runs from now on: cuberay pipeline runs " + info["pipeline"],
                      highlight=False)
        elif info["run"] is not None:
            err.print(f"  status: cuberay pipeline status {info['run'].id}\n"
                      f"  graph:  cuberay pipeline graph {info['run'].id}", highlight=False)
    elif not wait:
        emit(info, output)
    if wait:
        _follow(info["run"].id, output)


def _follow(run_id: str, output: Format) -> None:
    """``--wait``: follow the run on stderr, print its end (the record only, for -o json|yaml), exit by it."""
    record = progress.watch_run(run_id, error_console())
    if output != Format.table:
        emit(record, output)
    else:
        print(f"Run '{record.id}' {record.state.value.lower()}")
    progress.raise_for_end(record, "pipeline run", f"see its steps with `cuberay pipeline status {record.id}`")


def _params(values: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SpecError(f"--param {item!r} is not NAME=VALUE; write e.g. --param epochs=3")
        out[key] = yaml.safe_load(raw) if raw else ""
    return out


@pipeline_app.command("run")
def run_(name: str = typer.Argument(..., metavar="NAME", help="A stored pipeline's name."),
         tenant: Optional[str] = TENANT,
         param: list[str] = typer.Option([], "--param", "-p", help="NAME=VALUE overriding a parameter (repeat)."),
         supersede: bool = typer.Option(False, "--supersede", help="Cancel the pipeline's waiting and running runs "
                                                                   "first (CubeStudio's manual run)."),
         wait: bool = typer.Option(False, "--wait", "-w", help=WAIT_HELP),
         output: Format = output_option()) -> None:
    """A manual run of NAME. It waits its turn among the schedule's runs unless --supersede."""
    record = _api().run(name, tenant, params=_params(param), supersede=supersede)
    if output == Format.table:
        print(f"Run '{record.id}' submitted")
    elif not wait:
        emit(record, output)
    if wait:
        _follow(record.id, output)


@pipeline_app.command("list")
def list_(tenant: Optional[str] = typer.Option(None, "--tenant", "-t", help="Only this tenant's pipelines."),
          output: Format = output_option()) -> None:
    """Stored pipelines: their steps, schedule (cron, UTC) and the next ticks to come."""
    records = _api().stored(tenant)
    if output != Format.table:
        emit(records, output)
        return
    rows = [{"pipeline": p.name, "tenant": p.tenant, "version": p.version, "steps": ", ".join(p.steps),
             "schedule": p.cron or "on request", "next_ticks": ", ".join(_when(t) for t in p.next_ticks)}
            for p in records]
    emit(rows, output, columns=["pipeline", "tenant", "version", "steps", "schedule", "next_ticks"])


@pipeline_app.command()
def runs(name: Optional[str] = typer.Argument(None, metavar="[NAME]", help="Only this pipeline's runs."),
         tenant: Optional[str] = TENANT, output: Format = output_option()) -> None:
    """Runs, oldest first: trigger (schedule or manual), execution date, state and why."""
    records = _api().runs(name, tenant)
    if output != Format.table:
        emit(records, output)
        return
    emit([_run_row(r) for r in records], output, columns=RUN_COLUMNS)


@pipeline_app.command()
def status(ref: str = typer.Argument(..., metavar="RUN|NAME", help="A run id, or a pipeline (its latest run)."),
           output: Format = output_option()) -> None:
    """A run and its steps: state, attempts, current job, outputs, why."""
    record, steps = _api().status(ref)
    if output != Format.table:
        emit({"run": record, "steps": steps}, output)
        return
    print(f"{record.id}: {record.state.value} ({record.trigger}, execution date {_when(record.execution_time)})"
          + (f": {record.message}" if record.message else ""))
    rows = [{"step": s.name, "state": s.state.value, "attempt": s.attempt or "", "job": s.job_id or "",
             "outputs": ", ".join(f"{k}={v}" for k, v in s.outputs.items()), "message": s.message}
            for s in _ordered(record.spec, steps)]
    emit(rows, output, columns=STEP_COLUMNS)


def _ordered(spec: dict[str, Any], steps: list[Any]) -> list[Any]:
    position = {s["name"]: i for i, s in enumerate(spec["spec"]["steps"])}
    return sorted(steps, key=lambda s: position.get(s.name, len(position)))


@pipeline_app.command()
def cancel(ref: str = typer.Argument(..., metavar="RUN|NAME", help="A run id, or a pipeline (its latest run)."),
           output: Format = output_option()) -> None:
    """Cancel a run: its running steps' jobs are cancelled, its pending steps never start."""
    record = _api().cancel(ref)
    if output != Format.table:
        emit(record, output)
        return
    print(f"Run '{record.id}' {record.state.value.lower()}")


@pipeline_app.command()
def graph(ref: str = typer.Argument(..., metavar="RUN|NAME|FILE",
                                    help="A run id, a pipeline (its latest run) or a Pipeline file (no states)."),
          out: Optional[Path] = out_option("Also write the graph as a PNG (needs matplotlib)."),
          output: Format = output_option(help="table (the text DAG) | json | yaml (levels, dependencies, "
                                              "states).")) -> None:
    """Print the DAG with each step's state (and write a PNG with --out)."""
    from cuberay.cli import pipeline_graph

    if Path(ref).is_file():
        from cuberay.platform.spec.pipeline import load_pipeline

        pipe = load_pipeline(Path(ref))
        spec, steps, title = pipe.model_dump(mode="json")["spec"], None, pipe.name
    else:
        record, found = _api().status(ref)
        spec, steps, title = record.spec["spec"], {s.name: s for s in found}, f"{record.id}: {record.state.value}"
    if output != Format.table:
        emit({"levels": pipeline_graph.levels(spec),
              "depends_on": {s["name"]: list(s.get("depends_on") or []) for s in spec["steps"]},
              "states": {n: s.state.value for n, s in (steps or {}).items()}}, output)
    else:
        if steps is not None:
            print(title)
        print(pipeline_graph.text(spec, steps))
    if out is not None:
        try:
            pipeline_graph.png(spec, steps, out, title)
        except ModuleNotFoundError as exc:
            raise SpecError(f"--out needs {exc.name}, which is not installed; `pip install matplotlib` (or drop "
                            f"--out: the text graph above is the same DAG)") from None
        error_console().print(f"wrote {out}", highlight=False)
