"""Crashes on the live platform: the controller killed mid-stream, a job's driver killed, a worker node lost,
an external driver's run preempted.

Counts come from Ray's side as well as cuberay's: each worker prints a start stamp into its Ray Job's log
(or a file), and those are counted against the attempts the store recorded.
"""

from __future__ import annotations

import copy
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.support import alive, wait_for

pytestmark = pytest.mark.second_lane  # make test runs it beside the rest (tests/run_suite.py)

STAMP = "cuberay-start-stamp"
# The targets are 10 s each, measured by benchmarks/bench_reliability.py (phase "crash"); these bounds are 4x
# wider because CI's 2 shared cores start a Python process (the restarted controller) 2-4x slower.
RESUME_LIMIT_S = 40.0  # admission is back this soon after the controller dies
FREE_LIMIT_S = 40.0    # a dead driver's allocation is freed this soon


def job(name: str, *, gpu: str = "4", sleep_s: float = 2, max_failures: int = 0) -> dict[str, Any]:
    command = f"{sys.executable} -c \"import time; print('{STAMP}', flush=True); time.sleep({sleep_s})\""
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
            "spec": {"workers": 1, "resources": {"cpu": "500m", "gpu": gpu}, "command": command,
                     "max_failures": max_failures}}


def ctl(platform, method: str, *args: Any) -> Any:
    return ray.get(getattr(platform.controller, method).remote(client.caller(), *args), timeout=30)


def _answering(platform, old_pid: int) -> bool:
    try:
        info = ctl(platform, "ping")
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
        return False
    return info["pid"] != old_pid and info["ticks"] > 0


@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
@pytest.mark.timeout(400)
def test_controller_killed_twice_mid_stream_loses_and_repeats_nothing(platform, job_client) -> None:
    """Six 4-GPU jobs on tenant a (max 8): two run, four queue; the controller dies twice meanwhile."""
    name = f"stream-{uuid.uuid4().hex[:6]}"
    ids = [client.submit(job(name, sleep_s=3), "a").id for _ in range(6)]
    resumed = []
    for _ in range(2):
        wait_for(lambda: any(client.status(j).state == JobState.RUNNING for j in ids), 120, "a running job")
        old_pid = ctl(platform, "ping")["pid"]
        killed = time.time()
        ray.kill(platform.controller, no_restart=False)
        wait_for(lambda: _answering(platform, old_pid), 60, "the restarted controller's first cycle")
        # The restarted controller's own stamp: it has rebuilt queue and ledger and starts admitting.
        started = [e.time for e in ctl(platform, "events", None, None)
                   if e.kind == "controller_started" and e.time > killed]
        resumed.append(round(min(started) - killed, 2))
    records = wait_for(lambda: (recs := [client.status(j) for j in ids]) and
                       all(r.state.is_terminal for r in recs) and recs, 240, "every job to end")
    assert sorted(r.id for r in client.list_jobs(tenant="a") if r.name == name) == sorted(ids)  # none lost
    assert [r.state for r in records] == [JobState.SUCCEEDED] * 6, [(r.id, r.state.value, r.message) for r in records]
    for rec in records:  # exactly one run each, by Ray's own account
        runs = [j for j in job_client.list_jobs() if (j.submission_id or "").startswith(f"cuberay-{rec.id}")]
        stamps = sum(job_client.get_job_logs(r.submission_id).count(STAMP) for r in runs)
        assert (rec.attempts, len(runs), stamps) == (1, 1, 1), (rec, runs)
    assert max(resumed) <= RESUME_LIMIT_S, f"admission came back after {resumed} s"


@pytest.mark.timeout(240)
def test_submits_waits_and_drivers_go_on_across_a_controller_restart(platform) -> None:
    """Ray fails the calls in flight when an actor dies, and those sent while it restarts
    (ActorUnavailableError): a job driver that started or reported then would fail its run, and a user's submit
    or wait would stop. All of them wait for the restarted controller instead (client.driver_api()),
    and a repeated submit queues its job once."""
    tag = uuid.uuid4().hex[:6]
    blocker = job(f"blocker-{tag}", gpu="4", sleep_s=600)
    blocker["spec"]["workers"] = 2  # tenant b's max of 8 GPUs: b's later jobs wait (and cost nothing)
    blocking = client.submit(blocker, "b")
    wait_for(lambda: client.status(blocking.id).state == JobState.RUNNING, 120, "the blocker to run")
    waiting, submitted, errors, stop = blocker | {"metadata": {"name": f"queued-{tag}"}}, [], [], threading.Event()

    def submit_back_to_back() -> None:
        try:
            while not stop.is_set():
                submitted.append(client.submit(waiting, "b").id)
        except BaseException as err:  # noqa: BLE001 - reported by the test below
            errors.append(err)

    ref = client.submit(job(f"through-{tag}", gpu="1", sleep_s=5), "a")
    old_pid = ctl(platform, "ping")["pid"]
    submitter = threading.Thread(target=submit_back_to_back)
    submitter.start()
    try:
        ray.kill(platform.controller, no_restart=False)  # takes effect a second or two later
        # Polls back to back as well: one is in flight when the old controller dies. The wait goes on, and so
        # does the job, whose driver may be starting.
        done = client.wait(ref.id, timeout=120, poll_s=0)
        assert done.state == JobState.SUCCEEDED, (done.message, [(e.kind, e.message) for e in ctl(platform, "events",
                                                                                                  ref.id)])
        assert client.driver_api().ping()["pid"] != old_pid
    finally:
        stop.set()
        submitter.join(60)
    assert not errors, errors
    stored = sorted(r.id for r in client.list_jobs(tenant="b") if r.name == f"queued-{tag}")
    assert stored == sorted(submitted) and len(set(submitted)) == len(submitted)  # none lost, none twice
    for job_id in [*submitted, blocking.id]:  # the waiting ones first, or each would start in turn
        client.cancel(job_id)
    print(f"{len(submitted)} submits across the restart")


@pytest.mark.timeout(240)
def test_a_killed_driver_frees_its_allocation_and_fails_the_job(platform, job_client) -> None:
    ref = client.submit(job(f"victim-{uuid.uuid4().hex[:6]}", gpu="1", sleep_s=600), "b")
    rec = wait_for(lambda: (r := client.status(ref.id)).state == JobState.RUNNING and r, 120, "the job to run")
    info = wait_for(lambda: (i := job_client.get_job_info(rec.submission_id)).driver_info and i, 60,
                    "the driver to connect")
    wait_for(lambda: STAMP in job_client.get_job_logs(rec.submission_id), 60, "the worker to start")
    os.kill(int(info.driver_info.pid), signal.SIGKILL)
    killed = time.monotonic()
    ended = wait_for(lambda: (r := client.status(ref.id)).state.is_terminal and r, 60, "the job to end")
    freed_s = time.monotonic() - killed
    assert ended.state == JobState.FAILED and ended.allocation is None, ended
    wait_for(lambda: ref.id not in ctl(platform, "running"), 30, "the allocation to be gone")  # read after a tick
    assert freed_s <= FREE_LIMIT_S, f"freed after {freed_s:.1f} s"


@pytest.mark.timeout(300)
def test_a_removed_worker_node_requeues_its_jobs_and_frees_their_quota(platform, ray_cluster) -> None:
    labels = {"cuberay.io/test": f"loss-{uuid.uuid4().hex[:6]}"}
    spec = job(f"on-lost-{uuid.uuid4().hex[:6]}", gpu="0", sleep_s=600)
    spec["spec"]["node_selector"] = labels

    def ledger_node() -> str | None:
        return next((n["node_id"] for n in ctl(platform, "nodes") if n["labels"].get("cuberay.io/test") ==
                     labels["cuberay.io/test"]), None)

    node = ray_cluster.cluster.add_node(num_cpus=2, memory=4 * 2**30, labels=labels, wait=False)
    removed = False
    try:
        node_id = wait_for(ledger_node, 120, "the controller to see the new node")
        ref = client.submit(spec, "c")
        rec = wait_for(lambda: (r := client.status(ref.id)).state == JobState.RUNNING and r, 120, "the job to run")
        assert rec.allocation == [{"node_id": node_id}]
        ray_cluster.cluster.remove_node(node)
        removed = True
        requeued = wait_for(lambda: (r := client.status(ref.id)).state == JobState.QUEUED and r, 90,
                            "the job to be requeued")
        assert requeued.allocation is None, requeued
        assert any(e.kind == "requeued" and "was lost" in e.message for e in ctl(platform, "events", ref.id))
        # Usage and allocations are read from the snapshot the loop publishes after its tick, the state from
        # the store: the snapshot may trail the requeue by a tick.
        wait_for(lambda: (u := next(t for t in client.tenants() if t.name == "c")).running == 0
                 and u.in_use.get("CPU", 0.0) == 0.0, 30, "tenant c's usage to be freed")
        wait_for(lambda: ref.id not in ctl(platform, "running"), 30, "the allocation to be gone")
    finally:
        if not removed:
            ray_cluster.cluster.remove_node(node)
    wait_for(lambda: ledger_node() is None, 90, "the node to leave the ledger")


# One start stamp (the worker's pid) per run; the first run holds its 4 GPUs until it is stopped, later ones end.
STAMPING_SCRIPT = """
import os, sys, time
with open(sys.argv[1], "a") as stamps:
    stamps.write(f"{os.getpid()}\\n")
with open(sys.argv[1]) as stamps:
    first = len(stamps.read().split()) == 1
while first:
    time.sleep(1)
"""


def _gpu_pgs() -> dict[str, dict[str, Any]]:
    """Ray's placement groups that hold GPUs now."""
    from ray.util.placement_group import placement_group_table

    return {pg_id: pg for pg_id, pg in placement_group_table().items()
            if pg["state"] == "CREATED" and any(b.get("GPU") for b in pg["bundles"].values())}


@pytest.mark.timeout(300)
def test_a_preempted_external_driver_stops_its_run_and_runs_it_again_as_a_new_attempt(
        platform, ray_cluster, job_client, tmp_path: Path) -> None:
    """``ray job submit -- cuberay run`` of tenant a borrows 4 GPUs; b reclaims all 12 with one gang.

    The external driver must stop its run (worker process gone, placement group removed), the job must go
    back to the queue with a ``preempted`` event naming b, and the same driver must run it again, as attempt 2,
    once b's gang is done.
    """
    import yaml

    # a is guaranteed no GPUs (every GPU it holds is borrowed); b is guaranteed the cluster's 12.
    reloaded = copy.deepcopy(platform.spec)
    for tenant in reloaded["spec"]["tenants"]:
        gpus = "12" if tenant["name"] == "b" else "0"
        tenant["quota"]["guaranteed"]["gpu"] = gpus
        tenant["quota"].setdefault("max", {"cpu": "16"})["gpu"] = gpus if gpus != "0" else "8"
    platform_file = tmp_path / "platform.yaml"
    platform_file.write_text(yaml.safe_dump(reloaded))
    client.reload(str(platform_file))

    script, stamps = tmp_path / "stamping.py", tmp_path / "stamps"
    script.write_text(STAMPING_SCRIPT)
    spec = job(f"ext-pre-{uuid.uuid4().hex[:6]}")
    spec["spec"]["command"] = f"{sys.executable} {script} {stamps}"
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    sid = f"ext-pre-{uuid.uuid4().hex[:8]}"
    job_client.submit_job(entrypoint=f"{sys.executable} -m cuberay.run --file {spec_file} --tenant a",
                          submission_id=sid, runtime_env={"env_vars": {"CUBERAY_USER": platform.user}},
                          entrypoint_num_cpus=0)
    try:
        rec = wait_for(lambda: next((r for r in client.list_jobs(tenant="a") if r.submission_id == sid and
                                     r.state == JobState.RUNNING), None), 120, "the external job to run")
        first_pid = int(wait_for(lambda: stamps.exists() and stamps.read_text().split(), 60,
                                 "its worker to start")[0])
        (first_pg,) = wait_for(_gpu_pgs, 30, "its placement group")

        owner = client.submit({**job(f"owner-{uuid.uuid4().hex[:6]}", sleep_s=0),
                               "spec": {**job("x", sleep_s=0)["spec"], "workers": 3}}, "b")
        preempted = wait_for(lambda: [e for e in ctl(platform, "events", rec.id) if e.kind == "preempted"], 60,
                             "the external job to be preempted")
        assert "reclaimed" in preempted[0].message and "'b'" in preempted[0].message, preempted
        # Reads run beside the loop that writes, so the requeue (its next write) may land just after.
        requeued = wait_for(lambda: [e for e in ctl(platform, "events", rec.id) if e.kind == "requeued"], 30,
                            "the external job to be requeued")
        assert requeued[0].time >= preempted[0].time, requeued
        # Its run really stops: the worker's process ends and Ray removes the attempt's placement group.
        wait_for(lambda: not alive(first_pid), 60, "the preempted run's worker to end")
        wait_for(lambda: first_pg not in _gpu_pgs(), 60, "the preempted run's placement group to go")
        stopped_s = round(time.time() - preempted[0].time, 1)
        done = wait_for(lambda: (r := client.status(owner.id)).state.is_terminal and r, 120, "b's gang to end")
        assert done.state == JobState.SUCCEEDED, done

        # The same driver runs the job again, as a recorded second attempt, and reports its success.
        wait_for(lambda: job_client.get_job_status(sid).is_terminal(), 120, "the external driver to end")
        logs = job_client.get_job_logs(sid)
        assert job_client.get_job_status(sid).value == "SUCCEEDED", logs
        assert f"attempt 1 of {rec.id} ended by the platform" in logs, logs
        final = client.status(rec.id)
        assert (final.state, final.attempts, final.allocation) == (JobState.SUCCEEDED, 2, None), final
        assert len(stamps.read_text().split()) == 2  # one worker start per recorded attempt
        kinds = [e.kind for e in ctl(platform, "events", rec.id)]
        assert kinds.count("admitted") == 2 and kinds.count("preempted") == 1, kinds
        wait_for(lambda: not _gpu_pgs(), 30, "Ray to hold no GPUs, as the ledger")
        print(f"preempted run stopped {stopped_s}s after the preemption")
    finally:
        job_client.stop_job(sid)
