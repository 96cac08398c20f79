"""NNI <-> Ray Tune search spaces: conversion, errors, and sampling checked against NNI's own formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from nni import parameter_expressions as nni_expr
from scipy import stats

from cuberay.errors import SpecError
from cuberay.tune import space as spaces

N = 4000
P_MIN = 1e-4  # a correct sampler fails one of these tests about once in 10,000 runs

EVERY_TYPE = {
    "c": {"_type": "choice", "_value": ["relu", "tanh", 3]},
    "r": {"_type": "randint", "_value": [2, 7]},
    "u": {"_type": "uniform", "_value": [-1.0, 3.0]},
    "qu": {"_type": "quniform", "_value": [0.0, 10.0, 2.5]},
    "lu": {"_type": "loguniform", "_value": [1e-4, 1e-1]},
    "qlu": {"_type": "qloguniform", "_value": [1.0, 100.0, 1.0]},
    "n": {"_type": "normal", "_value": [1.0, 2.0]},
    "qn": {"_type": "qnormal", "_value": [0.0, 3.0, 0.5]},
    "ln": {"_type": "lognormal", "_value": [0.0, 0.5]},
    "qln": {"_type": "qlognormal", "_value": [1.0, 0.5, 0.5]},
    "constant": 7,
}


def ray_samples(spec: dict, seed: int = 0) -> np.ndarray:
    domain = spaces.to_ray({"x": spec})["x"]
    return np.asarray(domain.sample(size=N, random_state=np.random.default_rng(seed)), dtype=float)


def nni_samples(spec: dict, seed: int = 1) -> np.ndarray:
    rs = np.random.RandomState(seed)
    fn = getattr(nni_expr, spec["_type"])
    return np.array([fn(*spec["_value"], rs) for _ in range(N)], dtype=float)


def test_every_type_round_trips_through_ray():
    ray_space = spaces.to_ray(EVERY_TYPE)
    assert ray_space["constant"] == 7
    assert spaces.from_ray(ray_space) == EVERY_TYPE


def test_exact_types_use_ray_domains_and_the_others_nni_samplers():
    from ray.tune.search.sample import Categorical, Float, Integer

    ray_space = spaces.to_ray(EVERY_TYPE)
    assert isinstance(ray_space["c"], Categorical) and isinstance(ray_space["r"], Integer)
    assert type(ray_space["qu"].get_sampler()).__name__ == "Quantized"      # bounds on the grid
    for name in ("ln", "qln"):
        assert type(ray_space[name].get_sampler()).__name__ == "NniSampler"
    off_grid = spaces.to_ray({"x": {"_type": "quniform", "_value": [0.05, 1.07, 0.1]}})["x"]
    assert isinstance(off_grid, Float) and type(off_grid.get_sampler()).__name__ == "NniSampler"


@pytest.mark.parametrize("name", ["u", "lu", "n", "ln"])
def test_continuous_samples_follow_nnis_distribution(name):
    spec = EVERY_TYPE[name]
    assert stats.ks_2samp(ray_samples(spec), nni_samples(spec)).pvalue > P_MIN


@pytest.mark.parametrize("spec", [
    EVERY_TYPE["r"], EVERY_TYPE["qu"], EVERY_TYPE["qlu"], EVERY_TYPE["qn"], EVERY_TYPE["qln"],
    # off the grid: NNI rounds then clips, so 0.05 and 1.07 themselves carry mass; Ray alone would not
    {"_type": "quniform", "_value": [0.05, 1.07, 0.1]},
    {"_type": "qloguniform", "_value": [0.5, 20.0, 3.0]},
], ids=lambda s: f"{s['_type']}{s['_value']}")
def test_quantised_and_integer_samples_have_nnis_frequencies(spec):
    ours, theirs = ray_samples(spec), nni_samples(spec)
    values = sorted(set(np.round(ours, 9)) | set(np.round(theirs, 9)))
    table = np.array([[np.sum(np.isclose(s, v)) for v in values] for s in (ours, theirs)]) + 0.5
    assert set(np.round(ours, 9)) <= set(values)
    assert stats.chi2_contingency(table).pvalue > P_MIN
    if spec["_type"] in ("quniform", "qloguniform"):
        low, high, q = spec["_value"]
        assert ours.min() >= low and ours.max() <= high
        inner = ours[(ours > low) & (ours < high)]
        assert np.allclose(np.round(inner / q) * q, inner)


def test_log_scale_puts_half_the_mass_below_the_geometric_mean():
    low, high = EVERY_TYPE["lu"]["_value"]
    xs = ray_samples(EVERY_TYPE["lu"])
    assert xs.min() >= low and xs.max() <= high
    assert abs(np.mean(xs < math.sqrt(low * high)) - 0.5) < 0.03


def test_randint_excludes_its_upper_bound_like_nni():
    xs = ray_samples(EVERY_TYPE["r"])
    assert set(xs.astype(int)) == {2, 3, 4, 5, 6}


def test_choice_is_uniform_over_options():
    domain = spaces.to_ray({"c": EVERY_TYPE["c"]})["c"]
    xs = domain.sample(size=N, random_state=np.random.default_rng(0))
    counts = [sum(1 for x in xs if x == o) for o in ("relu", "tanh", 3)]
    assert stats.chisquare(counts).pvalue > P_MIN


def test_nested_choice_samples_the_chosen_options_own_parameters():
    from ray.tune.search.variant_generator import generate_variants

    nested = {"opt": {"_type": "choice", "_value": [
        {"_name": "sgd", "lr": {"_type": "loguniform", "_value": [0.001, 0.1]}}, {"_name": "adam"}]}}
    rng = np.random.default_rng(0)
    seen = [next(iter(generate_variants(spaces.to_ray(nested), random_state=rng)))[1]["opt"] for _ in range(50)]
    assert {o["_name"] for o in seen} == {"sgd", "adam"}
    assert all(0.001 <= o["lr"] <= 0.1 for o in seen if o["_name"] == "sgd")


def test_grid_enumerates_choice_and_randint_and_refuses_continuous():
    grid = spaces.to_ray_grid({"a": {"_type": "choice", "_value": [1, 2]}, "b": {"_type": "randint", "_value": [0, 3]},
                               "k": "x"})
    assert grid["a"] == {"grid_search": [1, 2]} and grid["b"] == {"grid_search": [0, 1, 2]} and grid["k"] == "x"
    with pytest.raises(SpecError, match=r"search_space\.u: .*choice and randint only"):
        spaces.to_ray_grid({"u": EVERY_TYPE["u"]})


@pytest.mark.parametrize("spec, pattern", [
    ({"_type": "logunif", "_value": [1, 2]}, r"search_space\.x: unknown _type 'logunif'; use one of choice"),
    ({"_type": "uniform", "_value": [1]}, r"search_space\.x: uniform needs _value \[low, high\].*got \[1\]"),
    ({"_type": "quniform", "_value": [0, 1]}, r"quniform needs _value \[low, high, q\]"),
    ({"_type": "randint", "_value": [1.5, 3]}, r"bounds must be integers"),
    ({"_type": "randint", "_value": [3, 3]}, r"lower must be below upper"),
    ({"_type": "loguniform", "_value": [0, 1]}, r"low must be > 0"),
    ({"_type": "normal", "_value": [0, -1]}, r"sigma must be > 0"),
    ({"_type": "qnormal", "_value": [0, 1, 0]}, r"q must be > 0"),
    ({"_type": "choice", "_value": []}, r"choice needs at least one option"),
    ({"_type": "choice", "_value": "abc"}, r"choice needs _value \[option"),
    ({"_type": "uniform", "_value": [0, 1], "q": 2}, r"unexpected key\(s\) q"),
    ({"_value": [0, 1]}, r"has _value but no _type"),
    ({"_type": "choice", "_value": [{"_name": "a", "y": {"_type": "bad", "_value": [1]}}]},
     r"search_space\.x\[0\]\.y: unknown _type 'bad'"),
])
def test_bad_specs_name_the_key_and_the_expected_form(spec, pattern):
    with pytest.raises(SpecError, match=pattern):
        spaces.validate({"x": spec})


def test_from_ray_refuses_what_nni_cannot_express():
    from ray import tune

    assert spaces.from_ray({"g": tune.grid_search([1, 2])}) == {"g": {"_type": "choice", "_value": [1, 2]}}
    with pytest.raises(SpecError, match=r"param_space\.f: .*no NNI form"):
        spaces.from_ray({"f": tune.sample_from(lambda _: 1)})
