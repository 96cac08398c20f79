"""The resource grammar: CubeStudio strings -> vectors -> Ray and Kubernetes requests."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as k8s_quantity

from cuberay.errors import SpecError
from cuberay.platform.spec.resource_grammar import parse_cpu, parse_gpu, parse_memory, parse_quantity, parse_rdma
from cuberay.platform.spec.resources import (
    LABEL_ACCELERATOR,
    LABEL_RDMA,
    Resources,
    format_resources,
    parse_worker,
    total,
)

GI = 2**30


@pytest.mark.parametrize(
    ("fields", "ray", "k8s", "selector"),
    [
        ({"cpu": "2"}, {"CPU": 2.0}, {"cpu": "2"}, {}),
        ({"cpu": "500m"}, {"CPU": 0.5}, {"cpu": "500m"}, {}),
        ({"cpu": 0.25}, {"CPU": 0.25}, {"cpu": "250m"}, {}),
        ({"cpu": "4(AMD)"}, {"CPU": 4.0}, {"cpu": "4"}, {}),
        ({"memory": "32Gi"}, {"memory": 32.0 * GI}, {"memory": "32Gi"}, {}),
        ({"memory": "512Mi"}, {"memory": 512.0 * 2**20}, {"memory": "512Mi"}, {}),
        ({"memory": "1G"}, {"memory": 1e9}, {"memory": "1000000000"}, {}),
        ({"memory": "1.1G"}, {"memory": 1.1e9}, {"memory": "1100000000"}, {}),
        ({"gpu": "2"}, {"GPU": 2.0}, {"nvidia.com/gpu": "2"}, {}),
        ({"gpu": "0.5"}, {"GPU": 0.5}, {"nvidia.com/gpu": "1"}, {}),
        ({"gpu": "0"}, {}, {}, {}),
        ({"gpu": "2(V100)"}, {"GPU": 2.0, "accelerator_type:V100": 0.001}, {"nvidia.com/gpu": "2"},
         {LABEL_ACCELERATOR: "V100"}),
        ({"gpu": "2（A100）"}, {"GPU": 2.0, "accelerator_type:A100": 0.001}, {"nvidia.com/gpu": "2"},
         {LABEL_ACCELERATOR: "A100"}),
        ({"gpu": "1(nvidia,H100)"}, {"GPU": 1.0, "accelerator_type:H100": 0.001}, {"nvidia.com/gpu": "1"},
         {LABEL_ACCELERATOR: "H100"}),
        ({"gpu": "1(npu,910B)"}, {"NPU": 1.0, "accelerator_type:910B": 0.001}, {"huawei.com/Ascend910": "1"},
         {LABEL_ACCELERATOR: "910B"}),
        ({"rdma": "1(roce)"}, {"rdma": 1.0}, {"rdma/shared": "1"}, {LABEL_RDMA: "roce"}),
        ({"rdma": "2(ib)"}, {"rdma": 2.0}, {"rdma/hca": "2"}, {LABEL_RDMA: "ib"}),
        ({"rdma": "0(roce)"}, {}, {}, {}),
        ({"custom": {"TPU-v4-pod": 2}}, {"TPU-v4-pod": 2.0}, {"TPU-v4-pod": "2"}, {}),
        ({"cpu": "8", "memory": "64Gi", "gpu": "8(A100)", "rdma": "1(ib)"},
         {"CPU": 8.0, "memory": 64.0 * GI, "GPU": 8.0, "rdma": 1.0, "accelerator_type:A100": 0.001},
         {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8", "rdma/hca": "1"},
         {LABEL_ACCELERATOR: "A100", LABEL_RDMA: "ib"}),
    ],
)
def test_grammar_round_trip(fields: dict, ray: dict, k8s: dict, selector: dict) -> None:
    req = parse_worker(**fields)
    assert req.to_ray() == pytest.approx(ray)
    assert req.to_k8s() == k8s
    assert req.node_selector() == selector


def test_k8s_memory_never_requests_less_than_asked() -> None:
    for text in ("1.1G", "1.5Gi", "3000Mi", "123456789", "2.5G"):
        req = parse_worker(memory=text)
        assert parse_memory(req.to_k8s()["memory"]) == parse_memory(text), text


def test_labels_become_node_selector() -> None:
    req = parse_worker(cpu="1", gpu="1(T4)", labels={"cuberay.io/pool": "a100"})
    assert req.node_selector() == {"cuberay.io/pool": "a100", LABEL_ACCELERATOR: "T4"}


def test_gpu_request_fields() -> None:
    assert parse_gpu("1(npu,910B)").resource == "NPU"
    assert parse_gpu("2(V100)").model == "V100"
    assert parse_gpu(0.5).count == 0.5
    assert parse_rdma("1(RoCE)") == (1.0, "roce")


@pytest.mark.parametrize(
    ("parse", "value", "words"),
    [
        (parse_cpu, "abc", ["'abc'", "e.g."]),
        (parse_cpu, "-1", ["'-1'", ">= 0"]),
        (parse_cpu, "1.5.3", ["1.5.3"]),
        (parse_cpu, "", ["e.g."]),
        (parse_memory, "4GB", ["'GB'", "Gi"]),
        (parse_memory, "-1Gi", [">= 0"]),
        (parse_memory, "Gi", ["not a quantity"]),
        (parse_memory, True, ["True"]),
        (parse_gpu, "1.5", ["must be whole", "2"]),
        (parse_gpu, "-1", [">= 0"]),
        (parse_gpu, "nan", ["nan"]),
        (parse_gpu, "inf", ["inf"]),
        (parse_gpu, "two", ["e.g.", "2(V100)"]),
        (parse_gpu, "1(foo,bar)", ["unknown vendor", "nvidia"]),
        (parse_gpu, "1(a,b,c)", ["e.g."]),
        (parse_gpu, "8G,0.5", ["e.g."]),
        (parse_rdma, "1(xyz)", ["unknown fabric", "roce"]),
        (parse_rdma, "x(roce)", ["not a number", "1(roce)"]),
    ],
)
def test_bad_strings_raise_spec_error_with_a_hint(parse, value, words: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        parse(value)
    for word in words:
        assert word in str(err.value), f"{word!r} missing from: {err.value}"


def test_custom_resource_may_not_shadow_a_built_in() -> None:
    with pytest.raises(SpecError, match="shadows a built-in"):
        parse_worker(custom={"GPU": 1})


# ---------------------------------------------------------------- agreement with Kubernetes

_BINARY = ["Ki", "Mi", "Gi", "Ti"]
_DECIMAL = ["", "k", "M", "G", "T", "m"]
quantities = st.builds(
    lambda number, suffix: f"{number}{suffix}",
    st.one_of(st.integers(0, 10**6).map(str),
              st.decimals(0, 10**4, places=3, allow_nan=False, allow_infinity=False).map(str),
              st.integers(0, 9).map(lambda e: f"1e{e}")),
    st.sampled_from(_BINARY + _DECIMAL),
)


@settings(max_examples=300, deadline=None)
@given(quantities)
def test_parse_memory_agrees_with_kubernetes(text: str) -> None:
    expected = k8s_quantity(text)
    assert parse_quantity(text) == expected
    if expected > 2**60:  # more than 1Ei: refused as a typo (see test_spec_limits)
        with pytest.raises(SpecError, match="at most 1Ei"):
            parse_memory(text)
    elif expected < 2**53:  # beyond it a float has no whole-byte precision anyway
        assert parse_memory(text) == int(expected)
    else:
        assert math.isclose(parse_memory(text), int(expected), rel_tol=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 64000).map(lambda m: f"{m}m"))
def test_parse_cpu_agrees_with_kubernetes(text: str) -> None:
    assert Decimal(str(parse_cpu(text))) == k8s_quantity(text)


# ---------------------------------------------------------------- arithmetic

def _vectors() -> st.SearchStrategy[Resources]:
    # Amounts as users ask for them: millicores, whole bytes, GPU shares in hundredths, whole devices.
    return st.builds(
        lambda cpu, mem, gpu, rdma, tpu: Resources(CPU=cpu / 1000, memory=mem, GPU=gpu / 100, rdma=rdma, TPU=tpu),
        st.integers(0, 10**6), st.integers(0, 2**50), st.integers(0, 10**5), st.integers(0, 64), st.integers(0, 8),
    )


@settings(max_examples=300, deadline=None)
@given(_vectors(), _vectors())
def test_resources_arithmetic(a: Resources, b: Resources) -> None:
    assert (a + b) - b == a
    assert hash((a + b) - b) == hash(a)
    assert a <= a + b
    assert a + b == b + a
    assert a * 2 == a + a
    assert total([a, b]) == a + b
    assert ((a - b) + b) == a


def test_resources_drop_zeros_and_compare() -> None:
    assert Resources(CPU=0, GPU=1) == Resources(GPU=1)
    assert len(Resources()) == 0
    assert not Resources(GPU=2) <= Resources(GPU=1, CPU=8)
    assert Resources(GPU=2).exceeding(Resources(GPU=1)) == {"GPU": (2.0, 1.0)}
    assert Resources(CPU=0.1) + Resources(CPU=0.2) == Resources(CPU=0.3)
    assert format_resources(Resources(CPU=2, memory=4 * GI)) == "CPU=2, memory=4Gi"
    assert Resources.parse(cpu="1", memory="1Gi", gpu="1(T4)") == Resources(CPU=1, memory=GI, GPU=1)
