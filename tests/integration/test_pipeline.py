"""Pipelines on the session's local multi-node Ray: the fan-out/fan-in example end to end, a step timeout,
and a controller restart in the middle of a run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import ray

import cuberay.pipelines as pipelines
from cuberay.platform import client
from cuberay.platform.policy.run_states import RunState, StepState
from cuberay.platform.policy.states import JobState
from tests.support import wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "configs" / "pipelines" / "fan-out.yaml"


def pipeline(name: str, steps: list[dict]) -> dict:
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": name},
            "spec": {"steps": steps}}


def task(command: str) -> dict:
    return {"kind": "Task", "spec": {"command": command}}


def node_of(job_id: str) -> str:
    admitted = [e.message for e in ray.get(_controller().events.remote(client.caller(), job_id, None)) if e.kind == "admitted"]
    return re.search(r"on node\(s\) (\S+)", admitted[-1]).group(1)


def _controller():
    return client.connect()


# Its steps are one-worker command Tasks, which the platform runs as small jobs by default; nothing here reads
# a step's Ray Job (tests/integration/conftest.py, ``platform``).
@pytest.mark.small_jobs
def test_fan_out_fan_in_example_and_a_timeout(platform, ray_cluster) -> None:
    example = pipelines.submit(EXAMPLE, "a")["run"]
    slow = pipelines.submit(pipeline("slow", [{"name": "sleepy", "timeout": 3, "job": task("sleep 120")}]),
                            "a")["run"]
    assert example.state == RunState.WAITING and slow.state == RunState.WAITING

    ended = pipelines.wait(slow.id, timeout=120)
    assert ended.state == RunState.FAILED
    assert "step sleepy failed: attempt 1 timed out" in ended.message and "its timeout is 3s" in ended.message
    _, (sleepy,) = pipelines.status(slow.id)
    assert client.status(sleepy.job_id).state == JobState.CANCELLED

    run = pipelines.wait(example.id, timeout=240)
    record, steps = pipelines.status(example.id)
    steps = {s.name: s for s in steps}
    assert run.state == RunState.SUCCEEDED, (run.message, steps)
    # outputs flow: prepare -> trainers (templated commands) -> evaluate (fan-in)
    assert steps["prepare"].outputs == {"rows": 100}
    assert {n: steps[n].outputs["score"] for n in ("train-a", "train-b", "train-c")} == {
        "train-a": 90.0, "train-b": 80.0, "train-c": 70.0}
    assert steps["evaluate"].outputs == {"best": 90.0}
    # the flaky step succeeded on its second attempt, each attempt an ordinary job
    assert steps["train-a"].attempt == 2 and len(steps["train-a"].job_ids) == 2
    assert client.status(steps["train-a"].job_ids[0]).state == JobState.FAILED
    # when: false skips without a job
    assert steps["draft"].state == StepState.SKIPPED and steps["draft"].job_ids == []
    assert "is false" in steps["draft"].message

    jobs = {n: [client.status(j) for j in s.job_ids] for n, s in steps.items()}
    prepare_end = jobs["prepare"][0].end_time
    trainers = [j for n in ("train-a", "train-b", "train-c") for j in jobs[n]]
    assert all(j.submit_time >= prepare_end for j in trainers)  # depends_on
    assert jobs["evaluate"][0].submit_time >= max(j.end_time for j in trainers)
    # parallelism 2: never three trainer jobs running at once
    moments = sorted([(j.start_time, 1) for j in trainers] + [(j.end_time, -1) for j in trainers])
    running = peak = 0
    for _, delta in moments:
        running += delta
        peak = max(peak, running)
    assert peak == 2, moments
    # the first two siblings started together, on different nodes
    first_a, first_b = jobs["train-a"][0], jobs["train-b"][0]
    assert first_b.start_time < first_a.end_time
    assert node_of(first_a.id) != node_of(first_b.id)
    assert {j.spec["metadata"]["labels"]["cuberay.io/pipeline-step"] for j in trainers} == {
        "train-a", "train-b", "train-c"}


# Its steps are one-worker command Tasks, which the platform runs as small jobs by default; nothing here reads
# a step's Ray Job (tests/integration/conftest.py, ``platform``).
@pytest.mark.small_jobs
def test_a_run_survives_a_controller_restart_without_rerunning_finished_steps(platform) -> None:
    spec = pipeline("restart", [
        {"name": "first", "job": task("python -c \"import cuberay.outputs as o; o.set('n', 1)\"")},
        {"name": "second", "depends_on": ["first"],
         "job": task("sleep 6; python -c \"import cuberay.outputs as o; o.set('n', {{ steps.first.outputs.n }} + 1)\"")},
    ])
    run = pipelines.submit(spec, "a")["run"]

    def second_running():
        _, steps = pipelines.status(run.id)
        second = next(s for s in steps if s.name == "second")
        return second.job_id and client.status(second.job_id).state == JobState.RUNNING

    wait_for(second_running, 120, "the second step's job to run")
    old_pid = ray.get(platform.controller.ping.remote(client.caller()))["pid"]
    ray.kill(platform.controller, no_restart=False)  # the process dies; Ray restarts the detached actor
    wait_for(lambda: _restarted(platform, old_pid), 60, "the restarted controller")

    ended = pipelines.wait(run.id, timeout=120)
    _, steps = pipelines.status(run.id)
    steps = {s.name: s for s in steps}
    assert ended.state == RunState.SUCCEEDED, ended.message
    assert len(steps["first"].job_ids) == 1 and len(steps["second"].job_ids) == 1  # nothing ran twice
    assert steps["second"].outputs == {"n": 2}


def _restarted(platform, old_pid: int) -> bool:
    try:
        info = ray.get(platform.controller.ping.remote(client.caller()), timeout=10)
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
        return False
    return info["pid"] != old_pid and info["ticks"] > 0


# Its steps run as Ray Jobs, the platform fixture's default: the values pass through a driver's command line.
def test_hostile_params_and_outputs_reach_the_steps_programs_as_literal_text(platform, tmp_path) -> None:
    canary = tmp_path / "pwned"
    evil = f"x'\"; touch {canary}; $(touch {canary}) `touch {canary}`\n-rf * $HOME"
    save = "python -c \"import sys, cuberay.outputs as o; o.set('{name}', {what})\""
    spec = pipeline("hostile", [
        {"name": "emit", "job": task(save.format(name="v", what="sys.argv[1]") + " {{ params.v }}")},
        {"name": "use", "depends_on": ["emit"], "job": task(
            save.format(name="argv", what="sys.argv[1:]")
            + " {{ steps.emit.outputs.v }} \"<{{ params.v }}>\" '<{{ params.v }}>'")},
    ])
    spec["spec"]["params"] = {"v": evil}
    run = pipelines.submit(spec, "a")["run"]
    ended = pipelines.wait(run.id, timeout=180)
    _, steps = pipelines.status(run.id)
    steps = {s.name: s for s in steps}
    assert ended.state == RunState.SUCCEEDED, (ended.message, steps)
    assert steps["emit"].outputs == {"v": evil}
    assert steps["use"].outputs == {"argv": [evil, f"<{evil}>", f"<{evil}>"]}
    assert not canary.exists()
