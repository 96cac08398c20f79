"""Trial schedulers a TuneJob names: Ray Tune's early stopping, on the trials' intermediate results.

Every NNI ``report_intermediate_result`` is one Tune result (one
``training_iteration``), so ``grace_period`` and ``max_t`` count NNI epochs.
NNI's ``Medianstop`` assessor maps to ``median_stopping`` (``start_step`` is
its ``grace_period``).
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping

from cuberay.errors import SpecError

SCHEDULERS = ("asha", "hyperband", "median_stopping", "pbt")


def _scheduler_class(name: str) -> type:
    from ray.tune import schedulers

    classes = {"asha": schedulers.ASHAScheduler, "hyperband": schedulers.HyperBandScheduler,
               "median_stopping": schedulers.MedianStoppingRule, "pbt": schedulers.PopulationBasedTraining}
    if name not in classes:
        raise SpecError(f"unknown scheduler {name!r}; use one of {', '.join(SCHEDULERS)} (or leave it out: "
                        f"every trial runs to its end)", path="scheduler")
    return classes[name]


def make_scheduler(name: str | None, args: Mapping[str, Any] | None = None) -> Any:
    """The Tune scheduler, or None (FIFO: no early stopping). metric/mode come from the TuneConfig."""
    if name is None:
        if args:
            raise SpecError("scheduler_args given without a scheduler; set scheduler", path="scheduler_args")
        return None
    cls = _scheduler_class(name)
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "metric", "mode")]
    for key in args or {}:
        if key not in accepted:
            raise SpecError(f"scheduler {name} has no argument {key!r}; it takes {', '.join(accepted)}",
                            path=f"scheduler_args.{key}")
    try:
        return cls(**dict(args or {}))
    except Exception as err:  # noqa: BLE001 - Ray's schedulers check with assert, ValueError and TuneError
        raise SpecError(f"scheduler {name} refused {dict(args or {})!r}: {err or 'invalid value'}",
                        path="scheduler_args") from err


def from_nni_assessor(name: str, class_args: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """(scheduler, scheduler_args) for an NNI assessor; only Medianstop has a Ray Tune equivalent."""
    if name.lower() != "medianstop":
        raise SpecError(f"NNI assessor {name!r} has no equivalent here; use Medianstop (median_stopping), or "
                        f"drop the assessor and set scheduler to one of {', '.join(SCHEDULERS)}",
                        path="assessor.name")
    args: dict[str, Any] = {}
    for key, value in (class_args or {}).items():
        if key == "start_step":
            args["grace_period"] = value
        elif key != "optimize_mode":  # the search's mode decides
            raise SpecError(f"Medianstop argument {key!r} is not supported; it takes optimize_mode and "
                            f"start_step", path=f"assessor.classArgs.{key}")
    return "median_stopping", args
