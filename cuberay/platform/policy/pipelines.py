"""Pipeline decisions as pure code: which steps start, skip or fail; when a run ends; which ticks become runs.

The pipeline driver (``cuberay/platform/control/pipeline_driver.py``) records
states in the store and submits jobs; everything it decides comes from here,
so it is tested without Ray or a database, with an injected clock.

Steps (Argo's and CubeStudio's meaning): a step is ready when every
``depends_on`` step SUCCEEDED or was SKIPPED; a failed, cancelled or
upstream-failed dependency makes it UPSTREAM_FAILED. ``skip`` and a false
``when`` skip it without taking a slot; at most ``parallelism`` steps of a run
run at once, ready ones in dependency order.

Schedules (CubeStudio's ``upload_timerun``): ticks of the cron from ``start``
(every missed one with ``catchup``, else only the latest) become WAITING runs,
each tick once. Manual runs are ordered among the ticks by their request time
and follow the same rules, and do not replace running runs. In order of
precedence: ``keep_last: n`` expires waiting runs and cancels running runs
older than the latest n; ``depends_on_past`` starts the earliest waiting run
only once the run before it SUCCEEDED (a FAILED one stops the chain; a
cancelled or expired one does not); and at most ``max_active_runs`` run at once,
oldest first.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from croniter import croniter

import cuberay.platform.spec.templates as tpl
from cuberay.platform.policy.run_states import RunState, StepState
from cuberay.platform.spec.pipeline import PipelineSpec, Schedule

MAX_TICKS_PER_CALL = 1000  # a start years back with a per-minute cron backfills over several calls


_DONE_OK = (StepState.SUCCEEDED, StepState.SKIPPED)
_BLOCKING = (StepState.FAILED, StepState.CANCELLED, StepState.UPSTREAM_FAILED)


# ---------------------------------------------------------------- steps of one run


@dataclass(frozen=True)
class StepChange:
    name: str
    state: StepState
    reason: str


@dataclass(frozen=True)
class Advance:
    """What to do in a run now: state changes made without running anything, then steps to start."""

    changes: list[StepChange] = field(default_factory=list)
    start: list[str] = field(default_factory=list)


def advance(spec: PipelineSpec, states: Mapping[str, StepState], context: Mapping[str, Any]) -> Advance:
    """Decide skips, upstream failures and which ready steps start (within ``parallelism``).

    ``context`` is the template context (``steps.X.outputs`` of the steps that ran) for ``when``.
    """
    now = dict(states)
    changes: list[StepChange] = []
    ready: list[str] = []
    order = spec.order()
    changed = True
    while changed:
        changed = False
        for name in order:
            if now[name] != StepState.PENDING or name in ready:
                continue
            step = spec.step(name)
            deps = {d: now[d] for d in step.depends_on}
            blocked = sorted(d for d, s in deps.items() if s in _BLOCKING)
            if blocked:
                change = StepChange(name, StepState.UPSTREAM_FAILED, f"upstream step(s) {', '.join(blocked)} "
                                                                     f"did not succeed")
            elif not all(s in _DONE_OK for s in deps.values()):
                continue
            elif step.skip:
                change = StepChange(name, StepState.SKIPPED, "skip: true")
            elif step.when is not None:
                try:
                    holds = tpl.condition(step.when, _with_states(context, now))
                except tpl.TemplateError as exc:
                    change = StepChange(name, StepState.FAILED, f"its when condition failed: {exc}")
                else:
                    if holds:
                        ready.append(name)
                        continue
                    change = StepChange(name, StepState.SKIPPED, f"when {step.when!r} is false")
            else:
                ready.append(name)
                continue
            now[name] = change.state
            changes.append(change)
            changed = True
    running = sum(1 for s in now.values() if s == StepState.RUNNING)
    return Advance(changes, ready[:max(0, spec.parallelism - running)])


def _with_states(context: Mapping[str, Any], states: Mapping[str, StepState]) -> dict[str, Any]:
    steps = {name: {**dict(context.get("steps", {}).get(name) or {"outputs": {}, "dir": ""}), "state": s.value}
             for name, s in states.items()}
    return {**context, "steps": steps}


def outcome(states: Mapping[str, StepState], reasons: Mapping[str, str]) -> tuple[RunState, str] | None:
    """The run's end once every step is terminal: SUCCEEDED, or FAILED naming the steps that failed and why."""
    if not all(s.is_terminal for s in states.values()):
        return None
    failed = [n for n, s in states.items() if s in (StepState.FAILED, StepState.CANCELLED)]
    if not failed:
        skipped = sum(1 for s in states.values() if s == StepState.SKIPPED)
        return RunState.SUCCEEDED, f"{len(states) - skipped} step(s) succeeded, {skipped} skipped"
    upstream = sorted(n for n, s in states.items() if s == StepState.UPSTREAM_FAILED)
    text = "; ".join(f"step {n} {states[n].value.lower()}: {reasons.get(n) or 'no reason recorded'}"
                     for n in failed)
    if upstream:
        text += f"; not run: {', '.join(upstream)}"
    return RunState.FAILED, text


def should_retry(attempt: int, retries: int) -> bool:
    """Attempt ``attempt`` (1-based) failed: is there another one?"""
    return attempt <= retries


def timed_out(timeout_s: float | None, started: float | None, now: float) -> bool:
    """An attempt's run time (from its job's start, not its wait in the queue) is past the step's timeout."""
    return timeout_s is not None and started is not None and now - started > timeout_s


# ---------------------------------------------------------------- schedules


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc)


def due_ticks(schedule: Schedule, last_tick: float | None, submitted: float, now: float) -> list[float]:
    """Cron ticks not yet recorded that are due at ``now`` (epoch seconds, oldest first).

    From ``schedule.start`` (or ``submitted``) on, strictly after ``last_tick``. Without ``catchup`` only the
    latest due tick is returned: the ones before it are skipped for good.
    """
    floor = _counted_after(schedule, last_tick, submitted)
    if not schedule.catchup:
        latest = croniter(schedule.cron, _utc(now + 1)).get_prev(float)
        return [latest] if floor < latest <= now else []
    it = croniter(schedule.cron, _utc(floor))
    ticks: list[float] = []
    while len(ticks) < MAX_TICKS_PER_CALL:
        tick = it.get_next(float)
        if tick > now:
            break
        ticks.append(tick)
    return ticks


def next_ticks(schedule: Schedule, last_tick: float | None, submitted: float, now: float,
               count: int = 3) -> list[float]:
    """The next ``count`` ticks still to come after ``now`` (epoch seconds, soonest first): what a person planning
    around the schedule wants to see. Ticks due already (a backfill the next loop makes) are not among them."""
    it = croniter(schedule.cron, _utc(max(now, _counted_after(schedule, last_tick, submitted))))
    return [it.get_next(float) for _ in range(count)]


def _counted_after(schedule: Schedule, last_tick: float | None, submitted: float) -> float:
    """Ticks strictly after this time count: from ``schedule.start`` (or ``submitted``) on, after ``last_tick``."""
    start = schedule.start.timestamp() if schedule.start is not None else submitted
    return start - 1 if last_tick is None else max(last_tick, start - 1)  # a start exactly on a tick counts


@dataclass(frozen=True)
class RunView:
    """What the schedule policy needs to know of one run."""

    id: str
    execution_time: float  # the tick, or the time a manual run was requested
    state: RunState


@dataclass(frozen=True)
class ScheduleDecision:
    start: list[str] = field(default_factory=list)
    cancel: list[tuple[str, str]] = field(default_factory=list)   # running runs to cancel, with why
    expire: list[tuple[str, str]] = field(default_factory=list)   # waiting runs dropped, with why


def decide_runs(schedule: Schedule | None, runs: Sequence[RunView]) -> ScheduleDecision:
    """Which waiting runs start now, and which runs keep_last drops (see the module text for the rules)."""
    order = sorted(runs, key=lambda r: (r.execution_time, r.id))
    if schedule is None:  # no schedule: every requested run starts at once
        return ScheduleDecision(start=[r.id for r in order if r.state == RunState.WAITING])
    cancel: list[tuple[str, str]] = []
    expire: list[tuple[str, str]] = []
    dropped: set[str] = set()
    if schedule.keep_last:
        for r in order[:-schedule.keep_last]:
            why = f"keep_last {schedule.keep_last}: newer runs replace it"
            if r.state == RunState.RUNNING:
                cancel.append((r.id, why))
                dropped.add(r.id)
            elif r.state == RunState.WAITING:
                expire.append((r.id, why))
                dropped.add(r.id)
    live = [r for r in order if r.id not in dropped]
    active = sum(1 for r in live if r.state == RunState.RUNNING)
    room = schedule.max_active_runs - active
    waiting = [r for r in live if r.state == RunState.WAITING]
    start: list[str] = []
    if schedule.depends_on_past:
        if waiting and room > 0:
            first = waiting[0]
            before = [r for r in live if (r.execution_time, r.id) < (first.execution_time, first.id)]
            previous = before[-1] if before else None
            if previous is None or previous.state in (RunState.SUCCEEDED, RunState.CANCELLED, RunState.EXPIRED):
                start.append(first.id)
    else:
        start = [r.id for r in waiting[:max(0, room)]]
    return ScheduleDecision(start, cancel, expire)


def waiting_reason(schedule: Schedule | None, runs: Sequence[RunView], run_id: str) -> str:
    """Why a waiting run has not started, in words."""
    if schedule is None:
        return "starting"
    order = sorted(runs, key=lambda r: (r.execution_time, r.id))
    if schedule.depends_on_past:
        mine = next(r for r in order if r.id == run_id)
        before = [r for r in order if (r.execution_time, r.id) < (mine.execution_time, mine.id)]
        if before and before[-1].state == RunState.FAILED:
            return f"depends_on_past: the previous run {before[-1].id} FAILED; a successful run re-opens the chain"
        if before and not before[-1].state.is_terminal:
            return f"depends_on_past: waiting for the previous run {before[-1].id}"
    active = sum(1 for r in runs if r.state == RunState.RUNNING)
    return f"max_active_runs {schedule.max_active_runs}: {active} run(s) active"


def iso(ts: float) -> str:
    """An epoch time as the ISO text templates see as ``execution_date``."""
    return _utc(ts).isoformat()
