"""A Ray Tune ``Searcher`` driving NNI's tuner classes (tpe, random, anneal, evolution, gridsearch).

NNI's dispatcher protocol, as Tune events:

  suggest(trial_id)            -> tuner.generate_parameters(parameter_id)
  on_trial_complete(result)    -> tuner.receive_trial_result(id, params, value), then trial_end(id, True)
  failed / no metric / stopped -> tuner.trial_end(id, False)   (the tuner forgets the running parameters)

The order matters: TPE drops a parameter from its running set in
``receive_trial_result`` and raises KeyError if ``trial_end`` came first.
``nni.NoMoreTrialError`` (a finite space fully explored) ends the search
(``Searcher.FINISHED``); trials already running still finish.

A trial stopped early by a scheduler (its last result is an intermediate one,
marked ``nni_final: False`` by the bridge) gives the tuner its last intermediate
value when ``include_intermediate`` is set (NNI's ``includeIntermediateResults``;
what Ray Tune's own searchers do, and the TuneJob default: with ASHA most trials
stop early, and a tuner that never hears of them searches blind). Unset, the
tuner is told the trial ended without a result, NNI's default. Ray Tune-style
trials carry no marker; their last result is their final one.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from typing import Any, Mapping

import numpy as np
from ray.tune.search import Searcher

from cuberay.errors import SpecError
from cuberay.tune import space as spaces
from cuberay.tune.searcher_state import PickledState

log = logging.getLogger(__name__)

FINAL_KEY = "nni_final"   # set by the bridge on every report: True for report_final_result
ALGORITHMS = ("tpe", "random", "anneal", "evolution", "gridsearch")


def _tuner_class(name: str) -> type:
    if name == "tpe":
        from nni.algorithms.hpo.tpe_tuner import TpeTuner
        return TpeTuner
    if name == "random":
        from nni.algorithms.hpo.random_tuner import RandomTuner
        return RandomTuner
    if name == "anneal":
        from nni.algorithms.hpo.hyperopt_tuner import HyperoptTuner
        return HyperoptTuner
    if name == "evolution":
        from nni.algorithms.hpo.evolution_tuner import EvolutionTuner
        return EvolutionTuner
    if name == "gridsearch":
        from nni.algorithms.hpo.gridsearch_tuner import GridSearchTuner
        return GridSearchTuner
    raise SpecError(f"unknown NNI tuner {name!r}; use one of {', '.join('nni:' + a for a in ALGORITHMS)}",
                    path="algorithm")


def make_tuner(name: str, args: Mapping[str, Any] | None = None, *, mode: str = "max",
               seed: int | None = None) -> Any:
    """An NNI tuner built from its class arguments; ``mode`` and ``seed`` are the search's."""
    cls = _tuner_class(name)
    # NNI's tuners log every suggestion and trial end at INFO, to stdout (set up when nni is first imported).
    logging.getLogger("nni").setLevel(logging.WARNING)
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "algorithm_name")]
    kwargs = dict(args or {})
    for key in kwargs:
        if key not in accepted:
            raise SpecError(f"nni:{name} has no argument {key!r}; it takes {', '.join(accepted) or 'none'}",
                            path=f"algorithm_args.{key}")
    wanted = "maximize" if mode == "max" else "minimize"
    if kwargs.get("optimize_mode", wanted) != wanted:
        raise SpecError(f"optimize_mode {kwargs['optimize_mode']!r} contradicts mode {mode!r}; drop it (mode "
                        f"decides) or set mode to match", path="algorithm_args.optimize_mode")
    if "optimize_mode" in accepted:
        kwargs["optimize_mode"] = wanted
    if seed is not None and "seed" in accepted:
        kwargs.setdefault("seed", seed)
    tpe_args = kwargs.get("tpe_args")
    if isinstance(tpe_args, Mapping) and str(tpe_args.get("constant_liar_type")).lower() == "none":
        # NNI documents "none" but only accepts None (its string check fails).
        kwargs["tpe_args"] = {**tpe_args, "constant_liar_type": None}
    try:
        return cls("anneal", **kwargs) if name == "anneal" else cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise SpecError(f"nni:{name} refused its arguments {dict(args or {})!r}: {err}",
                        path="algorithm_args") from err


def metric_value(value: Any) -> float | None:
    """NNI's scalar of a reported metric (a number, or a dict with a numeric 'default'); None if none."""
    if isinstance(value, Mapping):
        value = value.get("default")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def plain(value: Any) -> Any:
    """NNI parameters as plain Python (numpy scalars become int/float) for Tune configs and JSON."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


class NniSearcher(PickledState, Searcher):
    """Ray Tune searcher over an NNI search space, proposing with one of NNI's tuners."""

    def __init__(self, algorithm: str, search_space: Mapping[str, Any], *, metric: str, mode: str,
                 algorithm_args: Mapping[str, Any] | None = None, seed: int | None = None,
                 max_concurrent: int | None = None, include_intermediate: bool = False):
        if mode not in ("max", "min"):
            raise SpecError(f"mode must be max or min, got {mode!r}", path="mode")
        super().__init__(metric=metric, mode=mode)
        spaces.validate(search_space)
        params, self._constants = spaces.split_constants(search_space)
        if not params:
            raise SpecError("the search space has only constants; give at least one {_type, _value} parameter",
                            path="search_space")
        self.algorithm = algorithm
        self.tuner = make_tuner(algorithm, algorithm_args, mode=mode, seed=seed)
        try:
            self.tuner.update_search_space(params)
        except Exception as err:  # NNI validates with its own exception types
            raise SpecError(f"nni:{algorithm} cannot search this space: {err}", path="search_space") from err
        if algorithm == "anneal" and seed is not None:
            self.tuner.rval.rstate = np.random.RandomState(seed)  # HyperoptTuner has no seed argument
        if algorithm == "evolution" and seed is not None:
            log.warning("nni:evolution draws from an unseeded random state; seed %s does not apply to it", seed)
        self._population = getattr(self.tuner, "population_size", None) if algorithm == "evolution" else None
        self.include_intermediate = include_intermediate
        self.max_concurrent = max_concurrent or 0
        self._live: dict[str, tuple[int, Any]] = {}
        self._next_id = 0
        self.exhausted = False
        self.counts = {"suggested": 0, "succeeded": 0, "failed": 0, "no_result": 0}
        self.suggest_seconds: list[float] = []

    # -- Tune protocol

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        if config:
            return False  # the space is ours (NNI format); a Tune param_space on top would be ambiguous
        if metric and not self._metric:
            self._metric = metric
        if mode and not self._mode:
            self._mode = mode
        return True

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self.max_concurrent = max_concurrent
        return True

    def suggest(self, trial_id: str) -> dict | str | None:
        if self.exhausted:
            return Searcher.FINISHED
        limit = min(x for x in (self.max_concurrent, self._population) if x) if (
            self.max_concurrent or self._population) else 0
        if limit and len(self._live) >= limit:
            return None  # later: Evolution refuses more outstanding suggestions than its population
        import nni

        parameter_id = self._next_id
        start = time.perf_counter()
        try:
            params = self.tuner.generate_parameters(parameter_id)
        except nni.NoMoreTrialError:
            self.exhausted = True
            return Searcher.FINISHED
        finally:
            self.suggest_seconds.append(time.perf_counter() - start)
        self._next_id += 1
        self._live[trial_id] = (parameter_id, params)
        self.counts["suggested"] += 1
        return {**self._constants, **plain(params)}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        entry = self._live.pop(trial_id, None)
        if entry is None:
            return
        parameter_id, params = entry
        value = None if error or not result else metric_value(result.get(self._metric))
        if value is not None and result.get(FINAL_KEY) is False and not self.include_intermediate:
            value = None  # stopped before its final report (NNI: the trial ended without a final result)
        if value is None:
            self.counts["failed" if error else "no_result"] += 1
            self.tuner.trial_end(parameter_id, False)
            return
        self.tuner.receive_trial_result(parameter_id, params, value)
        self.tuner.trial_end(parameter_id, True)
        self.counts["succeeded"] += 1

    @property
    def running(self) -> int:
        return len(self._live)
