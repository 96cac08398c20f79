"""NNI search spaces: the ten ``_type``s, their ``_value`` forms, and validation naming the bad key.

Pure data checks (no Ray, no numpy): the TuneJob spec validates its
``search_space`` with them, and cuberay/tune converts the checked space to Ray Tune.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from cuberay.errors import SpecError

# _type -> (names of the _value entries, one-line form for error messages)
NNI_TYPES: dict[str, tuple[tuple[str, ...], str]] = {
    "choice": ((), "[option, option, ...]"),
    "randint": (("lower", "upper"), "[lower, upper] integers, upper excluded"),
    "uniform": (("low", "high"), "[low, high] with low < high"),
    "quniform": (("low", "high", "q"), "[low, high, q] with low < high and q > 0"),
    "loguniform": (("low", "high"), "[low, high] with 0 < low < high"),
    "qloguniform": (("low", "high", "q"), "[low, high, q] with 0 < low < high and q > 0"),
    "normal": (("mu", "sigma"), "[mu, sigma] with sigma > 0"),
    "qnormal": (("mu", "sigma", "q"), "[mu, sigma, q] with sigma > 0 and q > 0"),
    "lognormal": (("mu", "sigma"), "[mu, sigma] with sigma > 0"),
    "qlognormal": (("mu", "sigma", "q"), "[mu, sigma, q] with sigma > 0 and q > 0"),
}


def is_parameter(value: Any) -> bool:
    """Whether ``value`` is an NNI parameter spec (a dict with ``_type``), not a constant."""
    return isinstance(value, Mapping) and "_type" in value


# ---------------------------------------------------------------------- validation


def validate(space: Any, where: str = "search_space") -> None:
    """Raise SpecError naming the first bad parameter, the rule and the expected form."""
    if not isinstance(space, Mapping):
        raise SpecError(f"the search space must be a mapping of parameter names to "
                        f"{{_type, _value}} specs, got {type(space).__name__}", path=where)
    for name, value in space.items():
        if is_parameter(value):
            _validate_one(value, f"{where}.{name}")
        elif isinstance(value, Mapping) and "_value" in value:
            raise SpecError(f"has _value but no _type; add _type (one of {', '.join(NNI_TYPES)})",
                            path=f"{where}.{name}")


def _validate_one(spec: Mapping[str, Any], where: str) -> None:
    kind = spec.get("_type")
    if not isinstance(kind, str) or kind not in NNI_TYPES:
        raise SpecError(f"unknown _type {kind!r}; use one of {', '.join(NNI_TYPES)}", path=where)
    extra = set(spec) - {"_type", "_value"}
    if extra:
        raise SpecError(f"unexpected key(s) {', '.join(sorted(map(str, extra)))}; an NNI parameter has only "
                        f"_type and _value", path=where)
    names, form = NNI_TYPES[kind]
    value = spec.get("_value")
    if not isinstance(value, (list, tuple)):
        raise SpecError(f"{kind} needs _value {form}, got {value!r}", path=where)
    if kind == "choice":
        _validate_choice(value, where)
        return
    if len(value) != len(names) or not all(_is_number(v) for v in value):
        raise SpecError(f"{kind} needs _value {form} ({len(names)} numbers), got {list(value)!r}", path=where)
    args = dict(zip(names, value))
    bad = _range_problem(kind, args)
    if bad:
        raise SpecError(f"{kind} needs _value {form}: {bad}, got {list(value)!r}", path=where)


def _validate_choice(options: Any, where: str) -> None:
    if not options:
        raise SpecError("choice needs at least one option: _value [option, option, ...]", path=where)
    for i, option in enumerate(options):
        if isinstance(option, Mapping) and "_name" in option:
            validate({k: v for k, v in option.items() if k != "_name"}, f"{where}[{i}]")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _range_problem(kind: str, a: dict[str, float]) -> str | None:
    if kind == "randint":
        if not all(float(v).is_integer() for v in a.values()):
            return "bounds must be integers"
        return None if a["lower"] < a["upper"] else "lower must be below upper"
    if "low" in a and not a["low"] < a["high"]:
        return "low must be below high"
    if kind in ("loguniform", "qloguniform") and a["low"] <= 0:
        return "low must be > 0 (log scale)"
    if "sigma" in a and a["sigma"] <= 0:
        return "sigma must be > 0"
    if "q" in a and a["q"] <= 0:
        return "q must be > 0"
    return None


def split_constants(space: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the NNI parameters, the constants): NNI tuners accept parameters only."""
    params = {k: v for k, v in space.items() if is_parameter(v)}
    return params, {k: v for k, v in space.items() if not is_parameter(v)}
