"""The per-pool view of tenant quotas (cuberay.platform.policy.pool_shares)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuberay.errors import SpecError
from cuberay.platform.policy.pool_shares import platform_shares, split, tenant_shares
from cuberay.platform.spec import load_platform
from cuberay.platform.spec.resources import Resources

REPO = Path(__file__).resolve().parents[3]
GiB = float(2**30)


def test_default_split_is_in_proportion_to_pool_capacity() -> None:
    shares = {s.pool.name: s for s in platform_shares(load_platform(REPO / "configs" / "platform.yaml"))["vision"]}
    # 2 CPUs over pools of 4 and 2 CPUs; 4Gi over 8Gi and 8Gi; 2 GPUs all in the only GPU pool.
    assert shares["cpu"].guaranteed == Resources(CPU=1.333, memory=2 * GiB)
    assert shares["gpu"].guaranteed == Resources(CPU=0.667, memory=2 * GiB, GPU=2)
    assert shares["cpu"].max == Resources(CPU=4, memory=8 * GiB)  # max bounded by the pool
    assert (shares["cpu"].min_replicas, shares["cpu"].max_replicas) == (0, 2)


def test_explicit_pool_quota_and_the_rest_split() -> None:
    platform = load_platform(REPO / "configs" / "kube" / "platform-large.yaml")
    shares = {s.pool.name: s for s in tenant_shares(platform, platform.tenant("vision"))}
    assert set(shares) == {"cpu", "a100"}  # its pools only
    assert shares["a100"].explicit and shares["a100"].guaranteed == Resources(CPU=64, memory=512 * GiB, GPU=8)
    assert shares["cpu"].guaranteed == Resources(CPU=32, memory=128 * GiB)  # 96 - 64 CPUs, 640Gi - 512Gi
    assert (shares["a100"].min_replicas, shares["cpu"].min_replicas) == (1, 1)
    llm = {s.pool.name: s for s in tenant_shares(platform, platform.tenant("llm"))}
    assert llm["h100-ib"].lending == Resources(GPU=8)


def test_guarantee_no_pool_offers_is_an_error() -> None:
    data = load_platform(REPO / "configs" / "kube" / "platform-large.yaml").model_dump(mode="json", by_alias=True)
    data["spec"]["tenants"][0]["pool_quotas"] = {}
    data["spec"]["tenants"][0]["pools"] = ["cpu"]  # vision is guaranteed GPUs, the cpu pool has none
    with pytest.raises(SpecError, match="none of its pools"):
        platform_shares(load_platform(data))


def test_unknown_pool_name_is_a_spec_error() -> None:
    data = load_platform(REPO / "configs" / "platform.yaml").model_dump(mode="json", by_alias=True)
    data["spec"]["tenants"][0]["pools"] = ["cpu", "tpu"]
    with pytest.raises(SpecError, match="pool 'tpu' is not a node pool"):
        load_platform(data)


@given(amount=st.integers(0, 10**6), weights=st.lists(st.integers(1, 1000), min_size=1, max_size=6))
def test_split_adds_up_and_stays_in_units(amount: int, weights: list[int]) -> None:
    parts = split(amount / 1000, {str(i): float(w) for i, w in enumerate(weights)}, 0.001)
    assert abs(sum(parts.values()) - amount / 1000) < 1e-6
    assert all(abs(v * 1000 - round(v * 1000)) < 1e-6 for v in parts.values())


def test_a_job_must_fit_the_pools_its_tenant_may_use() -> None:
    """The fit check (submit, `spec validate --platform`, render-job) uses the tenant's pools only."""
    from cuberay.errors import AdmissionError
    from cuberay.platform.policy.fit import check_job
    from cuberay.platform.spec import load_spec

    platform = load_platform(REPO / "configs" / "kube" / "platform-large.yaml")
    job = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "ib", "tenant": "llm"},
           "spec": {"workers": 2, "resources": {"cpu": "8", "gpu": "8(H100)"}, "command": "true"}}
    assert check_job(platform, load_spec(job)).name == "llm"
    job["metadata"]["tenant"] = "vision"  # vision may use cpu and a100, no H100 node
    with pytest.raises(AdmissionError, match="H100"):
        check_job(platform, load_spec(job))
