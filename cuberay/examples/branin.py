"""Branin, the classic 2-D test function (minimum 0.397887), as an NNI trial: instant to evaluate.

Used by ``cuberay demo``'s short NNI-TPE search and by benchmarks/bench_tune.py.
"""

from __future__ import annotations

import math

import nni

MINIMUM = 0.397887
SEARCH_SPACE = {"x1": {"_type": "uniform", "_value": [-5, 10]}, "x2": {"_type": "uniform", "_value": [0, 15]}}


def branin(x1: float, x2: float) -> float:
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def trial() -> None:
    """NNI style: ask for x1, x2; report Branin's value as the final result."""
    params = nni.get_next_parameter()
    nni.report_final_result(branin(params["x1"], params["x2"]))
