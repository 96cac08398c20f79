"""A tenant's Ray cluster run here as on KubeRay: `cuberay up --tenant-cluster`, with Ray's own autoscaler (v2).

One cluster for the module (configs/tenant-cluster/platform.yaml: worker groups cpu and gpu, 0..2 nodes of 2 CPUs
each, the gpu group's with 2 logical A100s), started by the real CLI in a subprocess with a home and Ray temp
root of its own; the session's Ray cluster is not used. Nodes are real local raylets that Ray's autoscaler starts
and stops; what the tests read of them comes from Ray (``ray.nodes()``, the autoscaler's cluster status) through
tests/integration/tenant_probe.py, a user's script against the cluster.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest
import yaml

from cuberay.kuberay import labels as L
from cuberay.kuberay.render import tenant_manifests
from cuberay.kuberay.render_cluster import RenderOptions
from cuberay.kuberay.tenant_shape import autoscaling_config, tenant_raycluster
from cuberay.platform.policy.pool_shares import platform_shares
from cuberay.platform.spec import load_platform
from tests.integration.own_head import kill_leftovers, own_head_env
from tests.support import wait_for

pytestmark = [pytest.mark.own_ray, pytest.mark.timeout(600)]

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIGS = REPO_ROOT / "configs" / "tenant-cluster"
PLATFORM = CONFIGS / "platform.yaml"
TENANT = "vision"
IDLE_S = 5
POOL = "cuberay.io/pool"


class TenantCluster:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root, self.env = root, env
        self.facts: dict[str, Any] = {}

    def cli(self, *argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cuberay", *argv], env=self.env, cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=timeout)

    def probe(self, *argv: str) -> dict[str, Any]:
        out = self.root / f"probe-{uuid.uuid4().hex[:8]}.json"
        result = subprocess.run([sys.executable, "-m", "tests.integration.tenant_probe", *argv],
                                env={**self.env, "RAY_AUTH_MODE": "token", "TENANT_PROBE_OUT": str(out)},
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=420)
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads(out.read_text())

    @property
    def head(self) -> dict[str, Any]:
        return json.loads((Path(self.env["CUBERAY_HOME"]) / "local-head.json").read_text())

    def spec(self, name: str, **changes: Any) -> str:
        """configs/tenant-cluster/NAME.yaml with ``changes`` to its spec, written to this cluster's root."""
        doc = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
        doc["spec"].update(changes)
        path = self.root / f"{name}-{len(list(self.root.glob('*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return str(path)

    def state(self, job_id: str) -> dict[str, Any]:
        result = self.cli("status", job_id, "-o", "json", timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads(result.stdout)


@pytest.fixture(scope="module")
def cluster() -> Iterator[TenantCluster]:
    root = Path(tempfile.mkdtemp(prefix="crt", dir="/tmp"))  # short: Ray's socket paths stay under 108 bytes
    env = own_head_env(root)
    tc = TenantCluster(root, env)
    try:
        up = tc.cli("up", "--tenant-cluster", TENANT, "--platform", str(PLATFORM), "--idle-timeout", str(IDLE_S),
                    "-o", "json")
        assert up.returncode == 0, up.stdout + up.stderr
        tc.facts = json.loads(up.stdout)
        yield tc
    finally:
        down = tc.cli("down", timeout=180)
        kill_leftovers(env)
        shutil.rmtree(root, ignore_errors=True)
        assert down.returncode == 0, down.stdout + down.stderr


def _rendered_cluster() -> dict[str, Any]:
    """The RayCluster `cuberay kube render` writes for the tenant (the renderer's own entry point)."""
    plat = load_platform(PLATFORM)
    tenant = next(t for t in plat.tenants if t.name == TENANT)
    opts = RenderOptions(scheduler=L.Scheduler.none, autoscaling=True)
    manifests = tenant_manifests(plat, tenant, platform_shares(plat)[TENANT], opts)
    return next(m.obj for m in manifests if m.kind == "RayCluster")


def test_the_autoscaler_runs_the_rendered_worker_groups(cluster: TenantCluster) -> None:
    head = cluster.head
    running = json.loads((Path(head["temp_dir"]) / "autoscaling.json").read_text())
    rendered = _rendered_cluster()
    assert tenant_raycluster(load_platform(PLATFORM), TENANT)[0] == rendered
    expected = autoscaling_config(rendered, head["address"], IDLE_S)
    assert running["available_node_types"] == expected["available_node_types"]
    groups = {g["groupName"]: g for g in rendered["spec"]["workerGroupSpecs"]}
    types = running["available_node_types"]
    assert set(types) - {running["head_node_type"]} == set(groups) == {"cpu", "gpu"}
    for name, group in groups.items():
        assert (types[name]["min_workers"], types[name]["max_workers"]) == (group["minReplicas"], group["maxReplicas"])
        assert types[name]["labels"][POOL] == name
    assert types["gpu"]["resources"]["GPU"] == 2 and types["gpu"]["labels"]["ray.io/accelerator-type"] == "A100"
    assert running["idle_timeout_minutes"] * 60 == pytest.approx(IDLE_S)
    # The controller counts the same worker groups: the head's environment is the rendered head container's.
    container = rendered["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    rendered_groups = next(e["value"] for e in container["env"] if e["name"] == "CUBERAY_KUBE_WORKER_GROUPS")
    gcs = [p for p in psutil.process_iter() if "gcs_server" in p.name() and head["temp_dir"] in " ".join(p.cmdline())]
    assert gcs and gcs[0].environ()["CUBERAY_KUBE_WORKER_GROUPS"] == rendered_groups
    assert [g["group"] for g in cluster.facts["worker_groups"]] == sorted(groups)
    # No worker node at first (minReplicas 0): the head alone, and it runs no work.
    assert len(cluster.probe("nodes")["nodes"]) == 1


def test_a_gang_no_worker_group_could_hold_is_refused_at_submit(cluster: TenantCluster) -> None:
    """3 GPUs on one worker: within the tenant's max of 4, but a gpu-group node has 2."""
    result = cluster.cli("submit", cluster.spec("gpu-gang", workers=1, resources={"cpu": "1", "gpu": "3"}))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "one worker needs" in result.stderr and "the largest matching node has" in result.stderr, result.stderr


def test_a_cancelled_waiting_gang_withdraws_its_request(cluster: TenantCluster) -> None:
    seen = cluster.probe("cancel", cluster.spec("gpu-gang", command="sleep 60"))
    assert seen["reason"].startswith("waiting for new nodes:") and "worker group gpu" in seen["reason"], seen
    assert any(c["bundle"].get("GPU") for c in seen["before"]), seen  # the autoscaler was asked for GPUs
    assert seen["state"] == "CANCELLED" and seen["attempts"] == 0, seen
    assert seen["after"] == [], seen  # and is asked for nothing once it is cancelled


def test_waiting_gangs_get_new_nodes_of_their_pools_and_never_more_than_the_tenant_max(cluster: TenantCluster) -> None:
    """Three 2-GPU gangs (6 GPUs; the tenant's max is 4) and a CPU gang pinned to the cpu pool."""
    gpu = [cluster.spec("gpu-gang") for _ in range(3)]
    seen = cluster.probe("run", *gpu, cluster.spec("cpu-gang"))
    jobs = seen["jobs"]
    # Admitted once on the new nodes (no node the gang was admitted on was taken from under it), and done.
    off = {i: (j["state"], j["attempts"], j["reasons"][-3:]) for i, j in jobs.items()
           if (j["state"], j["attempts"]) != ("SUCCEEDED", 1)}
    assert not off, off
    asked = [r for j in jobs.values() for r in j["reasons"] if r.startswith("waiting for new nodes:")]
    assert any("worker group gpu" in r for r in asked) and any("worker group cpu" in r for r in asked), jobs
    assert seen["max_gpus_asked"] <= 4, seen["max_gpus_asked"]
    for job_id, job in jobs.items():
        pools = {seen["seen"][n].get(POOL) for n in job["nodes"]}
        assert pools == ({"cpu"} if "cpu-gang" in job_id else {"gpu"}), (job_id, job, seen["seen"])
        if "gpu-gang" in job_id:
            assert {seen["seen"][n]["ray.io/accelerator-type"] for n in job["nodes"]} == {"A100"}
    # No more nodes than needed: the gpu group within its max, and the CPU gang's 2 one-CPU workers sharing one
    # new 2-CPU node (the autoscaler packs; cuberay's spread is a preference).
    assert seen["peak"].get("gpu", 0) <= 2 and seen["peak"].get("cpu") == 1, seen["peak"]


def test_idle_nodes_go_while_running_work_keeps_its_node(cluster: TenantCluster) -> None:
    long_id = json.loads(cluster.cli("submit", cluster.spec("cpu-gang", command="sleep 600"), "-o", "json").stdout)["id"]
    wait_for(lambda: cluster.state(long_id)["state"] == "RUNNING", 120, f"{long_id} to run", poll_s=1.0)
    short = cluster.probe("run", cluster.spec("gpu-gang"))
    assert [j["state"] for j in short["jobs"].values()] == ["SUCCEEDED"], short
    long_nodes = {a["node_id"] for a in cluster.state(long_id)["allocation"] or []}

    def gpu_nodes_gone() -> dict[str, Any] | None:
        now = cluster.probe("nodes")
        return now if not any(labels.get(POOL) == "gpu" for labels in now["nodes"].values()) else None

    now = wait_for(gpu_nodes_gone, IDLE_S + 90, "the idle gpu nodes to be removed", poll_s=1.0)
    record = cluster.state(long_id)
    assert record["state"] == "RUNNING" and record["attempts"] == 1, record
    assert long_nodes and long_nodes <= set(now["nodes"]), (long_nodes, now)  # its node stays
    # The ledger forgot the removed nodes: a new GPU gang asks for new nodes again, and runs on them.
    again = cluster.probe("run", cluster.spec("gpu-gang"))
    job = next(iter(again["jobs"].values()))
    assert job["state"] == "SUCCEEDED" and any(r.startswith("waiting for new nodes:") for r in job["reasons"]), job
    # The long job ran through the scale-down and the next scale-up undisturbed: its first attempt, on its node.
    record = cluster.state(long_id)
    assert record["state"] == "RUNNING" and record["attempts"] == 1, record
    assert {a["node_id"] for a in record["allocation"] or []} == long_nodes, record
    assert cluster.cli("cancel", long_id).returncode == 0  # no need to wait out its sleep
    wait_for(lambda: cluster.state(long_id)["state"] == "CANCELLED", 120, f"{long_id} to be cancelled", poll_s=1.0)
