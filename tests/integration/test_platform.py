"""The live platform end to end: controller actor + Ray Jobs + command gangs on the 3-GPU-node cluster.

Where a job ran is read from Ray, never from cuberay's store: every worker
prints the node id Ray placed it on (``CUBERAY_NODE_ID``, from the worker's own
``get_runtime_context().get_node_id()``), and concurrency is sampled from
Ray's placement-group table as well as from the controller.
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.util.placement_group import (
    placement_group,
    placement_group_table,
    remove_placement_group,
)

from cuberay.errors import AdmissionError, NotFoundError, SpecError
from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.support import wait_for

WORKER_LINE = re.compile(r"\[worker (\d+)\] rank=(\d+) node=([0-9a-f]+)")




def task(name: str, workers: int, *, gpu: str = "0", cpu: str = "1", sleep_s: float = 3,
         placement: str | None = None, tenant: str | None = None) -> dict[str, Any]:
    """A command-mode Task whose workers print their rank and Ray node id, then sleep."""
    command = (f"{sys.executable} -c \"import os,time; print('rank=' + os.environ['RANK'] + ' node=' + "
               f"os.environ['CUBERAY_NODE_ID'], flush=True); time.sleep({sleep_s})\"")
    spec: dict[str, Any] = {"workers": workers, "resources": {"cpu": cpu, "gpu": gpu}, "command": command}
    if placement:
        spec["placement"] = placement
    metadata = {"name": f"{name}-{uuid.uuid4().hex[:6]}"}
    if tenant:
        metadata["tenant"] = tenant
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": metadata, "spec": spec}


def ray_worker_nodes(job_client, job_id: str) -> dict[int, str]:
    """rank -> the node id the worker itself reported, from the job's Ray Job log."""
    sid = client.status(job_id).submission_id
    assert sid, f"{job_id} has no Ray Job"
    return ray_worker_nodes_by_sid(job_client, sid)


def ray_worker_nodes_by_sid(job_client, sid: str) -> dict[int, str]:
    found = {}
    for match in WORKER_LINE.finditer(job_client.get_job_logs(sid)):
        assert match.group(1) == match.group(2), f"gang worker {match.group(1)} has RANK {match.group(2)}"
        found[int(match.group(1))] = match.group(3)
    return found


def gpu_placement_groups(state: str = "CREATED") -> list[dict]:
    """Ray's placement groups in ``state`` that hold GPUs."""
    return [pg for pg in placement_group_table().values()
            if pg["state"] == state and any(b.get("GPU", 0) > 0 for b in pg["bundles"].values())]


def ctl(platform, method: str, *args: Any) -> Any:
    return ray.get(getattr(platform.controller, method).remote(client.caller(), *args), timeout=60)


def wait_states(job_ids: list[str], states: set[JobState], timeout: float) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        records = {j: client.status(j) for j in job_ids}
        return records if all(r.state in states for r in records.values()) else None

    return wait_for(check, timeout, f"{job_ids} to reach {sorted(s.value for s in states)}")


def test_seed_case_four_gangs_share_three_nodes_and_run_where_allocated(platform, ray_cluster, job_client) -> None:
    started = time.monotonic()
    refs = [client.submit(task(f"seed{i}", 4, gpu="1", sleep_s=2), tenant)
            for i, tenant in enumerate(["a", "a", "b", "b"])]
    ids = [r.id for r in refs]
    allocations: dict[str, list[str]] = {}
    pending_since: dict[str, float] = {}  # placement group -> first seen PENDING
    most_running = most_pgs = 0
    deadline = time.monotonic() + 150
    while not all(client.status(j).state.is_terminal for j in ids):
        assert time.monotonic() < deadline, [client.status(j) for j in ids]
        running = ctl(platform, "running")
        for job_id, nodes in running.items():
            allocations.setdefault(job_id, nodes)
        most_running = max(most_running, len(running))
        most_pgs = max(most_pgs, len(gpu_placement_groups()))
        for pg in gpu_placement_groups("PENDING"):
            pending_since.setdefault(pg["placement_group_id"], time.monotonic())
            # An admitted gang that Ray cannot place at once means the ledger promised what Ray lacks.
            assert time.monotonic() - pending_since[pg["placement_group_id"]] < 10, pg
        time.sleep(0.2)
    records = [client.status(j) for j in ids]
    assert [r.state for r in records] == [JobState.SUCCEEDED] * 4, records
    assert most_running == 3, f"the controller ran {most_running} gangs at once; 3 fit (12 GPUs / 4)"
    assert 1 <= most_pgs <= 3, f"Ray held {most_pgs} GPU placement groups at once"
    for job_id in ids:
        assert len(allocations[job_id]) == 4
        assert ray_worker_nodes(job_client, job_id) == dict(enumerate(allocations[job_id])), job_id
        assert len(set(allocations[job_id])) == 1, "auto placement packs a GPU gang onto one node"
    print(f"seed case: 4 gangs in {time.monotonic() - started:.1f}s")


def test_pack_uses_one_node_and_spread_uses_three(platform, ray_cluster, job_client) -> None:
    packed = client.submit(task("pack", 4, gpu="1", placement="pack", sleep_s=1), "a")
    spread = client.submit(task("spread", 3, cpu="1", placement="spread", sleep_s=1), "b")
    records = wait_states([packed.id, spread.id], {JobState.SUCCEEDED, JobState.FAILED}, 90)
    assert all(r.state == JobState.SUCCEEDED for r in records.values()), records
    assert [r.reason for r in records.values()] == ["", ""], "an ended job no longer says where it runs"
    packed_nodes = ray_worker_nodes(job_client, packed.id)
    spread_nodes = ray_worker_nodes(job_client, spread.id)
    assert len(packed_nodes) == 4 and len(set(packed_nodes.values())) == 1, packed_nodes
    assert next(iter(packed_nodes.values())) in ray_cluster.worker_node_ids
    assert len(spread_nodes) == 3 and len(set(spread_nodes.values())) == 3, spread_nodes


def test_owner_reclaims_borrowed_gpus_by_preempting_the_borrower(platform, ray_cluster, job_client) -> None:
    # c holds its 4 guaranteed GPUs, a holds 8 (4 of them borrowed from b): the cluster's 12 are in use.
    # One 4-GPU worker per job keeps the test fast; the quota arithmetic is the same as for 4 x 1 GPU.
    long_jobs = [client.submit(task("hold", 1, gpu="4", sleep_s=600), t) for t in ("c", "a", "a")]
    hold_c, hold_a = long_jobs[0].id, [r.id for r in long_jobs[1:]]
    wait_states([r.id for r in long_jobs], {JobState.RUNNING}, 60)
    wait_for(lambda: all(ray_worker_nodes(job_client, r.id) for r in long_jobs), 60, "every gang to be up")
    usage = {u.name: u for u in client.tenants()}
    assert usage["a"].borrowed.get("GPU") == 4 and usage["a"].in_use.get("GPU") == 8, usage["a"]

    owner = client.submit(task("owner", 1, gpu="4", sleep_s=1), "b")
    victim = wait_for(lambda: next((j for j in hold_a if any(
        e.kind == "preempted" for e in ctl(platform, "events", j))), None), 30, "a borrower to be preempted")
    (reason,) = [e.message for e in ctl(platform, "events", victim) if e.kind == "preempted"]
    assert "reclaimed" in reason and "'b'" in reason, reason
    done = wait_states([owner.id], {JobState.SUCCEEDED, JobState.FAILED}, 90)[owner.id]
    assert done.state == JobState.SUCCEEDED, done

    # Ray's records: the victim's first Ray Job was stopped, and the owner's workers ran on its node.
    assert job_client.get_job_status(f"cuberay-{victim}").value == "STOPPED"
    victim_node = set(ray_worker_nodes_by_sid(job_client, f"cuberay-{victim}").values())
    assert set(ray_worker_nodes(job_client, owner.id).values()) == victim_node
    for other in [hold_c, *[j for j in hold_a if j != victim]]:
        assert not any(e.kind == "preempted" for e in ctl(platform, "events", other)), other
        assert client.status(other).state == JobState.RUNNING
    # Requeued, not lost: once b's job is done the borrower is admitted again, as attempt 2.
    again = wait_for(lambda: (r := client.status(victim)).state.holds_resources and r.attempts == 2 and r,
                     60, "the preempted job to be admitted again")
    assert again.submission_id in (None, f"cuberay-{victim}-2")


def test_impossible_jobs_strangers_and_unknown_ids_are_refused(platform) -> None:
    with pytest.raises(AdmissionError) as never:
        client.submit(task("huge", 1, gpu="8"), "a")  # within a's max 8, but no node has 8 GPUs
    assert never.value.exit_code == 3
    assert "8" in str(never.value) and "largest" in str(never.value), never.value
    with pytest.raises(AdmissionError) as quota:
        client.submit(task("greedy", 3, gpu="4"), "a")  # 12 GPUs > a's max 8
    assert "max gpu is 8" in str(quota.value), quota.value
    rejected = client.list_jobs(states=[JobState.REJECTED])
    assert {r.name.split("-")[0] for r in rejected} == {"huge", "greedy"}
    assert all(r.reason for r in rejected)

    with pytest.raises(AdmissionError) as stranger:
        client.submit(task("sneaky", 1), "a", user="mallory")
    assert stranger.value.exit_code == 3
    assert "mallory" in str(stranger.value) and "tester" in str(stranger.value), stranger.value
    with pytest.raises(NotFoundError) as unknown:
        client.cancel("a-nope-1")
    assert unknown.value.exit_code == 4
    with pytest.raises(SpecError):
        client.submit({**task("bad", 1), "spec": {"workers": 0, "command": "true"}}, "a")
    assert client.queue() == []


def test_controller_restart_keeps_running_and_queued_jobs(platform, ray_cluster, job_client) -> None:
    running = client.submit(task("survivor", 1, gpu="4", sleep_s=600), "a")
    wait_states([running.id], {JobState.RUNNING}, 60)
    queued = client.submit(task("waiter", 2, gpu="4", sleep_s=1), "a")  # 4 + 8 GPUs > a's max 8: waits
    wait_for(lambda: any(e.job_id == queued.id and "at its max" in e.reason for e in client.queue()), 20,
             "the waiter's reason")
    sid = client.status(running.id).submission_id
    old_pid = ctl(platform, "ping")["pid"]

    ray.kill(platform.controller, no_restart=False)  # the process dies; Ray restarts the detached actor
    # Wait for the NEW process (a ping can still reach the dying one) to have run a cycle.
    wait_for(lambda: _restarted(platform, old_pid), 60, "the restarted controller to run a cycle")
    assert client.status(running.id).state == JobState.RUNNING
    assert client.status(running.id).submission_id == sid
    assert list(ctl(platform, "running")) == [running.id]
    entry = wait_for(lambda: next((e for e in client.queue() if e.job_id == queued.id and
                                   "at its max" in e.reason), None), 20, "the waiter's reason")
    assert entry.position == 1, entry

    assert client.cancel(running.id).state == JobState.CANCELLED
    wait_for(lambda: job_client.get_job_status(sid).is_terminal(), 30, "the driver to stop")
    assert job_client.get_job_status(sid).value == "STOPPED"
    assert wait_states([queued.id], {JobState.SUCCEEDED}, 60)[queued.id].attempts == 1


def _restarted(platform, old_pid: int) -> bool:
    try:
        info = ctl(platform, "ping")
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
        return False
    return info["pid"] != old_pid and info["ticks"] > 0


def test_capacity_used_outside_cuberay_is_held_in_the_ledger(platform, ray_cluster) -> None:
    node = ray_cluster.worker_node_ids[2]

    def free_gpus() -> float:
        return next(n["free"].get("GPU", 0.0) for n in ctl(platform, "nodes") if n["node_id"] == node)

    assert free_gpus() == 4
    pg = placement_group([{"GPU": 3, "CPU": 1}], bundle_label_selector=[{"ray.io/node-id": node}])
    try:
        ray.get(pg.ready(), timeout=30)
        wait_for(lambda: free_gpus() == 1, 20, "the controller to see the foreign reservation")
        # A 4-GPU gang must now avoid that node.
        ref = client.submit(task("around", 1, gpu="4", sleep_s=0), "a")
        wait_for(lambda: client.status(ref.id).allocation or client.status(ref.id).state.is_terminal, 30,
                 "admission")
        allocation = client.status(ref.id).allocation
        assert allocation is None or allocation[0]["node_id"] != node
    finally:
        remove_placement_group(pg)
    wait_for(lambda: free_gpus() == 4, 20, "the foreign reservation to be released")


def test_external_driver_runs_the_job_it_registered(platform, ray_cluster, job_client, tmp_path: Path) -> None:
    import yaml

    spec = task("ext", 2, cpu="1", sleep_s=1, tenant="b", placement="spread")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    sid = f"ext-{uuid.uuid4().hex[:8]}"
    job_client.submit_job(entrypoint=f"{sys.executable} -m cuberay.run --file {path}", submission_id=sid,
                          runtime_env={"env_vars": {"CUBERAY_USER": platform.user}}, entrypoint_num_cpus=0)
    wait_for(lambda: job_client.get_job_status(sid).is_terminal(), 90, "the external driver to end")
    logs = job_client.get_job_logs(sid)
    assert job_client.get_job_status(sid).value == "SUCCEEDED", logs
    (record,) = [r for r in client.list_jobs(tenant="b") if r.submission_id == sid]
    assert record.driver == "external" and record.state == JobState.SUCCEEDED, record
    assert f"registered {record.id} (Ray Job {sid})" in logs, logs
    assert len({m.group(3) for m in WORKER_LINE.finditer(logs)}) == 2, logs  # placed where admission said: spread


def test_driver_cap_keeps_admitted_jobs_waiting_for_a_slot(platform, ray_cluster, job_client) -> None:
    scheduler = {**platform.spec["spec"]["scheduler"], "max_drivers": 1}  # Ray Job drivers (small_jobs off)
    spec = {**platform.spec, "spec": {**platform.spec["spec"], "scheduler": scheduler}}
    handle = client.install(spec, replace=True)
    refs = [client.submit(task(f"capped{i}", 1, cpu="1", sleep_s=2), "a") for i in range(2)]
    ids = [r.id for r in refs]
    saw_slot_wait = False
    most_drivers = 0
    deadline = time.monotonic() + 90
    while not all(client.status(j).state.is_terminal for j in ids):
        assert time.monotonic() < deadline, [client.status(j) for j in ids]
        alive = [j for j in job_client.list_jobs() if j.submission_id in {f"cuberay-{i}" for i in ids}
                 and not j.status.is_terminal()]
        most_drivers = max(most_drivers, len(alive))
        saw_slot_wait |= any("driver slot" in client.status(j).reason for j in ids)
        time.sleep(0.2)
    assert [client.status(j).state for j in ids] == [JobState.SUCCEEDED] * 2
    assert most_drivers == 1, "never more Ray Job drivers alive than max_drivers"
    assert saw_slot_wait, "the second job waited for a driver slot while admitted"
    assert ray.get(handle.ping.remote(client.caller()))["drivers"]["max_drivers"] == 1
