"""Guarded rollout: the weight plan, the health verdict and the automatic rollback."""

from __future__ import annotations

import pytest

from cuberay.serve import rollout
from cuberay.serve.rollout import Thresholds


def test_plan_moves_the_target_to_100_keeping_the_others_ratio() -> None:
    steps = rollout.plan({"v1": 60, "v2": 30, "v3": 10}, "v3", [25, 50, 100])
    assert steps == [{"v3": 25, "v1": 50, "v2": 25}, {"v3": 50, "v1": 33, "v2": 17},
                     {"v1": 0, "v2": 0, "v3": 100}]
    assert all(sum(s.values()) == 100 for s in steps)


def test_plan_with_a_step_count_and_from_zero() -> None:
    assert [s["v2"] for s in rollout.plan({"v1": 100, "v2": 0}, "v2", 4)] == [25, 50, 75, 100]
    assert [s["v2"] for s in rollout.plan({"v1": 90, "v2": 10}, "v2", [5, 50, 100])] == [50, 100]


def test_plan_refuses_bad_steps_and_unknown_versions() -> None:
    with pytest.raises(ValueError, match="end at 100"):
        rollout.plan({"v1": 100, "v2": 0}, "v2", [10, 50])
    with pytest.raises(ValueError, match="rise strictly"):
        rollout.plan({"v1": 100, "v2": 0}, "v2", [50, 10, 100])
    with pytest.raises(ValueError, match="not one of"):
        rollout.plan({"v1": 100}, "v9", 2)


def test_verdict_needs_enough_requests_then_checks_errors_and_p99() -> None:
    limits = Thresholds(max_error_rate=0.1, max_p99_ms=50, min_requests=10)
    assert rollout.verdict({"v2": {"count": 5, "errors": 5, "error_rate": 1.0}}, "v2", limits) is None
    assert "max_error_rate" in rollout.verdict({"v2": {"count": 20, "errors": 5, "error_rate": 0.25}}, "v2", limits)
    assert "p99" in rollout.verdict({"v2": {"count": 20, "error_rate": 0.0, "p99_ms": 80}}, "v2", limits)
    assert rollout.verdict({"v2": {"count": 20, "error_rate": 0.05, "p99_ms": 20}}, "v2", limits) is None


class _Clock:
    """Fake time: ``wait`` moves it on, so a rollout of minutes runs in no time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def _drive(stats_for_step, limits: Thresholds = Thresholds(min_requests=1)):
    """A rollout v1 -> v2 in steps 10, 50, 100 with 5 s intervals; ``stats_for_step(step, clock)`` are the
    figures the app reports while step ``step`` (1-based) runs."""
    applied = []
    clock = _Clock()

    def stats(_window):
        return stats_for_step(len([a for a in applied if a[1].startswith("rollout")]), clock)

    outcome = rollout.run({"v1": 100, "v2": 0}, "v2", [10, 50, 100], 5.0, limits,
                          apply=lambda w, note: applied.append((w, note)), stats=stats, wait=clock.wait,
                          clock=lambda: clock.now, poll_s=1.0)
    return outcome, applied, clock


def test_a_healthy_rollout_completes() -> None:
    outcome, applied, clock = _drive(lambda step, clock: {"v2": {"count": 50, "error_rate": 0.0}})
    assert outcome.completed and outcome.reason is None
    assert [w["v2"] for w, _ in applied] == [10, 50, 100]
    assert [note for _, note in applied] == [f"rollout to v2: step {n} of 3" for n in (1, 2, 3)]
    assert clock.waits == [5.0, 5.0, 5.0]


def test_a_breaking_step_rolls_back_to_the_weights_before_the_rollout() -> None:
    outcome, applied, _ = _drive(lambda step, clock: {"v2": {"count": 50, "errors": 25 if step >= 2 else 0,
                                                            "error_rate": 0.5 if step >= 2 else 0.0}})
    assert not outcome.completed
    assert "max_error_rate" in outcome.reason
    assert [w for w, _ in applied] == [{"v1": 90, "v2": 10}, {"v1": 50, "v2": 50}, {"v1": 100, "v2": 0}]
    assert applied[-1][1].startswith("automatic rollback")


def test_a_step_without_requests_never_passes_it_times_out_and_rolls_back() -> None:
    """No data is no health: a target version at 0 requests must not pass its step."""
    limits = Thresholds(min_requests=10, step_timeout_s=30.0)
    outcome, applied, clock = _drive(lambda step, clock: {"v2": {"count": 0, "error_rate": 0.0}}, limits)
    assert not outcome.completed
    assert "0 of the 10 requests" in outcome.reason and "rollout.step_timeout" in outcome.reason
    assert [w for w, _ in applied] == [{"v1": 90, "v2": 10}, {"v1": 100, "v2": 0}]
    assert applied[-1][1] == f"automatic rollback: {outcome.reason}"
    assert clock.now == 30.0  # judged at the timeout, not before it and not long after


def test_a_step_waits_past_its_interval_until_the_requests_arrive() -> None:
    """Thin traffic: each step's min_requests arrive 12 s after the step started, within the 30 s timeout."""
    starts: dict[int, float] = {}

    def stats(step: int, clock: _Clock) -> dict:
        starts.setdefault(step, clock.now - 5.0)  # first asked right after the 5 s interval
        return {"v2": {"count": 10 if clock.now - starts[step] >= 12 else 3, "error_rate": 0.0}}

    outcome, applied, clock = _drive(stats, Thresholds(min_requests=10, step_timeout_s=30.0))
    assert outcome.completed, outcome.reason
    assert [w["v2"] for w, _ in applied] == [10, 50, 100]
    assert clock.now == 36.0  # 3 steps x 12 s: each passed as soon as its requests were in


def test_errors_before_min_requests_do_not_judge_the_step_early() -> None:
    """A few failures out of too few requests prove nothing either way: the step waits for its data."""
    seen = []

    def stats(step: int, clock: _Clock) -> dict:
        seen.append(clock.now)
        count = 2 if len(seen) < 3 else 20
        return {"v2": {"count": count, "errors": 1, "error_rate": 1 / count}}

    outcome, _, _ = _drive(stats, Thresholds(min_requests=10, max_error_rate=0.1, step_timeout_s=60.0))
    assert outcome.completed, outcome.reason  # 1 error of 20 is 5 %, under the 10 % limit
    assert seen[:3] == [5.0, 6.0, 7.0]


def test_step_timeout_is_a_duration_between_the_interval_and_what_an_app_keeps() -> None:
    from cuberay.errors import SpecError
    from cuberay.platform.spec import load_spec
    from cuberay.platform.spec.serve import Rollout

    assert Rollout().step_timeout_s == 300.0 and Rollout(step_timeout="90s").step_timeout_s == 90.0
    assert "min_requests" in Rollout.model_fields["step_timeout"].description
    app = {"apiVersion": "cuberay.io/v1alpha1", "kind": "ServeApp", "metadata": {"name": "web", "tenant": "t"},
           "spec": {"versions": [{"name": "v1", "model": "m.x:Y"}], "rollout": {"interval": "1m"}}}
    for timeout, problem in (("30s", "shorter than interval"), ("11m", "over 600s")):
        app["spec"]["rollout"]["step_timeout"] = timeout
        with pytest.raises(SpecError, match=problem):
            load_spec(app)
