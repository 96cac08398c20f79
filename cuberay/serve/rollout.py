"""Guarded rollout: move traffic to a version step by step, check health at each step, roll back.

Everything here is pure: the Serve side is passed in as callables (``apply`` the
weights, read the ``stats`` of the last seconds, ``wait``, read the ``clock``), so the
decisions are unit-tested with a fake clock and the live path uses the same code.

A step passes only on data: the target version must answer ``min_requests`` in it. A
step that has not had them by ``step_timeout_s`` after it started halts the rollout and
restores the weights from before it, like a broken threshold does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from cuberay.platform.policy.serving import step_note

Weights = dict[str, int]


@dataclass(frozen=True)
class Thresholds:
    """When a step counts as broken. ``min_requests``: fewer samples than this prove nothing, and a step that
    does not get them within ``step_timeout_s`` fails."""

    max_error_rate: float = 0.05
    max_p99_ms: float | None = None
    min_requests: int = 10
    step_timeout_s: float = 300.0


def integer_percentages(shares: Mapping[str, float]) -> Weights:
    """Round shares that sum to 100 into integers that still sum to 100 (largest remainder)."""
    total = sum(shares.values())
    if total <= 0:
        raise ValueError(f"weights {dict(shares)} sum to {total}; they must sum to 100")
    scaled = {name: share * 100 / total for name, share in shares.items()}
    floors = {name: int(value) for name, value in scaled.items()}
    short = 100 - sum(floors.values())
    by_remainder = sorted(scaled, key=lambda n: (scaled[n] - floors[n], n), reverse=True)
    for name in by_remainder[:short]:
        floors[name] += 1
    return floors


def step_percentages(steps: int | Sequence[float], start: float) -> list[float]:
    """The target version's share after each step: a count of even steps, or explicit percentages."""
    if isinstance(steps, int):
        if steps < 1:
            raise ValueError(f"rollout steps must be at least 1, got {steps}")
        gap = (100 - start) / steps
        points = [start + gap * (i + 1) for i in range(steps)]
    else:
        points = [float(p) for p in steps]
        if not points or any(b <= a for a, b in zip(points, points[1:])) or points[-1] != 100:
            raise ValueError(f"rollout steps {list(steps)} must rise strictly and end at 100")
        points = [p for p in points if p > start] or [100.0]
    return points


def plan(current: Mapping[str, int], target: str, steps: int | Sequence[float]) -> list[Weights]:
    """The weights after each step; the other versions keep their ratio to each other as they shrink."""
    if target not in current:
        raise ValueError(f"version {target!r} is not one of {sorted(current)}")
    others = {name: w for name, w in current.items() if name != target}
    others_total = sum(others.values())
    result = []
    for share in step_percentages(steps, float(current[target])):
        rest = 100 - share
        shares = {target: share}
        for name, w in others.items():
            shares[name] = rest * (w / others_total if others_total else 1 / len(others))
        result.append(integer_percentages(shares) if rest > 0 else {**{n: 0 for n in others}, target: 100})
    return result


def verdict(stats: Mapping[str, Mapping], version: str, limits: Thresholds) -> str | None:
    """None when ``version`` looks healthy in ``stats`` (per-version window figures), else why not."""
    figures = stats.get(version) or {}
    count = int(figures.get("count") or 0)
    if count < limits.min_requests:
        return None
    rate = float(figures.get("error_rate") or 0.0)
    if rate > limits.max_error_rate:
        return (f"version {version!r} failed {figures.get('errors')} of {count} requests "
                f"({rate:.1%} > max_error_rate {limits.max_error_rate:.1%})")
    p99 = figures.get("p99_ms")
    if limits.max_p99_ms is not None and p99 is not None and p99 > limits.max_p99_ms:
        return f"version {version!r} p99 latency {p99:.0f} ms > max_p99_ms {limits.max_p99_ms:.0f}"
    return None


@dataclass
class Outcome:
    """How a rollout ended: every weight set applied, in order, and why it stopped if it did."""

    completed: bool
    applied: list[Weights] = field(default_factory=list)
    reason: str | None = None


def step_problem(stats: Callable[[float], Mapping[str, Mapping]], version: str, limits: Thresholds,
                 elapsed_s: float) -> tuple[bool, str | None]:
    """(judged, problem) of a step ``elapsed_s`` after it started: judged once the version has ``min_requests``
    in it (problem: a broken limit, else None), or once ``step_timeout_s`` has passed without them."""
    figures = stats(elapsed_s)
    problem = verdict(figures, version, limits)
    count = int((figures.get(version) or {}).get("count") or 0)
    if problem or count >= limits.min_requests:
        return True, problem
    if elapsed_s >= limits.step_timeout_s:
        return True, (f"version {version!r} answered {count} of the {limits.min_requests} requests "
                      f"(rollout.min_requests) a step needs within {limits.step_timeout_s:g}s "
                      f"(rollout.step_timeout); without data the step cannot pass")
    return False, None


def run(current: Mapping[str, int], target: str, steps: int | Sequence[float], interval_s: float,
        limits: Thresholds, *, apply: Callable[[Weights, str], None],
        stats: Callable[[float], Mapping[str, Mapping]], wait: Callable[[float], None],
        clock: Callable[[], float], poll_s: float = 2.0) -> Outcome:
    """Apply each step, wait ``interval_s``, then judge the target version as soon as it has ``min_requests``
    (checking every ``poll_s``); restore ``current`` on a breach or when a step times out without them.

    ``apply(weights, note)`` changes the live weights; ``stats(seconds)`` returns the
    per-version figures of the last ``seconds``; ``clock()`` is monotonic seconds.
    """
    before = dict(current)
    outcome = Outcome(completed=False)
    weight_plan = plan(current, target, steps)
    for number, weights in enumerate(weight_plan, start=1):
        apply(weights, step_note(target, number, len(weight_plan)))
        outcome.applied.append(weights)
        started = clock()
        wait(interval_s)
        while True:
            elapsed = clock() - started
            judged, problem = step_problem(stats, target, limits, elapsed)
            if judged:
                break
            wait(max(0.0, min(poll_s, limits.step_timeout_s - elapsed)))
        if problem:
            apply(before, f"automatic rollback: {problem}")
            outcome.applied.append(before)
            outcome.reason = problem
            return outcome
    outcome.completed = True
    return outcome
