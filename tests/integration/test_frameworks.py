"""Every framework's example in configs/frameworks/ runs through the platform on the session's cluster.

Function mode under Ray Train's own trainers (TensorFlow, XGBoost, LightGBM) trains to a stated score; the
TensorFlow and XGBoost runs also lose a worker after their first checkpoint and resume from it. Command
mode: an mpi4py allreduce of 4 ranks launched by mpirun on 2 Ray nodes, each rank started by cuberay's
agent on its admitted node; a JAX cross-process sum; Paddle's and the RDMA guide's names, consistent
across ranks; TensorFlow's parameter-server training from a script that reads only TF_CONFIG, its parameter
server on the CPU node its role's node_selector names.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.integration.test_train_recovery import FINAL, kill_one_worker_after_a_checkpoint, train_workers
from tests.support import wait_for

FRAMEWORKS = Path(__file__).resolve().parents[2] / "configs" / "frameworks"
MPI_OK = re.compile(r"mpi allreduce ok rank=(\d+) size=(\d+) sum=(\d+) node=(\w+) agent=(\S+) gang_rank=-")
JAX_OK = re.compile(r"jax collective ok process=(\d+) processes=(\d+) devices=\d+ sum=(\d+) node=(\w+)")
PADDLE = re.compile(r"\[worker (\d+)\] paddle id=(\S+) num=(\S+) current=(\S+) endpoints=(\S+) mlp role=(\S+) "
                    r"num=(\S+) gpu=(\S+) host0=(\S+) port0=(\S+) rank=(\S+) world=(\S+) gpus=(\S+) master=(\S+)")
# Ray Train's controller checks its workers every 2 s by default (and each report waits for a check).
RESERVED = re.compile(r"gang: reserved \d+ bundles on nodes (\[.*\])")
FAST_CHECKS = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}


def example(name: str, **spec: Any) -> dict[str, Any]:
    """configs/frameworks/NAME in tenant a of the test platform (whose quota counts no memory), under a fresh
    name, ``spec`` merged in."""
    doc = yaml.safe_load((FRAMEWORKS / name).read_text())
    doc["metadata"].update(name=f"{doc['metadata']['name']}-{uuid.uuid4().hex[:4]}", tenant="a")
    for holder in [doc["spec"], *doc["spec"].get("roles", {}).values()]:
        holder.get("resources", {}).pop("memory", None)
    doc["spec"].update(spec)
    return doc


def run_to_end(doc: dict[str, Any], job_client, timeout: float = 240) -> tuple[Any, str]:
    ref = client.submit(doc)
    record = client.wait(ref.id, timeout=timeout)
    logs = job_client.get_job_logs(record.submission_id) if record.submission_id else ""
    assert record.state == JobState.SUCCEEDED, (record.state, record.message, logs[-3000:])
    return record, logs


def reserved_nodes(logs: str) -> list[str]:
    """The nodes the gang's bundles were reserved on, pinned to admission's choice, worker order."""
    found = RESERVED.findall(logs)
    assert found, logs[-3000:]
    return ast.literal_eval(found[-1])


def final_metrics(logs: str) -> dict[str, Any]:
    found = FINAL.findall(logs)
    assert found, logs[-3000:]
    return json.loads(found[-1])


def run_losing_a_worker(doc: dict[str, Any], ray_cluster, job_client) -> tuple[Any, str]:
    """Submit; after the run's first checkpoint SIGKILL one of its Ray Train workers; wait for the resumed end."""
    before = set(train_workers(ray_cluster.address))
    return kill_one_worker_after_a_checkpoint(client.submit(doc), ray_cluster, job_client, before)


@pytest.mark.second_lane  # the TensorFlow runs even out make test's lanes (tests/run_suite.py)
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_tensorflow_multiworker_trains_and_resumes_after_a_lost_worker(platform, ray_cluster, job_client) -> None:
    doc = example("train-tensorflow.yaml", env=FAST_CHECKS)
    doc["spec"]["config"]["epoch_sleep_s"] = 1.0
    _, logs = run_losing_a_worker(doc, ray_cluster, job_client)
    final = final_metrics(logs)
    # Chance is 0.1 on ten digits; 8 epochs of this MLP on 2 workers reach about 0.96.
    assert final["world_size"] == 2 and final["epoch"] == 7 and final["accuracy"] >= 0.9, final


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_xgboost_trains_and_boosts_on_after_a_lost_worker(platform, ray_cluster, job_client) -> None:
    doc = example("train-xgboost.yaml", env=FAST_CHECKS)
    doc["spec"]["config"].update(round_sleep_s=0.3, checkpoint_every=2)
    _, logs = run_losing_a_worker(doc, ray_cluster, job_client)
    final = final_metrics(logs)
    assert final["world_size"] == 2 and final["rounds"] == 20 and final["resumed_from"] > 0, final
    assert final["accuracy"] >= 0.9, final  # about 0.96 on the test split


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lightgbm_trains_to_a_stated_score(platform, job_client) -> None:
    _, logs = run_to_end(example("train-lightgbm.yaml", env=FAST_CHECKS), job_client)
    final = final_metrics(logs)
    assert final["world_size"] == 2 and final["rounds"] == 20 and final["accuracy"] >= 0.9, final


@pytest.mark.timeout(240)
def test_mpirun_starts_each_rank_through_the_agent_on_its_admitted_node(platform, job_client) -> None:
    _, logs = run_to_end(example("train-mpi.yaml"), job_client)
    ranks = {int(rank): (int(size), int(total), node, agent) for rank, size, total, node, agent in MPI_OK.findall(logs)}
    assert sorted(ranks) == [0, 1, 2, 3], logs[-3000:]
    assert {(size, total) for size, total, _, _ in ranks.values()} == {(4, 10)}
    # Every node of ray.cluster_utils has this machine's hostname: had mpirun started the ranks itself they
    # would all be on worker 0's node. Each worker's agent started slots_per_worker=2 ranks on its own node.
    admitted = reserved_nodes(logs)
    assert len(set(admitted)) == 2, admitted
    by_agent: dict[str, set[str]] = {}
    for _, _, node, agent in ranks.values():
        by_agent.setdefault(agent, set()).add(node)
    assert sorted(len(nodes) for nodes in by_agent.values()) == [1, 1], by_agent
    assert sorted(next(iter(nodes)) for nodes in by_agent.values()) == sorted(admitted)
    assert sorted(agent[-3:] for agent in by_agent) == ["-w0", "-w1"]
    assert sum(1 for r in ranks.values() if r[2] == admitted[0]) == 2


@pytest.mark.timeout(240)
def test_jax_processes_sum_across_the_gang(platform, job_client) -> None:
    _, logs = run_to_end(example("train-jax.yaml"), job_client)
    found = JAX_OK.findall(logs)
    assert sorted(int(p) for p, *_ in found) == [0, 1], logs[-3000:]
    assert {(n, s) for _, n, s, _ in found} == {("2", "3")}  # (0 + 1) + (1 + 1) over 2 processes
    assert sorted(node for *_, node in found) == sorted(reserved_nodes(logs))


@pytest.mark.timeout(180)
def test_paddle_and_mlp_names_agree_across_ranks(platform, job_client) -> None:
    _, logs = run_to_end(example("train-paddle.yaml"), job_client)
    rows = {int(m[0]): m[1:] for m in PADDLE.findall(logs)}
    assert sorted(rows) == [0, 1, 2], logs[-3000:]
    endpoints = {row[3] for row in rows.values()}
    assert len(endpoints) == 1
    listed = endpoints.pop().split(",")
    assert len(set(listed)) == 3  # each worker its own ip:port
    for worker, (pid, num, current, _, role, mlp_num, gpu, host0, port0, rank, world, gpus, master) in rows.items():
        assert pid == role == rank == str(worker) and num == mlp_num == world == "3"
        assert current == listed[worker] and current.split(":")[0] != ""
        assert gpu == gpus == "0" and f"{host0}:{port0}" == master


PS_SERVING = re.compile(r"\[ps 0\] ps 0 serving on \S+ node=(\w+)")
PS_DONE = re.compile(r"\[chief 0\] ps training done accuracy=([\d.]+)")
CPU_POOL = {"cuberay.io/pool": "cpu"}


def _cpu_pool_nodes() -> list[str]:
    import ray

    return [n["NodeID"] for n in ray.nodes() if n["Alive"] and (n.get("Labels") or {}).get("cuberay.io/pool") == "cpu"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_parameter_server_roles_train_with_the_ps_on_the_cpu_node_its_role_names(platform, ray_cluster,
                                                                                 job_client) -> None:
    node = ray_cluster.cluster.add_node(num_cpus=2, memory=4 * 2**30, labels=CPU_POOL, wait=False)
    try:
        (cpu_node,) = wait_for(_cpu_pool_nodes, 120, "the CPU pool's node to join")
        wait_for(lambda: any(n.get("node_id") == cpu_node for n in client.api().nodes()), 30,
                 "the controller to see the CPU pool's node")
        _, logs = run_to_end(example("train-tensorflow-ps.yaml"), job_client)
    finally:
        ray_cluster.cluster.remove_node(node)
        wait_for(lambda: not _cpu_pool_nodes(), 90, "the CPU pool's node to leave")
    # Members in admission's order: the two workers, the chief, the parameter server.
    workers_a, workers_b, chief, ps = reserved_nodes(logs)
    assert ps == cpu_node and PS_SERVING.findall(logs) == [cpu_node], logs[-3000:]
    assert workers_a == workers_b and workers_a in ray_cluster.worker_node_ids  # packed on one GPU node
    assert "[chief 0] chief: variables on /job:ps/replica:0/task:0" in logs
    (accuracy,) = PS_DONE.findall(logs)
    assert float(accuracy) >= 0.85
    assert "gang: chief 0 exited 0; stopping the rest" in logs
