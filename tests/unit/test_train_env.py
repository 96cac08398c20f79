"""The worker environment: CubeStudio's names, their values, and who may override what."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuberay.runtime.env import (
    NODE_ID_NAME,
    SOFT_DEFAULTS,
    TOPOLOGY_NAMES,
    JobIdentity,
    compose_env,
    gpu_num,
    worker_env,
)
from cuberay.runtime.framework_env import FRAMEWORK_NAMES

REPO_ROOT = Path(__file__).resolve().parents[2]
JOB = JobIdentity(job_id="job-7f3a", name="bert-ft", tenant="nlp", user="alice", run_id="run-1",
                  kind="task", cpu="8", memory="32Gi", gpu="2(V100)", rdma="1(roce)")
HOSTS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def env_for(rank: int = 1, *, gpus: float = 2.0, job: JobIdentity = JOB, hosts: list[str] = HOSTS,
            node_id: str = "") -> dict[str, str]:
    return worker_env(rank=rank, world_size=len(hosts), master_addr=hosts[0], master_port=29500,
                      hosts=hosts, gpus_per_worker=gpus, job=job, node_id=node_id,
                      endpoints=[f"{h}:2222" for h in hosts], coordinator_port=29600)


def test_every_cubestudio_name_is_set_for_a_worker() -> None:
    env = env_for(rank=1)
    assert {k: env[k] for k in TOPOLOGY_NAMES - FRAMEWORK_NAMES} == {
        "RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "3", "NODE_RANK": "1", "NNODES": "3",
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
        "VC_TASK_INDEX": "1", "VC_WORKER_NUM": "3", "VC_WORKER_HOSTS": "10.0.0.1,10.0.0.2,10.0.0.3",
    }
    assert env["GPU_NUM"] == "2"
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert all(isinstance(v, str) for v in env.values())


def test_kfj_identity_carries_the_raw_resource_strings() -> None:
    env = env_for()
    assert {k: v for k, v in env.items() if k.startswith("KFJ_")} == {
        "KFJ_TASK_ID": "job-7f3a",
        "KFJ_TASK_NAME": "bert-ft",
        "KFJ_RUN_ID": "run-1",
        "KFJ_CREATOR": "alice",
        "KFJ_RUNNER": "alice",
        "KFJ_TASK_PROJECT_NAME": "nlp",
        "KFJ_TASK_RESOURCE_CPU": "8",
        "KFJ_TASK_RESOURCE_MEMORY": "32Gi",
        "KFJ_TASK_RESOURCE_GPU": "2(V100)",
        "KFJ_TASK_RESOURCE_RDMA": "1(roce)",
        "KFJ_NAMESPACE": "nlp",
        "KFJ_PIPELINE_NAME": "bert-ft",
        "KFJ_ENVIRONMENT": "local",
    }
    assert env["USERNAME"] == "alice"
    assert (env["CUBERAY_JOB_ID"], env["CUBERAY_JOB_KIND"], env["CUBERAY_TENANT"]) == (
        "job-7f3a", "task", "nlp")


def test_namespace_and_environment_when_given() -> None:
    job = dataclasses.replace(JOB, namespace="tenant-nlp", environment="kuberay-prod")
    env = env_for(job=job)
    assert env["KFJ_NAMESPACE"] == "tenant-nlp"
    assert env["KFJ_ENVIRONMENT"] == "kuberay-prod"


def test_job_identity_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        JOB.user = "mallory"  # type: ignore[misc]


@pytest.mark.parametrize(("gpus", "expected"), [
    (0, 0), (0.25, 1), (0.5, 1), (1, 1), (2, 2), (8, 8),
])
def test_gpu_num_counts_cards_a_shared_card_as_one(gpus: float, expected: int) -> None:
    assert gpu_num(gpus) == expected
    assert env_for(gpus=gpus)["GPU_NUM"] == str(expected)


@pytest.mark.parametrize("gpus", [-1, float("nan")])
def test_gpu_num_rejects_nonsense(gpus: float) -> None:
    with pytest.raises(ValueError, match="gpus_per_worker"):
        gpu_num(gpus)


def test_zero_gpu_workers_see_no_card_and_gpu_workers_keep_rays_choice() -> None:
    assert env_for(gpus=0)["CUDA_VISIBLE_DEVICES"] == ""
    assert "NVIDIA_VISIBLE_DEVICES" not in env_for(gpus=0)
    for gpus in (0.5, 1, 4):
        assert "CUDA_VISIBLE_DEVICES" not in env_for(gpus=gpus)


def test_node_id_only_when_known() -> None:
    assert NODE_ID_NAME not in env_for()
    assert env_for(node_id="abc123")[NODE_ID_NAME] == "abc123"


def test_single_worker_is_its_own_master() -> None:
    env = worker_env(rank=0, world_size=1, master_addr="10.1.1.1", master_port=1234,
                     hosts=["10.1.1.1"], gpus_per_worker=1, job=JOB)
    assert (env["RANK"], env["WORLD_SIZE"], env["VC_WORKER_HOSTS"]) == ("0", "1", "10.1.1.1")


@pytest.mark.parametrize(("rank", "world", "hosts", "match"), [
    (3, 3, HOSTS, "outside"),
    (-1, 3, HOSTS, "outside"),
    (0, 0, [], "outside"),
    (0, 3, HOSTS[:2], "2 hosts"),
])
def test_inconsistent_topology_is_refused(rank: int, world: int, hosts: list[str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        worker_env(rank=rank, world_size=world, master_addr="h", master_port=1, hosts=hosts,
                   gpus_per_worker=0, job=JOB)


@given(world=st.integers(min_value=1, max_value=64), data=st.data())
def test_both_spellings_agree_for_every_rank(world: int, data: st.DataObject) -> None:
    rank = data.draw(st.integers(min_value=0, max_value=world - 1))
    hosts = [f"10.0.{i // 256}.{i % 256}" for i in range(world)]
    env = env_for(rank=rank, hosts=hosts, gpus=data.draw(st.sampled_from([0, 0.5, 1, 8])))
    assert env["RANK"] == env["VC_TASK_INDEX"] == env["NODE_RANK"] == str(rank)
    assert env["WORLD_SIZE"] == env["VC_WORKER_NUM"] == env["NNODES"] == str(world)
    assert env["VC_WORKER_HOSTS"].split(",") == hosts
    assert env["MASTER_ADDR"] == env["VC_WORKER_HOSTS"].split(",")[0]
    assert env["LOCAL_RANK"] == "0"


# --- layering: soft defaults < inherited < platform < user < topology ---------------------


def test_user_env_overrides_defaults_and_platform_names() -> None:
    user = {"NCCL_DEBUG": "WARN", "GPU_NUM": "1", "KFJ_TASK_NAME": "mine", "MY_FLAG": "1",
            "CUDA_VISIBLE_DEVICES": "0"}
    env = compose_env(env_for(gpus=0), base={}, user=user)
    assert {k: env[k] for k in user} == user


def test_user_env_cannot_move_a_worker_in_the_gang() -> None:
    worker = env_for(rank=2)
    env = compose_env(worker, base={}, user={name: "999" for name in TOPOLOGY_NAMES})
    assert {k: env[k] for k in TOPOLOGY_NAMES} == {k: worker[k] for k in TOPOLOGY_NAMES}


def test_inherited_environment_keeps_its_soft_settings_but_not_stale_identity() -> None:
    base = {"NCCL_DEBUG": "TRACE", "PYTHONUNBUFFERED": "0", "PATH": "/usr/bin",
            "KFJ_TASK_ID": "stale", "RANK": "5", "GPU_NUM": "7"}
    env = compose_env(env_for(rank=1), base=base, user={})
    here = os.path.dirname(sys.executable)  # `python` in a command is cuberay's own interpreter
    assert (env["NCCL_DEBUG"], env["PYTHONUNBUFFERED"], env["PATH"]) == ("TRACE", "0", f"{here}{os.pathsep}/usr/bin")
    assert (env["KFJ_TASK_ID"], env["RANK"], env["GPU_NUM"]) == ("job-7f3a", "1", "2")


def test_soft_defaults_apply_when_nothing_else_sets_them() -> None:
    env = compose_env(env_for(), base={"HOME": "/root"}, user={})
    assert {k: env[k] for k in SOFT_DEFAULTS} == SOFT_DEFAULTS
    assert env["HOME"] == "/root"


def test_compose_does_not_mutate_its_inputs() -> None:
    worker, base, user = env_for(), {"A": "1"}, {"B": "2"}
    copies = (dict(worker), dict(base), dict(user))
    compose_env(worker, base=base, user=user)
    assert (worker, base, user) == copies


def test_env_module_imports_no_ray() -> None:
    """Job-side env computation is pure: it must stay usable by the simulator and renderer."""
    probe = ("import sys, cuberay.runtime.env; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'torch', 'kubernetes'}))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
