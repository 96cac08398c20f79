"""Correction at submit: the store's history of successful runs rewrites the spec's per-worker request."""

from __future__ import annotations

import time
from pathlib import Path

from cuberay.platform.control import correcting
from cuberay.platform.control.store import Store, default_url
from cuberay.platform.policy.correction import GiB
from cuberay.platform.policy.scheduling import TenantQuota
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec
from cuberay.platform.spec.resources import Resources
from tests.unit.test_store import job as record

NODES = [{"CPU": 64.0, "memory": 256.0 * GiB}, {"CPU": 16.0, "memory": 64.0 * GiB}]


def spec(env: dict | None = None, workers: int = 2) -> object:
    return load_spec({"apiVersion": "cuberay.io/v1alpha1", "kind": "TrainJob",
                      "metadata": {"name": "mnist-ddp", "tenant": "vision"},
                      "spec": {"workers": workers, "resources": {"cpu": "8", "memory": "64Gi", "gpu": "1"},
                               "command": "python train.py", "env": env or {}}})


def with_runs(tmp_path: Path, n: int, peak_cpu: float = 3.3, peak_gib: float = 10.2) -> Store:
    store = Store(default_url(tmp_path))
    now = time.time()
    for seq in range(1, n + 1):
        store.add_job(record(seq))
        store.update_job(f"vision-mnist-ddp-{seq}", state=JobState.SUCCEEDED, end_time=now - seq * 60, attempts=1)
        store.add_usage(f"vision-mnist-ddp-{seq}", 1, 0, peak_cpu if seq == n else 1.0, peak_gib if seq == n else 2.0)
        store.add_usage(f"vision-mnist-ddp-{seq}", 1, 1, 0.5, 1.0)
    return store


def test_ten_successful_runs_rewrite_the_request(tmp_path: Path) -> None:
    with with_runs(tmp_path, 10) as store:
        job, correction = correcting.apply(store, spec(), None, NODES, time.time())
    assert job.spec.resources.cpu == "7" and job.spec.resources.memory == "17Gi"  # ceil(x*1.4)+2
    assert job.spec.resources.gpu == "1"
    assert correction["requested"] == {"cpu": "8", "memory": "64Gi"}
    assert correction["corrected"] == {"cpu": "7", "memory": "17Gi"}
    assert "cpu 8, memory 64Gi to cpu 7, memory 17Gi" in correcting.describe(correction)


def test_nine_runs_leave_it_alone_and_no_resource_check_opts_out(tmp_path: Path) -> None:
    with with_runs(tmp_path, 9) as store:
        assert correcting.apply(store, spec(), None, NODES, time.time())[1] is None
    with with_runs(tmp_path / "b", 10) as store:
        job, correction = correcting.apply(store, spec({"NO_RESOURCE_CHECK": "true"}), None, NODES, time.time())
    assert correction is None and job.spec.resources.cpu == "8"


def test_bounded_by_tenant_max_per_worker_and_largest_node(tmp_path: Path) -> None:
    quota = TenantQuota("vision", max=Resources({"CPU": 20.0, "memory": 1000.0 * GiB}))
    assert correcting.worker_ceiling(quota, 2, NODES) == {"CPU": 10.0, "memory": 256.0 * GiB}
    # A gang with roles: what its roles hold comes off the max before the workers share it.
    assert correcting.worker_ceiling(quota, 2, NODES, {"CPU": 8.0})["CPU"] == 6.0
    with with_runs(tmp_path, 10, peak_cpu=40.0, peak_gib=300.0) as store:
        job, correction = correcting.apply(store, spec(), quota, NODES, time.time())
    assert job.spec.resources.cpu == "10" and job.spec.resources.memory == "256Gi"
    assert "bounded" in correction["reason"]


def test_status_shows_requested_vs_corrected_and_why(tmp_path: Path) -> None:
    from cuberay.cli.views import job_detail

    with with_runs(tmp_path, 10) as store:
        _, correction = correcting.apply(store, spec(), None, NODES, time.time())
        shown = record(99, correction=correction)
    rows = {r["field"]: r["value"] for r in job_detail(shown)}
    assert rows["requested"] == "cpu 8, memory 64Gi per worker"
    assert rows["corrected"] == "cpu 7, memory 17Gi per worker"
    assert rows["corrected why"].startswith("the last 10 successful runs peaked at 3.30 cores and 10.20 GiB")
