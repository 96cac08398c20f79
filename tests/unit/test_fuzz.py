"""Hostile input, fuzzed (a fast subset; `benchmarks/bench_fuzz.py` runs 10,000+ per target): every input is
accepted or refused with a CuberayError, and a refused document names the field path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzzing import TARGETS

FAST = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzzed_input_is_accepted_or_refused_with_a_field_path(name: str) -> None:
    strategy, target = TARGETS[name]

    @FAST
    @given(strategy)
    def run(value: Any) -> None:
        target(value)

    run()


@pytest.mark.parametrize("text", [
    "submit_time,duration,gpus,workers\n0,1,1,inf\n",                     # int(float('inf')) overflowed
    "timestamp,duration,num_gpus,cluster\n2017-10-03 14:00:00,1,1e400,vc\n",
    "submit_time,duration,gpus\n0,1,inf\n",                                  # math.ceil(inf) in the row check
])
def test_infinite_counts_in_a_trace_are_refused_at_their_line(text: str, tmp_path) -> None:
    from cuberay.errors import SpecError
    from cuberay.platform.sim.inputs import load_trace

    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(SpecError) as refused:
        load_trace(path)
    assert refused.value.path == "line 2" and ("infinity" in str(refused.value) or "finite" in str(refused.value))


def test_a_search_space_type_that_is_not_text_is_a_spec_error() -> None:  # found by the fuzzer: TypeError
    from cuberay.errors import SpecError
    from cuberay.platform.spec.search_space import validate

    with pytest.raises(SpecError) as refused:
        validate({"x1": {"_type": [], "_value": [-5, 10]}})
    assert refused.value.path == "search_space.x1"
