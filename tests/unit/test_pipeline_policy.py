"""Pipeline decisions without Ray: steps of a run (depends_on, parallelism, skip, when, failures) and cron ticks."""

from __future__ import annotations

import datetime as dt
from typing import Any

from cuberay.platform.policy.pipelines import (
    RunState,
    RunView,
    StepState,
    advance,
    decide_runs,
    due_ticks,
    outcome,
    should_retry,
    timed_out,
    waiting_reason,
)
from cuberay.platform.spec.pipeline import Schedule, load_pipeline

P, R, S, F, K = StepState.PENDING, StepState.RUNNING, StepState.SUCCEEDED, StepState.FAILED, StepState.SKIPPED


def pipeline(parallelism: int = 2, **when: Any) -> Any:
    def step(name: str, deps: list[str], **extra: Any) -> dict[str, Any]:
        return {"name": name, "depends_on": deps, "job": {"kind": "Task", "spec": {"command": "true"}}, **extra}

    steps = [step("prep", []), step("a", ["prep"]), step("b", ["prep"]), step("c", ["prep"], **when),
             step("end", ["a", "b", "c"])]
    return load_pipeline({"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline",
                          "metadata": {"name": "p", "tenant": "t"},
                          "spec": {"parallelism": parallelism, "params": {"go": True}, "steps": steps}}).spec


def ctx(**outputs: dict[str, Any]) -> dict[str, Any]:
    return {"params": {"go": True}, "steps": {n: {"outputs": o, "dir": "/d"} for n, o in outputs.items()}}


def states(**kw: StepState) -> dict[str, StepState]:
    return {"prep": P, "a": P, "b": P, "c": P, "end": P, **kw}


def test_only_steps_whose_dependencies_ended_well_start() -> None:
    spec = pipeline()
    assert advance(spec, states(), ctx()).start == ["prep"]
    assert advance(spec, states(prep=R), ctx()).start == []
    assert advance(spec, states(prep=S, a=S, b=S, c=K), ctx()).start == ["end"]  # a skipped dependency is fine


def test_parallelism_caps_running_steps_in_dependency_order() -> None:
    spec = pipeline(parallelism=2)
    assert advance(spec, states(prep=S), ctx()).start == ["a", "b"]
    assert advance(spec, states(prep=S, a=R), ctx()).start == ["b"]
    assert advance(spec, states(prep=S, a=R, b=R), ctx()).start == []
    assert advance(pipeline(parallelism=3), states(prep=S), ctx()).start == ["a", "b", "c"]


def test_skip_and_a_false_when_skip_without_a_slot() -> None:
    spec = pipeline(parallelism=1, when="steps.prep.outputs.rows > 10")
    plan = advance(spec, states(prep=S), ctx(prep={"rows": 3}))
    assert [(c.name, c.state) for c in plan.changes] == [("c", K)]
    assert "is false" in plan.changes[0].reason
    assert plan.start == ["a"]
    assert advance(spec, states(prep=S), ctx(prep={"rows": 30})).changes == []
    skipped = advance(pipeline(skip=True), states(prep=S), ctx())
    assert [(c.name, c.state, c.reason) for c in skipped.changes] == [("c", K, "skip: true")]


def test_a_when_that_cannot_be_evaluated_fails_the_step() -> None:
    plan = advance(pipeline(when="steps.prep.outputs.missing > 1"), states(prep=S), ctx(prep={}))
    assert [(c.name, c.state) for c in plan.changes] == [("c", F), ("end", StepState.UPSTREAM_FAILED)]
    assert "missing" in plan.changes[0].reason


def test_a_failure_stops_its_dependents_and_fails_the_run_with_the_reason() -> None:
    spec = pipeline()
    plan = advance(spec, states(prep=S, a=F, b=S, c=S), ctx())
    assert [(c.name, c.state) for c in plan.changes] == [("end", StepState.UPSTREAM_FAILED)]
    final = {"prep": S, "a": F, "b": S, "c": S, "end": StepState.UPSTREAM_FAILED}
    state, message = outcome(final, {"a": "attempt 1 timed out: ran 9s, its timeout is 3s"})
    assert state == RunState.FAILED and "step a failed: attempt 1 timed out" in message and "not run: end" in message
    assert outcome({"prep": S, "a": R}, {}) is None
    assert outcome({"prep": S, "a": K}, {})[0] == RunState.SUCCEEDED


def test_retries_and_timeouts() -> None:
    assert should_retry(1, 2) and should_retry(2, 2) and not should_retry(3, 2) and not should_retry(1, 0)
    assert timed_out(3, started=100, now=104) and not timed_out(3, started=100, now=102)
    assert not timed_out(None, 100, 1e9) and not timed_out(3, None, 1e9)  # waiting in the queue does not count


# ---------------------------------------------------------------- schedules (injected clock)

DAY = 86400.0
START = dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.timezone.utc).timestamp()


def sched(**kw: Any) -> Schedule:
    return Schedule.model_validate({"cron": "0 2 * * *", "start": "2026-11-01T02:00:00Z", **kw})


def test_catchup_backfills_every_missed_tick_in_order_once() -> None:
    now = START + 2 * DAY + 3600  # three ticks are due: Nov 1, 2, 3 at 02:00
    ticks = due_ticks(sched(), None, submitted=now, now=now)
    assert ticks == [START, START + DAY, START + 2 * DAY]
    assert due_ticks(sched(), ticks[-1], submitted=now, now=now) == []  # the cursor: never a tick twice
    assert due_ticks(sched(), ticks[-1], submitted=now, now=now + DAY) == [START + 3 * DAY]
    assert due_ticks(sched(catchup=False), None, submitted=now, now=now) == [START + 2 * DAY]
    assert due_ticks(Schedule(cron="0 2 * * *"), None, submitted=now, now=now) == []  # no start: from submit on


def views(*spec: tuple[str, RunState]) -> list[RunView]:
    return [RunView(run_id, START + i * DAY, state) for i, (run_id, state) in enumerate(spec)]


W, RN, OK, NO = RunState.WAITING, RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED


def test_max_active_runs_serialises_in_time_order() -> None:
    one = sched(max_active_runs=1)
    assert decide_runs(one, views(("r1", W), ("r2", W), ("r3", W))).start == ["r1"]
    assert decide_runs(one, views(("r1", RN), ("r2", W), ("r3", W))).start == []
    assert decide_runs(one, views(("r1", NO), ("r2", W), ("r3", W))).start == ["r2"]  # a failure does not block
    assert decide_runs(sched(max_active_runs=2), views(("r1", RN), ("r2", W), ("r3", W))).start == ["r2"]


def test_depends_on_past_stops_the_chain_after_a_failure() -> None:
    past = sched(depends_on_past=True, max_active_runs=3)
    assert decide_runs(past, views(("r1", W), ("r2", W))).start == ["r1"]
    assert decide_runs(past, views(("r1", RN), ("r2", W))).start == []
    assert decide_runs(past, views(("r1", OK), ("r2", W), ("r3", W))).start == ["r2"]
    runs = views(("r1", OK), ("r2", NO), ("r3", W), ("r4", W))
    assert decide_runs(past, runs).start == []
    assert "previous run r2 FAILED" in waiting_reason(past, runs, "r3")
    # a manual run after the failure that succeeds re-opens the chain (it is ordered among the ticks)
    runs = [*runs[:2], RunView("manual", START + 1.5 * DAY, OK), *runs[2:]]
    assert decide_runs(past, runs).start == ["r3"]


def test_keep_last_cancels_running_and_expires_waiting_older_runs() -> None:
    keep = sched(keep_last=2, max_active_runs=5)
    d = decide_runs(keep, views(("r1", RN), ("r2", W), ("r3", W), ("r4", W)))
    assert [r for r, _ in d.cancel] == ["r1"] and [r for r, _ in d.expire] == ["r2"]
    assert "keep_last 2" in d.cancel[0][1]
    assert d.start == ["r3", "r4"]


def test_without_a_schedule_every_requested_run_starts() -> None:
    assert decide_runs(None, views(("r1", RN), ("r2", W))).start == ["r2"]
