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


def _drive(stats_for_step):
    applied, waits = [], []

    def stats(_window):
        return stats_for_step(len([a for a in applied if a[1].startswith("rollout")]))

    outcome = rollout.run({"v1": 100, "v2": 0}, "v2", [10, 50, 100], 5.0, Thresholds(min_requests=1),
                          apply=lambda w, note: applied.append((w, note)), stats=stats, wait=waits.append)
    return outcome, applied, waits


def test_a_healthy_rollout_completes() -> None:
    outcome, applied, waits = _drive(lambda step: {"v2": {"count": 50, "error_rate": 0.0}})
    assert outcome.completed and outcome.reason is None
    assert [w["v2"] for w, _ in applied] == [10, 50, 100]
    assert waits == [5.0, 5.0, 5.0]


def test_a_breaking_step_rolls_back_to_the_weights_before_the_rollout() -> None:
    outcome, applied, _ = _drive(lambda step: {"v2": {"count": 50, "errors": 25 if step >= 2 else 0,
                                                     "error_rate": 0.5 if step >= 2 else 0.0}})
    assert not outcome.completed
    assert "max_error_rate" in outcome.reason
    assert [w for w, _ in applied] == [{"v1": 90, "v2": 10}, {"v1": 50, "v2": 50}, {"v1": 100, "v2": 0}]
    assert applied[-1][1].startswith("automatic rollback")
