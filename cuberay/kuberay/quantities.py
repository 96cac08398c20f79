"""Ray resource vectors as Kubernetes resource names and quantities (``cpu: 1500m``, ``nvidia.com/gpu: 8``)."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import cuberay.platform.spec.resources as res
from cuberay.platform.spec.resource_grammar import RDMA_FABRICS


def pool_fabric(pool: Any) -> str | None:
    return pool.resources._request().rdma_fabric


def k8s_names(vector: Mapping[str, float], fabric: str | None = None) -> dict[str, float]:
    """Ray resource vector -> Kubernetes resource names (cpu, memory, nvidia.com/gpu, rdma/hca).

    Custom Ray resources have no Kubernetes counterpart and are left out.
    """
    out: dict[str, float] = {}
    for name, amount in vector.items():
        if name == res.CPU:
            key = "cpu"
        elif name == res.MEMORY:
            key = "memory"
        elif name in res.K8S_ACCELERATOR_NAMES:
            key = res.K8S_ACCELERATOR_NAMES[name]
        elif name == res.RDMA:
            key = RDMA_FABRICS.get(fabric or "rdma", "rdma/hca")
        else:
            continue
        out[key] = out.get(key, 0.0) + amount
    return out


def quantity(name: str, amount: float) -> str:
    """A Kubernetes quantity string: ``1500m``, ``4Gi``, ``2``."""
    if name == "memory":
        for unit, size in (("Gi", 2**30), ("Mi", 2**20)):
            if amount >= size and abs(amount / size - round(amount / size)) < 1e-9:
                return f"{round(amount / size)}{unit}"
        return str(int(math.ceil(amount - 1e-6)))
    if name == "cpu":
        if abs(amount - round(amount)) < 1e-9:
            return str(int(round(amount)))
        return f"{int(round(amount * 1000))}m"
    return str(int(math.ceil(amount - 1e-9)))


def quantities(vector: Mapping[str, float], fabric: str | None = None) -> dict[str, str]:
    return {k: quantity(k, v) for k, v in k8s_names(vector, fabric).items()}


def total(vectors: Iterable[Mapping[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for vector in vectors:
        for k, v in vector.items():
            out[k] = out.get(k, 0.0) + v
    return out
