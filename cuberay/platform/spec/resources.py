"""Resource vectors: what a worker, a node or a quota holds, keyed by Ray's resource names.

A :class:`Resources` vector adds, subtracts, scales and compares; a
:class:`WorkerRequest` is one worker's vector plus the constraints a node must
meet (accelerator type, RDMA fabric, labels). Vectors use Ray's resource names
(``CPU``, ``memory`` in bytes, ``GPU``, ``rdma``, custom names), so a vector
converts to Ray without renaming. The strings users write are parsed by
:mod:`cuberay.platform.spec.resource_grammar`; :func:`parse_worker` turns a
spec's per-worker strings into a request.

This module is part of the pure core: it imports neither Ray nor Kubernetes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

from cuberay.errors import SpecError
from cuberay.platform.spec.resource_grammar import (
    CPU,
    GPU,
    GPU_VENDORS,
    MEMORY,
    RDMA,
    RDMA_FABRICS,
    AmountError,
    checked_amount,
    format_memory,
    parse_cpu,
    parse_gpu,
    parse_memory,
    parse_rdma,
)

# Kubernetes extended-resource names per Ray accelerator resource.
K8S_ACCELERATOR_NAMES: dict[str, str] = {
    GPU: "nvidia.com/gpu",
    "NPU": "huawei.com/Ascend910",
    "HPU": "habana.ai/gaudi",
    "TPU": "google.com/tpu",
    "neuron_cores": "aws.amazon.com/neuroncore",
}

# Accelerator resources that live on physical cards and so are tracked per card. A tuple in a fixed order
# (not a set) so that every choice made by scanning it is the same in every process: a node offering two
# kinds tracks the first one listed here per card (GPU before NPU, HPU, TPU, neuron_cores).
CARD_RESOURCES: tuple[str, ...] = tuple(dict.fromkeys(GPU_VENDORS.values()))

# Node labels that carry the constraints (Ray sets ray.io/accelerator-type itself).
LABEL_ACCELERATOR = "ray.io/accelerator-type"
LABEL_RDMA = "cuberay.io/rdma"
LABEL_POOL = "cuberay.io/pool"


class Resources(Mapping[str, float]):
    """An immutable resource vector keyed by Ray resource names.

    Supports ``+``, ``-``, ``* scalar``, ``<=`` (fits in), and drops zero entries,
    so ``Resources()`` is the zero vector. Memory is in bytes.
    """

    __slots__ = ("_amounts", "_hash")

    def __init__(self, amounts: Mapping[str, float] | None = None, **kwargs: float) -> None:
        merged = dict(amounts or {})
        merged.update(kwargs)
        # Rounded to 1e-9 so that float noise cannot break equality or hashing: (a + b) - b == a.
        self._amounts = {k: r for k, v in merged.items() if (r := round(float(v), 9)) != 0}
        self._hash: int | None = None

    def __getitem__(self, key: str) -> float:
        return self._amounts.get(key, 0.0)

    def __iter__(self) -> Iterator[str]:
        return iter(self._amounts)

    def __len__(self) -> int:
        return len(self._amounts)

    def __contains__(self, key: object) -> bool:
        return key in self._amounts

    def get(self, key: str, default: float = 0.0) -> float:  # type: ignore[override]
        return self._amounts.get(key, default)

    # Plain dict views: the scheduler iterates vectors in its hot loop.
    def items(self):  # type: ignore[override]
        return self._amounts.items()

    def keys(self):  # type: ignore[override]
        return self._amounts.keys()

    def values(self):  # type: ignore[override]
        return self._amounts.values()

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._amounts.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._amounts == other._amounts
        if isinstance(other, Mapping):
            return self._amounts == Resources(other)._amounts
        return NotImplemented

    def __add__(self, other: Mapping[str, float]) -> "Resources":
        out = dict(self._amounts)
        for k, v in other.items():
            out[k] = out.get(k, 0.0) + v
        return Resources(out)

    def __sub__(self, other: Mapping[str, float]) -> "Resources":
        out = dict(self._amounts)
        for k, v in other.items():
            out[k] = out.get(k, 0.0) - v
        return Resources(out)

    def __mul__(self, factor: float) -> "Resources":
        return Resources({k: v * factor for k, v in self._amounts.items()})

    __rmul__ = __mul__

    def __le__(self, other: Mapping[str, float]) -> bool:
        """True when every amount here fits in ``other`` (small float slack allowed)."""
        return all(v <= other.get(k, 0.0) + 1e-9 for k, v in self._amounts.items())

    def exceeding(self, other: Mapping[str, float]) -> dict[str, tuple[float, float]]:
        """The resources where this vector is larger than ``other``: name -> (this, other)."""
        return {k: (v, other.get(k, 0.0)) for k, v in self._amounts.items() if v > other.get(k, 0.0) + 1e-9}

    def clamp_min_zero(self) -> "Resources":
        return Resources({k: v for k, v in self._amounts.items() if v > 0})

    def as_dict(self) -> dict[str, float]:
        return dict(self._amounts)

    def __repr__(self) -> str:
        return f"Resources({format_resources(self)})"

    @classmethod
    def parse(cls, cpu: str | float | None = None, memory: str | float | None = None,
              gpu: str | float | None = None, rdma: str | float | None = None,
              custom: Mapping[str, float] | None = None) -> "Resources":
        """Build a vector from the user-facing strings (constraints are dropped)."""
        return parse_worker(cpu=cpu, memory=memory, gpu=gpu, rdma=rdma, custom=custom).resources


def format_resources(res: Mapping[str, float]) -> str:
    """Human form, e.g. ``CPU=2, memory=32Gi, GPU=4``."""
    parts = []
    for k, v in res.items():
        parts.append(f"{k}={format_memory(v)}" if k == MEMORY else f"{k}={format_amount(v)}")
    return ", ".join(parts) or "nothing"


def format_amount(v: float) -> str:
    """``4`` for a whole amount, ``0.5`` or ``1e-05`` otherwise (no trailing ``.0``)."""
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


@dataclass(frozen=True, slots=True)
class WorkerRequest:
    """What one worker (one placement-group bundle) needs from one node.

    ``resources`` holds the amounts; ``accelerator``, ``rdma_fabric`` and
    ``labels`` are constraints a node must satisfy.
    """

    resources: Resources = field(default_factory=Resources)
    accelerator: str | None = None
    rdma_fabric: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def card_resource(self) -> str | None:
        """The per-card accelerator resource this worker uses, if any."""
        for name in CARD_RESOURCES:
            if self.resources.get(name, 0.0) > 0:
                return name
        return None

    def node_selector(self) -> dict[str, str]:
        """Node labels this worker requires (accelerator type, rdma fabric, pool...)."""
        selector = dict(self.labels)
        if self.accelerator:
            selector[LABEL_ACCELERATOR] = self.accelerator
        if self.rdma_fabric:
            selector[LABEL_RDMA] = self.rdma_fabric
        return selector

    def to_ray(self) -> dict[str, float]:
        """Ray resource dict for a task, actor or placement-group bundle."""
        out = self.resources.as_dict()
        if self.accelerator:
            # Ray's own convention for accelerator_type= on tasks and actors.
            out[f"accelerator_type:{self.accelerator}"] = 0.001
        return out

    def to_k8s(self) -> dict[str, str]:
        """Kubernetes container resource quantities (requests = limits)."""
        out: dict[str, str] = {}
        for name, amount in self.resources.items():
            if name == CPU:
                out["cpu"] = f"{int(round(amount * 1000))}m" if not float(amount).is_integer() else format_amount(amount)
            elif name == MEMORY:
                # format_memory rounds odd sizes (1.1G -> "1.0Gi"); Kubernetes must get at least what was asked.
                text = format_memory(amount)
                out["memory"] = text if parse_memory(text) == int(amount) else str(int(amount))
            elif name in K8S_ACCELERATOR_NAMES:
                out[K8S_ACCELERATOR_NAMES[name]] = format_amount(math.ceil(amount))
            elif name == RDMA:
                out[RDMA_FABRICS.get(self.rdma_fabric or "rdma", "rdma/hca")] = format_amount(amount)
            else:
                out[name] = format_amount(amount)
        return out


def parse_worker(cpu: str | float | None = None, memory: str | float | None = None,
                 gpu: str | float | None = None, rdma: str | float | None = None,
                 custom: Mapping[str, float] | None = None,
                 labels: Mapping[str, str] | None = None) -> WorkerRequest:
    """Parse the per-worker strings of a spec into a :class:`WorkerRequest`."""
    amounts: dict[str, float] = {}
    accelerator = fabric = None
    if cpu is not None:
        amounts[CPU] = parse_cpu(cpu)
    if memory is not None:
        amounts[MEMORY] = float(parse_memory(memory))
    if gpu is not None:
        g = parse_gpu(gpu)
        if g.count:
            amounts[g.resource] = g.count
            accelerator = g.model
    if rdma is not None:
        count, fabric = parse_rdma(rdma)
        if count:
            amounts[RDMA] = count
        else:
            fabric = None
    for name, amount in (custom or {}).items():
        if name in (CPU, MEMORY, GPU, RDMA) or name.lower() in ("cpu", "memory", "gpu", "rdma"):
            raise SpecError(f"custom resource {name!r} shadows a built-in; set it with the {name.lower()} field")
        amounts[name] = checked_amount(float(amount), f"custom resource {name}", amount)
    kinds = [name for name in CARD_RESOURCES if amounts.get(name, 0.0) > 0]
    if len(kinds) > 1:
        raise AmountError(f"the worker asks for {' and '.join(kinds)}: one accelerator kind per worker, since a "
                        f"worker runs on one node and uses cards of one kind; run each kind as separate jobs "
                        f"(or one job whose workers all use the same kind)")
    return WorkerRequest(Resources(amounts), accelerator, fabric, tuple(sorted((labels or {}).items())))


def total(requests: Iterable[Mapping[str, float]]) -> Resources:
    """Sum of many vectors."""
    out: dict[str, float] = {}
    for req in requests:
        for k, v in req.items():
            out[k] = out.get(k, 0.0) + v
    return Resources(out)
