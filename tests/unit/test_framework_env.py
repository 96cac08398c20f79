"""The other frameworks' names on a command gang's worker: TF_CONFIG, JAX, Paddle and the RDMA article's MLP_*."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuberay.runtime.env import TOPOLOGY_NAMES, JobIdentity, compose_env, worker_env
from cuberay.runtime.framework_env import FRAMEWORK_NAMES, framework_env

JOB = JobIdentity(job_id="job-1", name="tf", tenant="nlp", user="alice", run_id="run-1", kind="trainjob",
                  cpu="1", memory="1Gi", gpu="0", rdma="0")


def gang(world: int, gpus: float = 0) -> list[dict[str, str]]:
    hosts = [f"10.0.0.{i + 1}" for i in range(world)]
    return [worker_env(rank=r, world_size=world, master_addr=hosts[0], master_port=29500, hosts=hosts,
                       gpus_per_worker=gpus, job=JOB, endpoints=[f"{h}:{7000 + i}" for i, h in enumerate(hosts)],
                       coordinator_port=29600)
            for r in range(world)]


def test_tf_config_lists_every_worker_and_names_this_ones_task() -> None:
    envs = gang(3)
    configs = [json.loads(e["TF_CONFIG"]) for e in envs]
    assert all(c["cluster"] == {"worker": ["10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"]} for c in configs)
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]


def test_jax_coordinator_is_worker_zero_on_its_own_port() -> None:
    envs = gang(2)
    assert {e["JAX_COORDINATOR_ADDRESS"] for e in envs} == {"10.0.0.1:29600"}
    assert [(e["JAX_NUM_PROCESSES"], e["JAX_PROCESS_ID"]) for e in envs] == [("2", "0"), ("2", "1")]


def test_paddle_endpoints_agree_across_ranks() -> None:
    envs = gang(4)
    assert len({e["PADDLE_TRAINER_ENDPOINTS"] for e in envs}) == 1
    endpoints = envs[0]["PADDLE_TRAINER_ENDPOINTS"].split(",")
    for rank, env in enumerate(envs):
        assert env["PADDLE_CURRENT_ENDPOINT"] == endpoints[rank]
        assert (env["PADDLE_TRAINER_ID"], env["PADDLE_TRAINERS_NUM"]) == (str(rank), "4")


@pytest.mark.parametrize("gpus", [0, 0.5, 8])
def test_mlp_names_are_the_rdma_articles_mapping(gpus: float) -> None:
    # export MLP_WORKER_GPU=$GPU_NUM MLP_WORKER_NUM=$WORLD_SIZE MLP_ROLE_INDEX=$RANK
    #        MLP_WORKER_0_HOST=$MASTER_ADDR MLP_WORKER_0_PORT=$MASTER_PORT
    for env in gang(2, gpus):
        assert (env["MLP_WORKER_GPU"], env["MLP_WORKER_NUM"], env["MLP_ROLE_INDEX"], env["MLP_WORKER_0_HOST"],
                env["MLP_WORKER_0_PORT"]) == (env["GPU_NUM"], env["WORLD_SIZE"], env["RANK"], env["MASTER_ADDR"],
                                              env["MASTER_PORT"])


def test_only_a_gang_with_endpoints_gets_the_framework_names() -> None:
    # A small job's one process (no endpoints) keeps a TF_CONFIG of its own; a one-worker gang gets them.
    small = worker_env(rank=0, world_size=1, master_addr="10.1.1.1", master_port=1234, hosts=["10.1.1.1"],
                       gpus_per_worker=0, job=JOB)
    assert not FRAMEWORK_NAMES & small.keys()
    (one,) = gang(1)
    assert FRAMEWORK_NAMES <= one.keys()
    assert json.loads(one["TF_CONFIG"])["cluster"] == {"worker": ["10.0.0.1:7000"]}


def test_framework_names_are_topology_the_user_cannot_override() -> None:
    worker = gang(2)[1]
    env = compose_env(worker, base={"TF_CONFIG": "stale"}, user={name: "x" for name in FRAMEWORK_NAMES})
    assert FRAMEWORK_NAMES <= TOPOLOGY_NAMES
    assert {k: env[k] for k in FRAMEWORK_NAMES} == {k: worker[k] for k in FRAMEWORK_NAMES}


@given(world=st.integers(min_value=1, max_value=32), data=st.data())
def test_ids_agree_with_rank_for_every_rank(world: int, data: st.DataObject) -> None:
    rank = data.draw(st.integers(min_value=0, max_value=world - 1))
    endpoints = [f"h{i}:1" for i in range(world)]
    env = framework_env(rank=rank, endpoints=endpoints, master_addr="h0", master_port=1, coordinator_port=2,
                        gpu_num=0)
    assert env["JAX_PROCESS_ID"] == env["PADDLE_TRAINER_ID"] == env["MLP_ROLE_INDEX"] == str(rank)
    assert json.loads(env["TF_CONFIG"])["task"]["index"] == rank


def test_a_rank_outside_the_endpoints_is_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        framework_env(rank=2, endpoints=["a:1", "b:1"], master_addr="a", master_port=1, coordinator_port=2, gpu_num=0)


def test_tf_config_with_roles_lists_each_role_and_leaves_the_evaluator_out_of_the_cluster() -> None:
    tasks = [("worker", 0), ("worker", 1), ("chief", 0), ("ps", 0), ("ps", 1), ("evaluator", 0)]
    endpoints = [f"10.0.0.{i}:2222" for i in range(6)]
    configs = [json.loads(framework_env(rank=i, endpoints=endpoints, master_addr="10.0.0.0", master_port=1,
                                        coordinator_port=2, gpu_num=0, tasks=tasks)["TF_CONFIG"]) for i in range(6)]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)  # one cluster, as every member sees it
    assert configs[0]["cluster"] == {"worker": endpoints[:2], "chief": [endpoints[2]], "ps": endpoints[3:5]}
    assert [(c["task"]["type"], c["task"]["index"]) for c in configs] == tasks
