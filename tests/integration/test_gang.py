"""Command gangs on the session's multi-node cluster: pinning, env, streaming, failure, timeout.

Every node of the local cluster is a set of processes on this machine, so a
worker's command can be watched by pid from the test.
"""

from __future__ import annotations

import io
import re
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest
import ray
from ray.util.placement_group import placement_group_table

from cuberay.runtime.env import JobIdentity
from cuberay.train.gang import GangWorker, run_command_gang

REPO_ROOT = Path(__file__).resolve().parents[2]
JOB = JobIdentity(job_id="gang-1", name="allreduce", tenant="team-a", user="alice", run_id="r1",
                  kind="task", cpu="1", memory="1Gi", gpu="0", rdma="")
CPU1 = {"CPU": 1.0}


def wait_until(check: Callable[[], bool], timeout_s: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(0.1)


def running(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def new_placement_groups(before: set[str]) -> list[dict]:
    return [pg for pg_id, pg in placement_group_table().items() if pg_id not in before]


def test_allreduce_gang_runs_each_worker_on_its_pinned_node(ray_cluster) -> None:
    # A non-trivial order: rank 0 on the last worker node, rank 1 on the first.
    nodes = [ray_cluster.worker_node_ids[2], ray_cluster.worker_node_ids[0]]
    before = set(placement_group_table())
    out = io.StringIO()
    command = (f'echo "env $KFJ_TASK_ID $GPU_NUM $VC_WORKER_NUM $MY_VAR" && '
               f"{sys.executable} -m cuberay.examples.allreduce")
    code = run_command_gang(command, node_ids=nodes, bundle=CPU1, job=JOB, out=out,
                            env={"MY_VAR": "hello", "PYTHONPATH": str(REPO_ROOT)}, timeout_s=120)
    log = out.getvalue()
    assert code == 0, log
    for rank, node in enumerate(nodes):
        # node= is the actor's own ray.get_runtime_context().get_node_id().
        assert f"[worker {rank}] allreduce ok rank={rank} world=2 sum=3 node={node}" in log, log
        assert f"[worker {rank}] env gang-1 0 2 hello" in log, log
    # Ray's own record of where the bundles were reserved, and that they were released.
    (pg,) = new_placement_groups(before)
    assert pg["bundles_to_node_id"] == dict(enumerate(nodes))
    assert pg["state"] == "REMOVED"


def test_output_streams_while_the_command_runs(ray_cluster, tmp_path: Path) -> None:
    go = tmp_path / "go"
    out = io.StringIO()
    result: dict[str, int] = {}
    command = f'echo first; while [ ! -e {go} ]; do sleep 0.1; done; echo second'
    thread = threading.Thread(target=lambda: result.update(code=run_command_gang(
        command, node_ids=[ray_cluster.worker_node_ids[1]], bundle=CPU1, env={}, job=JOB,
        out=out, timeout_s=60)))
    thread.start()
    wait_until(lambda: "[worker 0] first" in out.getvalue(), what="the first line")
    assert thread.is_alive() and "second" not in out.getvalue()
    go.touch()
    thread.join(timeout=30)
    assert result == {"code": 0}, out.getvalue()
    assert "[worker 0] second" in out.getvalue()


def test_one_failing_worker_stops_the_gang_with_its_exit_code(ray_cluster, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid0"
    # Rank 1 fails only once rank 0 is surely running, so the test sees rank 0 being stopped.
    command = (f'if [ "$RANK" = 1 ]; then while [ ! -s {pid_file} ]; do sleep 0.1; done; '
               f'echo failing; exit 7; fi; echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; '
               f"exec sleep 300")
    before = set(placement_group_table())
    out = io.StringIO()
    started = time.monotonic()
    code = run_command_gang(command, node_ids=list(ray_cluster.worker_node_ids[:2]), bundle=CPU1,
                            env={}, job=JOB, out=out, timeout_s=120)
    assert code == 7, out.getvalue()
    assert time.monotonic() - started < 60
    assert "[worker 1] failing" in out.getvalue()
    assert "worker 1 exited with code 7" in out.getvalue()
    rank0 = int(pid_file.read_text())
    wait_until(lambda: not running(rank0), what=f"rank 0's command (pid {rank0}) to be killed")
    (pg,) = new_placement_groups(before)
    assert pg["state"] == "REMOVED"


def test_timeout_kills_the_gang_and_returns_124(ray_cluster, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    out = io.StringIO()
    started = time.monotonic()
    code = run_command_gang(f"echo $$ > {pid_file}; exec sleep 300",
                            node_ids=[ray_cluster.worker_node_ids[0]], bundle=CPU1, env={},
                            job=JOB, out=out, timeout_s=5)
    assert code == 124, out.getvalue()
    assert 5 <= time.monotonic() - started < 30
    assert "timed out" in out.getvalue()
    pid = int(pid_file.read_text())
    wait_until(lambda: not running(pid), what=f"the timed-out command (pid {pid}) to be killed")


def test_a_killed_worker_actor_takes_its_command_with_it(ray_cluster, tmp_path: Path) -> None:
    """Cancel/preemption kills actors, not commands: the watchdog must kill the command's tree.

    Ray itself kills a dead worker's direct children only; the sleep here is a grandchild
    (bash -> sleep), as a trainer started by a launcher script would be.
    """
    pid_file = tmp_path / "pid"
    worker = GangWorker.options(num_cpus=0).remote()
    ray.get(worker.start.remote(f"sleep 300 & echo $! > {pid_file}; wait", {}, {}, None))
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", what="the pid file")
    pid = int(pid_file.read_text())
    assert running(pid)
    ray.kill(worker)
    wait_until(lambda: not running(pid), what=f"the orphaned command (pid {pid}) to be killed")


def test_a_gang_that_cannot_be_reserved_times_out_and_releases(ray_cluster) -> None:
    before = set(placement_group_table())
    out = io.StringIO()
    # The head node has no GPU, so this bundle can never be placed there.
    code = run_command_gang("true", node_ids=[ray_cluster.head_node_id], bundle={"CPU": 1, "GPU": 1},
                            env={}, job=JOB, out=out, timeout_s=2)
    assert code == 124
    assert re.search(r"timed out after 2s waiting for the reservation", out.getvalue())
    (pg,) = new_placement_groups(before)
    assert pg["state"] == "REMOVED"


def test_a_missing_working_dir_is_reported_not_raised(ray_cluster, tmp_path: Path) -> None:
    out = io.StringIO()
    code = run_command_gang("true", node_ids=[ray_cluster.worker_node_ids[0]], bundle=CPU1,
                            env={}, job=JOB, out=out, working_dir=str(tmp_path / "missing"))
    assert code == 126
    assert "could not start" in out.getvalue() and "missing" in out.getvalue()


def test_no_nodes_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        run_command_gang("true", node_ids=[], bundle=CPU1, env={}, job=JOB)
