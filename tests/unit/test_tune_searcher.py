"""NNI tuners behind the Ray Tune Searcher interface, driven directly (no Ray runtime)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ray.tune.search import Searcher

from cuberay.errors import SpecError
from cuberay.tune.nni_searcher import FINAL_KEY, NniSearcher, make_tuner, metric_value, plain
from cuberay.tune.schedulers import from_nni_assessor, make_scheduler
from cuberay.tune.searchers import SLOT_KEY, RaySpaceSearcher, SlotSearcher, make_searcher

BRANIN_SPACE = {"x1": {"_type": "uniform", "_value": [-5, 10]}, "x2": {"_type": "uniform", "_value": [0, 15]}}


def branin(x1: float, x2: float) -> float:
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def drive(searcher: Searcher, trials: int, f=lambda c: branin(c["x1"], c["x2"]), metric="y") -> list[dict]:
    configs = []
    for i in range(trials):
        config = searcher.suggest(str(i))
        if config == Searcher.FINISHED:
            break
        configs.append(config)
        searcher.on_trial_complete(str(i), {metric: f(config), FINAL_KEY: True})
    return configs


ARGS = {"evolution": {"population_size": 8}}


@pytest.mark.parametrize("algorithm", ["tpe", "random", "anneal", "evolution", "gridsearch"])
def test_every_tuner_searches_branin(algorithm):
    s = NniSearcher(algorithm, {**BRANIN_SPACE, "epochs": 3}, metric="y", mode="min", seed=0,
                    algorithm_args=ARGS.get(algorithm))
    configs = drive(s, 30)
    assert len(configs) == 30 and all(c["epochs"] == 3 for c in configs)
    assert all(-5 <= c["x1"] <= 10 and 0 <= c["x2"] <= 15 for c in configs)
    assert s.counts["succeeded"] == 30 and min(branin(c["x1"], c["x2"]) for c in configs) < 20


@pytest.mark.parametrize("algorithm", ["tpe", "random", "anneal"])
def test_a_seed_makes_the_search_reproducible(algorithm):
    runs = [drive(NniSearcher(algorithm, BRANIN_SPACE, metric="y", mode="min", seed=7), 25) for _ in range(2)]
    other = drive(NniSearcher(algorithm, BRANIN_SPACE, metric="y", mode="min", seed=8), 25)
    assert runs[0] == runs[1] and runs[0] != other


def test_mode_decides_the_direction():
    space = {"x": {"_type": "uniform", "_value": [0, 10]}}
    late = {}
    for mode in ("max", "min"):
        configs = drive(NniSearcher("tpe", space, metric="y", mode=mode, seed=0), 40, f=lambda c: c["x"])
        late[mode] = np.mean([c["x"] for c in configs[25:]])
    assert late["max"] > 6 > 3 > late["min"]


def test_concurrency_limit_defers_suggestions_until_a_trial_ends():
    s = NniSearcher("tpe", BRANIN_SPACE, metric="y", mode="min", seed=0)
    assert s.set_max_concurrency(2)
    a, b = s.suggest("a"), s.suggest("b")
    assert isinstance(a, dict) and isinstance(b, dict) and s.suggest("c") is None
    s.on_trial_complete("a", {"y": 1.0})
    assert isinstance(s.suggest("c"), dict) and s.running == 2


def test_evolution_never_has_more_outstanding_than_its_population():
    s = NniSearcher("evolution", BRANIN_SPACE, metric="y", mode="min", algorithm_args={"population_size": 2},
                    max_concurrent=4)
    assert isinstance(s.suggest("a"), dict) and isinstance(s.suggest("b"), dict) and s.suggest("c") is None


def test_an_exhausted_grid_finishes_the_search():
    s = NniSearcher("gridsearch", {"x": {"_type": "choice", "_value": [1, 2, 3]}}, metric="y", mode="max")
    configs = drive(s, 10, f=lambda c: c["x"])
    assert sorted(c["x"] for c in configs) == [1, 2, 3]
    assert s.suggest("again") == Searcher.FINISHED and s.exhausted


def test_failed_trials_and_missing_metrics_are_counted_and_the_search_goes_on():
    s = NniSearcher("tpe", BRANIN_SPACE, metric="y", mode="min", seed=0, max_concurrent=3)
    for tid in "abc":
        s.suggest(tid)
    s.on_trial_complete("a", None, error=True)
    s.on_trial_complete("b", {"other": 1.0})
    s.on_trial_complete("c", {"y": float("nan")})
    assert s.counts == {"suggested": 3, "succeeded": 0, "failed": 1, "no_result": 2}
    assert len(drive(s, 25)) == 25  # TPE takes results after failures (no KeyError from its running set)


@pytest.mark.parametrize("include, outcome", [(True, "succeeded"), (False, "no_result")])
def test_an_early_stopped_trial_gives_its_last_intermediate_value_only_when_asked(include, outcome):
    s = NniSearcher("tpe", BRANIN_SPACE, metric="y", mode="min", seed=0, include_intermediate=include)
    s.suggest("a")
    s.on_trial_complete("a", {"y": 3.0, FINAL_KEY: False})
    assert s.counts[outcome] == 1


def test_searcher_state_survives_save_and_restore(tmp_path):
    s = NniSearcher("tpe", BRANIN_SPACE, metric="y", mode="min", seed=3)
    drive(s, 5)
    s.save(str(tmp_path / "s.pkl"))
    t = NniSearcher("tpe", BRANIN_SPACE, metric="y", mode="min", seed=99)
    t.restore(str(tmp_path / "s.pkl"))
    assert drive(s, 3) == drive(t, 3)


def test_tuner_arguments_are_checked_by_name():
    with pytest.raises(SpecError, match=r"algorithm_args\.population: nni:evolution has no argument 'population'"):
        make_tuner("evolution", {"population": 4})
    with pytest.raises(SpecError, match=r"algorithm: unknown NNI tuner 'smac'"):
        make_tuner("smac")
    with pytest.raises(SpecError, match=r"optimize_mode 'minimize' contradicts mode 'max'"):
        make_tuner("tpe", {"optimize_mode": "minimize"}, mode="max")
    tpe = make_tuner("tpe", {"tpe_args": {"constant_liar_type": "none"}})
    assert tpe.liar is None  # NNI's documented "none" works


def test_metric_values_follow_nnis_rules():
    assert metric_value(np.float64(0.5)) == 0.5 and metric_value({"default": 2, "x": 1}) == 2.0
    assert metric_value("0.5") is None and metric_value(True) is None and metric_value(float("inf")) is None
    assert plain({"a": np.int64(3), "b": [np.float32(0.5)]}) == {"a": 3, "b": [0.5]}


def test_make_searcher_knows_every_algorithm():
    assert isinstance(make_searcher("nni:tpe", BRANIN_SPACE, metric="y", mode="min"), NniSearcher)
    with pytest.raises(SpecError, match=r"algorithm: unknown algorithm 'bayes'; use one of nni:tpe"):
        make_searcher("bayes", BRANIN_SPACE, metric="y", mode="min")
    with pytest.raises(SpecError, match=r"only constants"):
        NniSearcher("tpe", {"a": 1}, metric="y", mode="min")


def test_ray_grid_and_random():
    grid = RaySpaceSearcher({"a": {"_type": "choice", "_value": [1, 2]}, "b": {"_type": "randint", "_value": [0, 2]}},
                            grid=True, metric="y", mode="max")
    configs = drive(grid, 10, f=lambda c: 0.0)
    assert sorted((c["a"], c["b"]) for c in configs) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    rand = [drive(RaySpaceSearcher(BRANIN_SPACE, grid=False, metric="y", mode="min", seed=s), 5) for s in (1, 1, 2)]
    assert rand[0] == rand[1] != rand[2]


def test_slots_pin_each_trial_to_a_free_slot():
    s = SlotSearcher(NniSearcher("random", BRANIN_SPACE, metric="y", mode="min", seed=0), slots=2)
    a, b = s.suggest("a"), s.suggest("b")
    assert (a[SLOT_KEY], b[SLOT_KEY]) == (0, 1) and s.suggest("c") is None
    s.on_trial_complete("a", {"y": 1.0})
    assert s.suggest("c")[SLOT_KEY] == 0 and s.searcher.counts["succeeded"] == 1


def test_schedulers_and_nni_assessors():
    assert make_scheduler(None) is None
    assert type(make_scheduler("asha", {"max_t": 4, "grace_period": 1})).__name__ == "AsyncHyperBandScheduler"
    assert type(make_scheduler("hyperband", {"max_t": 9})).__name__ == "HyperBandScheduler"
    assert type(make_scheduler("median_stopping", {"grace_period": 2})).__name__ == "MedianStoppingRule"
    pbt = make_scheduler("pbt", {"hyperparam_mutations": {"lr": [0.1, 0.01]}, "perturbation_interval": 2})
    assert type(pbt).__name__ == "PopulationBasedTraining"
    with pytest.raises(SpecError, match=r"scheduler_args: scheduler pbt refused"):
        make_scheduler("pbt", {})  # PBT needs hyperparam_mutations
    with pytest.raises(SpecError, match=r"scheduler_args\.patience: scheduler asha has no argument 'patience'"):
        make_scheduler("asha", {"patience": 3})
    with pytest.raises(SpecError, match=r"scheduler: unknown scheduler 'fifo2'"):
        make_scheduler("fifo2")
    assert from_nni_assessor("Medianstop", {"optimize_mode": "maximize", "start_step": 2}) == (
        "median_stopping", {"grace_period": 2})
    with pytest.raises(SpecError, match=r"assessor\.name: NNI assessor 'Curvefitting' has no equivalent"):
        from_nni_assessor("Curvefitting", {})
