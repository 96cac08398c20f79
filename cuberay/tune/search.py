"""One hyperparameter search on Ray Tune: searcher, scheduler, trials, results.

``run_search`` is what a TuneJob's driver calls (and the benchmark, and tests):
it builds the Searcher for the algorithm, wraps it in slots when the gang's
nodes are given, turns the trial (an entrypoint function or a shell command)
into a Tune function trainable speaking NNI's trial API, runs ``Tuner.fit`` and
returns every trial with the best one.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from cuberay.errors import JobFailedError, SpecError
from cuberay.tune.nni_bridge import run_command_trial, run_function_trial, trial_index
from cuberay.tune.progress import Progress, ProgressCallback
from cuberay.tune.schedulers import make_scheduler
from cuberay.tune.searchers import SLOT_KEY, SlotSearcher, make_searcher, slot_resources

NODE_FILE = "cuberay_node_id"


@dataclass(frozen=True)
class TrialCode:
    """What one trial runs: a function (``pkg.module:func`` or ``file.py:func``) or a shell command."""

    entrypoint: str | None = None
    command: str | None = None
    code_dir: str | None = None     # command trials start here; file entrypoints are found here
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialRecord:
    trial_id: str
    config: dict
    state: str                      # TERMINATED (ran to the end or stopped early) | ERROR
    value: float | None             # the metric's last reported value
    final: bool                     # whether that was a final result (not an early stop)
    iterations: int
    runtime_s: float
    history: list[float]            # every reported value, in order
    error: str | None = None
    node_id: str | None = None      # the node it ran on
    index: int = 0                  # Tune's trial number: the order trials were suggested in


@dataclass(frozen=True)
class SearchResult:
    metric: str
    mode: str
    trials: list[TrialRecord]
    best: TrialRecord | None
    wall_s: float
    suggest_ms: list[float]
    counts: dict[str, int]

    @property
    def trial_time_s(self) -> float:
        return sum(t.runtime_s for t in self.trials)


def load_trial_function(entrypoint: str, code_dir: str | None = None) -> Callable[..., Any]:
    """Import ``pkg.module:func``, or load ``path/trial.py:func`` (relative to ``code_dir``)."""
    module_name, sep, attr = entrypoint.rpartition(":")
    if not sep or not module_name or not attr:
        raise SpecError(f"entrypoint {entrypoint!r} is not \"pkg.module:function\" or \"trial.py:function\"",
                        path="entrypoint")
    try:
        if module_name.endswith(".py"):
            from cuberay.tune.nni_bridge import resolve_code_dir

            path = Path(module_name)
            path = path if path.is_absolute() else Path(resolve_code_dir(code_dir)) / path
            spec = importlib.util.spec_from_file_location(f"cuberay_trial_{path.stem}", path)
            if spec is None or not path.is_file():
                raise ImportError(f"no file {path}")
            module = importlib.util.module_from_spec(spec)
            sys.path.insert(0, str(path.parent))  # the trial's own imports, as `python trial.py` finds them
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            module = importlib.import_module(module_name)
    except ImportError as err:
        raise SpecError(f"entrypoint {entrypoint!r}: cannot import {module_name!r} ({err}); ship the code with "
                        f"runtime_env.working_dir or install it", path="entrypoint") from err
    func = getattr(module, attr, None)
    if not callable(func):
        raise SpecError(f"entrypoint {entrypoint!r}: {module_name} has no function {attr!r}", path="entrypoint")
    return func


def make_trainable(code: TrialCode, metric: str) -> Callable[[dict], None]:
    """A Tune function trainable running ``code`` with NNI's trial API answered by Tune."""
    if (code.entrypoint is None) == (code.command is None):
        raise SpecError("set exactly one of entrypoint and command", path="entrypoint")

    def nni_trial(config: dict) -> None:
        import ray
        from ray import tune

        params = {k: v for k, v in config.items() if k != SLOT_KEY}
        node_id = ray.get_runtime_context().get_node_id()
        trial_dir = Path(tune.get_context().get_trial_dir() or os.getcwd())
        (trial_dir / NODE_FILE).write_text(node_id)  # Ray Tune-style trials report without the bridge

        def report(result: dict) -> None:
            tune.report({**result, "node_id": node_id})  # where it ran, for the record

        if code.command is not None:
            run_command_trial(code.command, params, metric=metric, report=report, sys_dir=trial_dir / "nni",
                              code_dir=code.code_dir, env=code.env)
        else:
            os.environ.update(code.env)
            func = load_trial_function(code.entrypoint, code.code_dir)
            run_function_trial(func, params, metric=metric, report=report)

    return nni_trial


def run_search(code: TrialCode, search_space: Mapping[str, Any], *, metric: str, mode: str,
               algorithm: str = "nni:tpe", algorithm_args: Mapping[str, Any] | None = None,
               scheduler: str | None = None, scheduler_args: Mapping[str, Any] | None = None,
               num_samples: int = 10, max_concurrent: int = 1, trial_resources: Mapping[str, float] | None = None,
               node_ids: list[str] | None = None, seed: int | None = None, storage_path: str | None = None,
               name: str = "search", max_runtime_s: float | None = None,
               on_progress: Callable[[Progress], None] | None = None) -> SearchResult:
    """Run the search to its end; every trial and the best. Raises JobFailedError if no trial gave a value."""
    from ray import tune

    searcher = make_searcher(algorithm, search_space, metric=metric, mode=mode, algorithm_args=algorithm_args,
                             seed=seed, max_concurrent=max_concurrent)
    bundle = dict(trial_resources or {"CPU": 1})
    if node_ids:
        max_concurrent = min(max_concurrent, len(node_ids))
        search_alg: Any = SlotSearcher(searcher, len(node_ids))
        resources: Any = slot_resources(node_ids, bundle)
    else:
        search_alg, resources = searcher, bundle
    progress = Progress(metric=metric, mode=mode, total=num_samples)
    tuner = tune.Tuner(
        tune.with_resources(make_trainable(code, metric), resources),
        tune_config=tune.TuneConfig(search_alg=search_alg, scheduler=make_scheduler(scheduler, scheduler_args),
                                    metric=metric, mode=mode, num_samples=num_samples,
                                    max_concurrent_trials=max_concurrent, time_budget_s=max_runtime_s,
                                    reuse_actors=True),
        run_config=tune.RunConfig(name=name, storage_path=storage_path, verbose=0,
                                  callbacks=[ProgressCallback(progress, on_progress)],
                                  failure_config=tune.FailureConfig(max_failures=0, fail_fast=False)),
    )
    start = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - start
    trials = [_record(r, metric) for r in grid]
    scored = [t for t in trials if t.value is not None]
    best = (max if mode == "max" else min)(scored, key=lambda t: t.value) if scored else None
    counts = dict(getattr(searcher, "counts", {}))
    counts.update(trials=len(trials), errored=sum(t.state == "ERROR" for t in trials),
                  stopped_early=sum(t.state != "ERROR" and t.value is not None and not t.final for t in trials))
    result = SearchResult(metric=metric, mode=mode, trials=trials, best=best, wall_s=wall,
                          suggest_ms=[1000 * s for s in getattr(searcher, "suggest_seconds", [])], counts=counts)
    if best is None:
        errors = sorted({t.error.splitlines()[0] for t in trials if t.error})[:3]
        raise JobFailedError(f"no trial reported the metric {metric!r} ({len(trials)} trial(s)"
                             + (f"; errors: {'; '.join(errors)}" if errors else "")
                             + f"); report it with nni.report_final_result(value) or tune.report({{{metric!r}: "
                               f"value}})")
    return result


def _record(result: Any, metric: str) -> TrialRecord:
    metrics = dict(result.metrics or {})
    history: list[float] = []
    frame = result.metrics_dataframe
    if frame is not None and metric in frame:
        history = [float(v) for v in frame[metric].tolist() if v is not None and not math.isnan(float(v))]
    value = metrics.get(metric)
    value = float(value) if isinstance(value, (int, float)) and math.isfinite(float(value)) else None
    config = {k: v for k, v in (result.config or {}).items() if k != SLOT_KEY}
    trial_id = str(metrics.get("trial_id") or Path(result.path).name)
    node_file = Path(result.path) / NODE_FILE
    node_id = metrics.get("node_id") or (node_file.read_text().strip() if node_file.is_file() else None)
    return TrialRecord(
        trial_id=trial_id, index=trial_index(result.path, trial_id), config=config,
        state="ERROR" if result.error else "TERMINATED", value=None if result.error else value,
        final=bool(metrics.get("nni_final", True)), iterations=int(metrics.get("training_iteration") or 0),
        runtime_s=float(metrics.get("time_total_s") or 0.0), history=history,
        error=str(result.error).strip()[-2000:] if result.error else None, node_id=node_id)
