"""The shared cluster fixture gives what integration tests rely on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import ray
from ray.job_submission import JobStatus, JobSubmissionClient
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

NODE_ID = "ray.io/node-id"
REPO_ROOT = Path(__file__).resolve().parents[2]


@ray.remote(num_cpus=0)
class Where:
    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


def _nodes_of_bundles(pg, bundles: int) -> list[str]:
    """Start one actor per bundle and ask each where it runs."""
    actors = [
        Where.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=i)
        ).remote()
        for i in range(bundles)
    ]
    try:
        return ray.get([a.node_id.remote() for a in actors], timeout=60)
    finally:
        for actor in actors:
            ray.kill(actor)


def test_nodes_and_resources(ray_cluster) -> None:
    alive = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
    assert set(alive) == {ray_cluster.head_node_id, *ray_cluster.worker_node_ids}
    assert len(ray_cluster.worker_node_ids) == 3
    total = ray.cluster_resources()
    assert total["GPU"] == 12
    assert total["CPU"] == 16
    assert "GPU" not in alive[ray_cluster.head_node_id]["Resources"]
    for node_id in ray_cluster.worker_node_ids:
        resources = alive[node_id]["Resources"]
        assert (resources["CPU"], resources["GPU"], resources["memory"]) == (4, 4, 32 * 2**30)
    models = [ray_cluster.node_labels[n]["ray.io/accelerator-type"] for n in ray_cluster.worker_node_ids]
    assert models == ["A100", "A100", "V100"]


def test_placement_group_pinned_by_node_id_lands_there(ray_cluster) -> None:
    # Pin to the last worker: the default scheduler would not pick it by itself
    # every time, so a silent ignore of the selector shows up.
    for target in (ray_cluster.worker_node_ids[-1], ray_cluster.worker_node_ids[0]):
        pg = placement_group(
            [{"CPU": 1, "GPU": 2}, {"CPU": 1, "GPU": 2}],
            strategy="PACK",
            bundle_label_selector=[{NODE_ID: target}, {NODE_ID: target}],
        )
        try:
            ray.get(pg.ready(), timeout=60)
            table = ray.util.placement_group_table(pg)
            assert set(table["bundles_to_node_id"].values()) == {target}
            assert _nodes_of_bundles(pg, 2) == [target, target]
        finally:
            remove_placement_group(pg)


def test_placement_group_with_in_selector_and_accelerator_label(ray_cluster) -> None:
    a100 = ray_cluster.worker_node_ids[:2]
    spread = placement_group(
        [{"GPU": 4}, {"GPU": 4}],
        strategy="STRICT_SPREAD",
        bundle_label_selector=[{NODE_ID: f"in({','.join(a100)})"}] * 2,
    )
    v100 = placement_group([{"GPU": 1}], bundle_label_selector=[{"ray.io/accelerator-type": "V100"}])
    try:
        ray.get([spread.ready(), v100.ready()], timeout=60)
        assert sorted(_nodes_of_bundles(spread, 2)) == sorted(a100)
        assert _nodes_of_bundles(v100, 1) == [ray_cluster.worker_node_ids[2]]
    finally:
        remove_placement_group(spread)
        remove_placement_group(v100)


def _wait_terminal(client: JobSubmissionClient, job_id: str, timeout_s: float = 120) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while (status := client.get_job_status(job_id)) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        assert time.monotonic() < deadline, f"job {job_id} still {status} after {timeout_s}s"
        time.sleep(0.5)
    return status


def test_jobs_api_runs_this_python_and_this_checkout(ray_cluster, job_client) -> None:
    job_id = job_client.submit_job(
        entrypoint="python -c 'import sys, cuberay.errors, ray; ray.init(); "
        "print(sys.executable); print(cuberay.errors.__file__); print(int(ray.cluster_resources()[\"GPU\"]))'",
        metadata={"cuberay.test": "fixture"},
    )
    status = _wait_terminal(job_client, job_id)
    logs = job_client.get_job_logs(job_id)
    assert status == JobStatus.SUCCEEDED, logs
    lines = logs.strip().splitlines()
    assert os.path.realpath(lines[-3]) == os.path.realpath(sys.executable)
    assert Path(lines[-2]).resolve() == REPO_ROOT / "cuberay" / "errors.py"
    assert lines[-1] == "12"
    assert job_client.get_job_info(job_id).metadata["cuberay.test"] == "fixture"


def test_jobs_api_requires_the_token(ray_cluster) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    probe = (
        "import sys\nfrom ray.job_submission import JobSubmissionClient\n"
        "try:\n    JobSubmissionClient(sys.argv[1]).list_jobs()\nexcept Exception as e:\n"
        "    print(type(e).__name__); sys.exit(1)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, ray_cluster.dashboard_url],
        env={**env, "HOME": "/nonexistent"},  # no ~/.ray/auth_token either
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "AuthenticationError" in result.stdout
