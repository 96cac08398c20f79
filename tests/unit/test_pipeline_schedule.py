"""Schedules through the pipeline driver and a real SQLite store, with an injected clock (no waiting, no Ray).

A "restart" is a new driver on the same database, as a restarted controller builds one.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from cuberay.platform.control import pipeline_store as ps
from cuberay.platform.control.pipeline_driver import PipelineDriver
from cuberay.platform.control.store import Store, default_url
from cuberay.platform.policy.run_states import RunState, StepState
from cuberay.platform.spec import load_platform

DAY = 86400.0
START = dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.timezone.utc).timestamp()
NOW = START + 2 * DAY + 3600  # three ticks due (Nov 1, 2, 3 at 02:00 UTC)


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def pipeline(**schedule: Any) -> dict[str, Any]:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "daily", "tenant": "a"},
            "spec": {"schedule": {"cron": "0 2 * * *", "start": "2026-11-01T02:00:00Z", **schedule},
                     "steps": [{"name": "only", "job": {"kind": "Task",
                                                         "spec": {"command": "echo {{ execution_date }}"}}}]}}


@pytest.fixture
def make(tmp_path: Path):
    platform = load_platform({"apiVersion": "cuberay.io/v1alpha1", "kind": "Platform", "metadata": {"name": "t"},
                              "spec": {"storage": str(tmp_path), "tenants": [
                                  {"name": "a", "members": ["ann"], "quota": {"guaranteed": {"cpu": "4"}}}]}})
    stores: list[Store] = []

    def build(clock: Clock) -> PipelineDriver:
        store = Store(default_url(tmp_path))
        stores.append(store)
        return PipelineDriver(store, platform, jobs=None, clock=clock)

    yield build
    for store in stores:
        store.close()


def tick(driver: PipelineDriver) -> list[ps.RunRecord]:
    driver.record_ticks("a", "daily", driver.clock())
    asyncio.run(driver.apply_schedule("a", "daily"))
    return driver.book.runs("a", "daily")


def states(runs: list[ps.RunRecord]) -> list[str]:
    return [r.state.value for r in runs]


def test_catchup_makes_three_runs_in_order_serialised_and_a_restart_adds_none(make) -> None:
    clock = Clock(NOW)
    driver = make(clock)
    driver.put(pipeline(max_active_runs=1), "ann", None)
    runs = tick(driver)
    assert [r.tick for r in runs] == [START, START + DAY, START + 2 * DAY]
    assert [r.id for r in runs] == ["a-daily-r1", "a-daily-r2", "a-daily-r3"]
    assert states(runs) == ["RUNNING", "WAITING", "WAITING"]
    assert "max_active_runs 1" in runs[1].message

    restarted = make(clock)  # a restarted controller: same database, new driver
    assert states(tick(restarted)) == ["RUNNING", "WAITING", "WAITING"]
    # even if the cursor was lost (killed between recording the run and the cursor), the unique tick holds
    with restarted.book._sessions.begin() as session:
        session.execute(update(ps._PipelineRow).values(last_tick=None))
    assert len(tick(restarted)) == 3

    restarted.book.update_run("a-daily-r1", state=RunState.SUCCEEDED)
    assert states(tick(restarted)) == ["SUCCEEDED", "RUNNING", "WAITING"]
    clock.t += DAY
    assert states(tick(restarted)) == ["SUCCEEDED", "RUNNING", "WAITING", "WAITING"]
    assert restarted.book.get_pipeline("a", "daily").last_tick == START + 3 * DAY


def test_depends_on_past_stops_after_a_failure(make) -> None:
    driver = make(Clock(NOW))
    driver.put(pipeline(depends_on_past=True), "ann", None)
    assert states(tick(driver)) == ["RUNNING", "WAITING", "WAITING"]
    driver.book.update_run("a-daily-r1", state=RunState.FAILED)
    runs = tick(driver)
    assert states(runs) == ["FAILED", "WAITING", "WAITING"]
    assert "previous run a-daily-r1 FAILED" in runs[1].message


def test_keep_last_cancels_and_expires_older_runs(make) -> None:
    driver = make(Clock(NOW))
    driver.put(pipeline(keep_last=1, max_active_runs=1), "ann", None)
    driver.record_ticks("a", "daily", NOW - DAY)  # two ticks were due a day ago; r1 started then
    asyncio.run(driver.apply_schedule("a", "daily"))
    assert states(driver.book.runs("a", "daily")) == ["EXPIRED", "RUNNING"]
    runs = tick(driver)  # the third tick is due now: it replaces the running one
    assert states(runs) == ["EXPIRED", "CANCELLED", "RUNNING"]
    assert "keep_last 1" in runs[1].message
    assert [s.state for s in driver.book.steps(runs[1].id)] == [StepState.CANCELLED]


def test_a_manual_run_waits_its_turn_unless_it_supersedes(make) -> None:
    clock = Clock(NOW)
    driver = make(clock)
    driver.put(pipeline(max_active_runs=1, catchup=False), "ann", None)
    assert states(tick(driver)) == ["RUNNING"]
    clock.t += 60
    manual = asyncio.run(driver.request_run("a", "daily", "ann"))
    assert manual.trigger == "manual" and states(tick(driver)) == ["RUNNING", "WAITING"]
    clock.t += 60
    asyncio.run(driver.request_run("a", "daily", "ann", supersede=True))
    runs = tick(driver)
    assert states(runs) == ["CANCELLED", "CANCELLED", "RUNNING"]
    assert "superseded by a manual run of ann" in runs[0].message


def test_outputs_a_step_sets_are_what_the_driver_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cuberay.outputs
    from cuberay.platform.control.pipeline_driver import ENV_STEP_DIR, read_outputs

    monkeypatch.delenv(ENV_STEP_DIR, raising=False)
    with pytest.raises(RuntimeError, match="inside a pipeline step"):
        cuberay.outputs.set("x", 1)
    monkeypatch.setenv(ENV_STEP_DIR, str(tmp_path / "step"))
    cuberay.outputs.set("accuracy", 0.93)
    cuberay.outputs.set("classes", ["a", "b"])
    with pytest.raises(ValueError, match="letters, digits"):
        cuberay.outputs.set("bad-name", 1)
    assert cuberay.outputs.dir() == tmp_path / "step"
    assert read_outputs(tmp_path / "step") == cuberay.outputs.read(tmp_path / "step") == {
        "accuracy": 0.93, "classes": ["a", "b"]}


def test_a_step_whose_submit_was_cut_short_adopts_its_job_and_finishes(make) -> None:
    from cuberay.platform.api.records import JobRecord
    from cuberay.platform.policy.states import JobState

    clock = Clock(NOW)
    driver = make(clock)
    spec = pipeline()
    del spec["spec"]["schedule"]
    driver.put(spec, "ann", None)
    run = asyncio.run(driver.request_run("a", "daily", "ann"))
    asyncio.run(driver.apply_schedule("a", "daily"))
    # the controller died after recording the attempt and submitting its job, before recording the job id
    driver.book.update_step(run.id, "only", state=StepState.RUNNING, attempt=1, job_id=None)
    labels = {"cuberay.io/pipeline": "daily", "cuberay.io/pipeline-run": "r1", "cuberay.io/pipeline-step": "only",
              "cuberay.io/pipeline-attempt": "1"}
    job = JobRecord(id="a-daily-only-1", tenant="a", name="daily-only", kind="Task", user="ann",
                    spec={"metadata": {"name": "daily-only", "labels": labels}}, state=JobState.RUNNING,
                    priority=0, submit_time=NOW, seq=1, start_time=NOW)
    driver.store.add_job(job)
    restarted = make(clock)
    asyncio.run(restarted.tick())
    (step,) = restarted.book.steps(run.id)
    assert step.state == StepState.RUNNING and step.job_ids == [job.id]
    restarted.store.update_job(job.id, state=JobState.SUCCEEDED)
    asyncio.run(restarted.tick())
    (step,) = restarted.book.steps(run.id)
    assert step.state == StepState.SUCCEEDED and step.job_ids == [job.id] and step.attempt == 1
    assert restarted.book.get_run(run.id).state == RunState.SUCCEEDED


def test_the_digits_flow_steps_hand_the_model_over_by_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """configs/pipelines/digits-flow.yaml's two steps, run in-process as the platform runs them (the demo runs
    the pipeline itself)."""
    import cuberay.outputs
    from cuberay.examples import digits_steps
    from cuberay.platform.control.pipeline_driver import ENV_STEP_DIR, read_outputs

    monkeypatch.setenv(ENV_STEP_DIR, str(tmp_path / "train"))
    assert digits_steps.main(["train"]) == 0
    trained = read_outputs(tmp_path / "train")
    assert trained["train_accuracy"] > 0.9 and Path(trained["model"]).is_file()
    monkeypatch.setenv(ENV_STEP_DIR, str(tmp_path / "evaluate"))
    assert digits_steps.main(["evaluate", trained["model"]]) == 0
    assert read_outputs(tmp_path / "evaluate")["accuracy"] > 0.9
    assert cuberay.outputs.dir() == tmp_path / "evaluate"


def test_next_ticks_are_the_ticks_still_to_come() -> None:
    from cuberay.platform.policy.pipelines import next_ticks
    from cuberay.platform.spec.pipeline import Schedule

    daily = Schedule(cron="0 2 * * *", start=dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.timezone.utc))
    # Due ticks (Nov 1-3) are the next loop's backfill, not "next": the ones after now are.
    assert next_ticks(daily, None, START - DAY, NOW) == [START + 3 * DAY, START + 4 * DAY, START + 5 * DAY]
    assert next_ticks(daily, START + 2 * DAY, START - DAY, NOW, count=1) == [START + 3 * DAY]
    # A start still to come: the first tick is the start itself.
    assert next_ticks(daily, None, START - DAY, START - 10 * DAY, count=2) == [START, START + DAY]
