"""``cuberay tune import``: run an NNI experiment file as a TuneJob on the platform.

``--dry-run`` prints the TuneJob it would submit (a spec file you can keep);
``--wait`` follows the search and, with ``-o json``, prints its outcome: the job
id and state, the best value and config, and the number of trials.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

import typer
import yaml

from cuberay.cli import app
from cuberay.cli.jobs_cmd import announce_and_follow, raise_for_end
from cuberay.cli.output import Format, emit, error_console, output_option
from cuberay.platform import client
from cuberay.platform.api.records import JobRecord
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec

tune_app = typer.Typer(help="Hyperparameter search: run NNI experiments on Ray Tune.", no_args_is_help=True)
app.add_typer(tune_app, name="tune")

_RESULTS = re.compile(r"results in (\S+\.json)")


@tune_app.command("import")
def import_experiment(
    config: Path = typer.Argument(..., metavar="CONFIG.yml", help="NNI experiment file (nnictl create --config)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the TuneJob and exit; submit nothing."),
    wait: bool = typer.Option(False, "--wait", "-w", help="Follow the search until it ends; exit 1 if it FAILED."),
    tenant: Optional[str] = typer.Option(None, "--tenant", "-t", help="Tenant (default: your only one)."),
    name: Optional[str] = typer.Option(None, "--name", help="Job name (default: experimentName)."),
    output: Format = output_option(),
) -> None:
    """Submit the NNI experiment in CONFIG.yml as a TuneJob (trials run unchanged, NNI's tuner searches)."""
    from cuberay.tune.nni_import import load_config, no_effect, to_tune_job
    from cuberay.tune.searchers import make_searcher

    experiment = load_config(config)
    data = to_tune_job(experiment, config, tenant=tenant, name=name)
    ignored = no_effect(experiment)
    if ignored:
        error_console().print(f"{config}: {', '.join(ignored)} have no effect here: trials run on the job's "
                              f"gang on the Ray cluster, and their logs go to Ray", highlight=False)
    job = load_spec(data)
    # The tuner's own checks (classArgs names, the space it accepts) before anything is queued.
    make_searcher(job.spec.algorithm, job.spec.search_space, metric=job.spec.metric, mode=job.spec.mode,
                  algorithm_args=job.spec.algorithm_args, seed=job.spec.seed)
    if dry_run:
        spec = {"apiVersion": job.api_version, "kind": job.kind,
                **job.model_dump(mode="json", by_alias=True, exclude_defaults=True)}
        if output == Format.table:
            print(yaml.safe_dump(spec, sort_keys=False).rstrip())
        else:
            emit(spec, output)
        return
    ref = client.submit(job, tenant, user=client.current_user())
    record = announce_and_follow(ref, output, wait, chosen=lambda: client.tenant_choice(job, tenant))
    if record is None:
        return
    outcome = search_outcome(record)
    if output != Format.table:
        emit(outcome, output)
    else:
        print(f"Job '{ref.id}' {JobState(record.state).value.lower()}: {record.message or ''}")
    raise_for_end(record)


def search_outcome(record: JobRecord) -> dict[str, Any]:
    """The job's end and, when its results file is readable here, the best value, config and trial count."""
    out: dict[str, Any] = {"job": record.id, "state": JobState(record.state).value, "message": record.message,
                           "best_value": None, "best_config": None, "trials": None, "results": None}
    found = _RESULTS.search(record.message or "")
    if found:
        out["results"] = found.group(1)
        try:
            data = json.loads(Path(found.group(1)).read_text())
            out.update(best_value=data["best_value"], best_config=data["best_config"], trials=data["trials"],
                       errored=data["errored"], stopped_early=data["stopped_early"])
        except (OSError, ValueError, KeyError):
            pass  # stored where this machine cannot read; the message still says it
    return out


@tune_app.command("trials")
def trials(ref: str = typer.Argument(..., metavar="JOB", help="A search's job id or name."),
           output: Format = output_option()) -> None:
    """A search's trials as it runs: parameters, the metric's last value, reports and state; the best marked."""
    page = client.api().trials(ref)
    if output != Format.table:
        emit(page, output)
        return
    if not page.trials:
        error_console().print(f"{page.job_id} has reported no trials yet (they show once the search starts them).")
        return
    best = max if page.mode == "max" else min
    values = [t.value for t in page.trials if t.value is not None]
    top = best(values) if values else None
    rows = [{"trial": t.index, "state": t.state, **{k: _short(v) for k, v in t.config.items()},
             str(page.metric): _short(t.value), "reports": t.iterations,
             "best": "*" if t.value is not None and t.value == top else ""} for t in page.trials]
    keys = sorted({k for t in page.trials for k in t.config})
    emit(rows, output, columns=["trial", "state", *keys, str(page.metric), "reports", "best"],
         title=f"{page.job_id}: {len(page.trials)} trials, {page.metric} ({page.mode}), attempt {page.attempt}")


def _short(value: Any) -> str:
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
