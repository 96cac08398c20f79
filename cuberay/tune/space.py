"""NNI search spaces <-> Ray Tune search spaces.

An NNI space maps a parameter name to ``{"_type": ..., "_value": [...]}``; plain
values are constants (passed to every trial unchanged). Where Ray Tune has a
domain with the same distribution it is used (``choice``, ``randint``,
``uniform``, ``loguniform``, ``normal``, ``qnormal``, and ``quniform`` /
``qloguniform`` whose bounds are multiples of q). Where it has none, a Ray
``Float`` domain carries a sampler that applies NNI's own formula
(nni/parameter_expressions.py): ``quniform`` / ``qloguniform`` with bounds off
the grid (NNI rounds, then clips to the bounds; Ray would shrink the bounds to
the grid), ``lognormal`` and ``qlognormal``.

Nested ``choice`` (options that are dicts with a ``_name``) keeps NNI's shape:
the trial receives the chosen dict with its own parameters sampled.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from cuberay.errors import SpecError
from cuberay.platform.spec.search_space import NNI_TYPES, is_parameter, split_constants, validate

__all__ = ["NNI_TYPES", "from_ray", "is_parameter", "nni_sample", "split_constants", "to_ray", "to_ray_grid",
           "validate"]

# ---------------------------------------------------------------------- samplers Ray lacks


def nni_sample(kind: str, value: list[float], rng: Any, size: int = 1) -> np.ndarray:
    """``size`` draws of NNI's formula for a numeric ``_type``, from a numpy RNG."""
    if kind in ("uniform", "quniform"):
        x = rng.uniform(value[0], value[1], size=size)
    elif kind in ("loguniform", "qloguniform"):
        x = np.exp(rng.uniform(math.log(value[0]), math.log(value[1]), size=size))
    elif kind in ("normal", "qnormal"):
        x = rng.normal(value[0], value[1], size=size)
    elif kind in ("lognormal", "qlognormal"):
        x = np.exp(rng.normal(value[0], value[1], size=size))
    else:
        raise ValueError(f"nni_sample does not handle {kind!r}")
    if kind.startswith("q"):
        x = np.round(x / value[2]) * value[2]
        if kind in ("quniform", "qloguniform"):
            x = np.clip(x, value[0], value[1])
    return x


def _ray_sampler_class() -> type:
    from ray.tune.search.sample import Sampler, _BackwardsCompatibleNumpyRng

    class NniSampler(Sampler):
        """A Ray Tune sampler drawing with NNI's formula (for types Ray has no domain for)."""

        def __init__(self, kind: str, value: list[float]):
            self.kind, self.value = kind, list(value)

        def sample(self, domain: Any, config: Any = None, size: int = 1, random_state: Any = None) -> Any:
            if not isinstance(random_state, _BackwardsCompatibleNumpyRng):
                random_state = _BackwardsCompatibleNumpyRng(random_state)
            items = nni_sample(self.kind, self.value, random_state, size)
            return [float(x) for x in items] if size > 1 else float(items[0])

        def __str__(self) -> str:
            return f"nni:{self.kind}{self.value}"

    return NniSampler


_NNI_SAMPLER: type | None = None


def _nni_domain(kind: str, value: list[float]) -> Any:
    global _NNI_SAMPLER
    from ray.tune.search.sample import Float

    if _NNI_SAMPLER is None:
        _NNI_SAMPLER = _ray_sampler_class()
    low, high = (value[0], value[1]) if kind in ("quniform", "qloguniform") else (None, None)
    domain = Float(low, high)
    domain.set_sampler(_NNI_SAMPLER(kind, value))
    return domain


# ---------------------------------------------------------------------- NNI -> Ray


def to_ray(space: Mapping[str, Any], where: str = "search_space") -> dict[str, Any]:
    """A Ray Tune ``param_space`` with the same distribution as the NNI ``space``."""
    validate(space, where)
    return {name: _to_ray_one(v) if is_parameter(v) else v for name, v in space.items()}


def _to_ray_one(spec: Mapping[str, Any]) -> Any:
    from ray import tune

    kind, v = spec["_type"], list(spec["_value"])
    if kind == "choice":
        return tune.choice([_nested_to_ray(o) for o in v])
    if kind == "randint":
        return tune.randint(int(v[0]), int(v[1]))
    if kind == "uniform":
        return tune.uniform(v[0], v[1])
    if kind == "loguniform":
        return tune.loguniform(v[0], v[1])
    if kind == "normal":
        return tune.randn(v[0], v[1])
    if kind == "qnormal":
        return tune.qrandn(v[0], v[1], v[2])
    if kind in ("quniform", "qloguniform") and _on_grid(v[0], v[2]) and _on_grid(v[1], v[2]):
        # Bounds on the grid: Ray's quantisation is NNI's (round(x / q) * q, never outside).
        return (tune.quniform if kind == "quniform" else tune.qloguniform)(v[0], v[1], v[2])
    return _nni_domain(kind, v)


def _nested_to_ray(option: Any) -> Any:
    if isinstance(option, Mapping) and "_name" in option:
        return {k: _to_ray_one(x) if is_parameter(x) else x for k, x in option.items()}
    return option


def _on_grid(bound: float, q: float) -> bool:
    return math.isclose(round(bound / q) * q, bound, rel_tol=1e-9, abs_tol=1e-12)


def to_ray_grid(space: Mapping[str, Any], where: str = "search_space") -> dict[str, Any]:
    """A Ray grid over an NNI space of choice and randint parameters (Ray's ``grid`` algorithm)."""
    from ray import tune

    validate(space, where)
    out: dict[str, Any] = {}
    for name, spec in space.items():
        if not is_parameter(spec):
            out[name] = spec
        elif spec["_type"] == "choice":
            out[name] = tune.grid_search(list(spec["_value"]))
        elif spec["_type"] == "randint":
            out[name] = tune.grid_search(list(range(int(spec["_value"][0]), int(spec["_value"][1]))))
        else:
            raise SpecError(f"algorithm grid enumerates choice and randint only, got {spec['_type']}; use "
                            f"nni:gridsearch (it grids continuous ranges too) or make it a choice",
                            path=f"{where}.{name}")
    return out


# ---------------------------------------------------------------------- Ray -> NNI


def from_ray(param_space: Mapping[str, Any], where: str = "param_space") -> dict[str, Any]:
    """The NNI form of a Ray Tune ``param_space`` (constants stay constants)."""
    return {name: _from_ray_one(v, f"{where}.{name}") for name, v in param_space.items()}


def _from_ray_one(value: Any, where: str) -> Any:
    from ray.tune.search.sample import Categorical, Domain, Float, Integer, LogUniform, Normal, Quantized

    if isinstance(value, Mapping) and set(value) == {"grid_search"}:
        return {"_type": "choice", "_value": list(value["grid_search"])}
    if not isinstance(value, Domain):
        return value
    sampler = value.get_sampler()
    if _NNI_SAMPLER is not None and isinstance(sampler, _NNI_SAMPLER):
        return {"_type": sampler.kind, "_value": list(sampler.value)}
    if isinstance(value, Categorical):
        return {"_type": "choice", "_value": list(value.categories)}
    q = sampler.q if isinstance(sampler, Quantized) else None
    base = sampler.get_sampler() if q is not None else sampler
    if isinstance(value, Integer) and q is None and not isinstance(base, LogUniform):
        return {"_type": "randint", "_value": [int(value.lower), int(value.upper)]}
    if isinstance(value, Float):
        if isinstance(base, Normal):
            return {"_type": "qnormal" if q else "normal", "_value": [base.mean, base.sd] + ([q] if q else [])}
        kind = "loguniform" if isinstance(base, LogUniform) else "uniform"
        if q:
            return {"_type": "q" + kind, "_value": [value.lower, value.upper, q]}
        return {"_type": kind, "_value": [value.lower, value.upper]}
    raise SpecError(f"{type(value).__name__} with sampler {sampler} has no NNI form; NNI spaces have "
                    f"{', '.join(NNI_TYPES)}", path=where)
