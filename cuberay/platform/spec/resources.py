"""Resource grammar and arithmetic: the strings CubeStudio users type, as vectors.

Grammar (per worker):
  cpu     ``2``, ``0.5``, ``500m``
  memory  ``32Gi``, ``512Mi``, ``1G``, ``1024`` (bytes)
  gpu     ``2``, ``0.5``, ``2(V100)``, ``1(npu,910B)``, ``1(nvidia,A100)``
  rdma    ``1``, ``1(roce)``, ``2(ib)``
  custom  any other name with a number

Vectors use Ray's resource names (``CPU``, ``memory`` in bytes, ``GPU``, ``rdma``,
custom names), so a vector converts to Ray without renaming. The accelerator
type, GPU vendor and RDMA fabric are *constraints* on the node, kept beside the
vector in :class:`WorkerRequest`.

This module is part of the pure core: it imports neither Ray nor Kubernetes.
Kubernetes quantities are parsed here (a few lines) instead of importing
``kubernetes.utils`` so that the simulator stays light; a unit test checks the
two parsers agree.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal, DecimalException
from typing import Iterable, Iterator, Mapping

from cuberay.errors import SpecError

# Ray resource names. ``memory`` is in bytes, as in Ray.
CPU = "CPU"
MEMORY = "memory"
GPU = "GPU"
RDMA = "rdma"

# Words inside gpu brackets that name a vendor (and so a Ray resource), not a model.
# AMD and NVIDIA cards are both ``GPU`` in Ray; other accelerators have their own names.
GPU_VENDORS: dict[str, str] = {
    "gpu": GPU,
    "nvidia": GPU,
    "amd": GPU,
    "npu": "NPU",
    "ascend": "NPU",
    "hpu": "HPU",
    "gaudi": "HPU",
    "tpu": "TPU",
    "neuron": "neuron_cores",
}
# Kubernetes extended-resource names per Ray accelerator resource.
K8S_ACCELERATOR_NAMES: dict[str, str] = {
    GPU: "nvidia.com/gpu",
    "NPU": "huawei.com/Ascend910",
    "HPU": "habana.ai/gaudi",
    "TPU": "google.com/tpu",
    "neuron_cores": "aws.amazon.com/neuroncore",
}
# RDMA fabrics users write in brackets, and the device-plugin resource each maps to.
RDMA_FABRICS: dict[str, str] = {"ib": "rdma/hca", "roce": "rdma/shared", "rdma": "rdma/hca"}
# Accelerator resources that live on physical cards and so are tracked per card. A tuple in a fixed order
# (not a set) so that every choice made by scanning it is the same in every process: a node offering two
# kinds tracks the first one listed here per card (GPU before NPU, HPU, TPU, neuron_cores).
CARD_RESOURCES: tuple[str, ...] = tuple(dict.fromkeys(GPU_VENDORS.values()))

# Node labels that carry the constraints (Ray sets ray.io/accelerator-type itself).
LABEL_ACCELERATOR = "ray.io/accelerator-type"
LABEL_RDMA = "cuberay.io/rdma"
LABEL_POOL = "cuberay.io/pool"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "K": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
            "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18)}
# The most one amount may be: per worker, per node or a tenant's quota over a whole cluster. Each is far
# above any real cluster (so a larger number is a typo) and keeps float arithmetic exact for whole amounts
# (below 2**53), which the ledger's sums and comparisons rely on.
MAX_CPU = 1_000_000              # cores
MAX_CARDS = 100_000              # GPUs or other accelerator cards
MAX_MEMORY = 2**60               # bytes (1Ei)
MAX_RDMA = 100_000               # devices
MAX_CUSTOM = 10**15              # any other resource
_LIMIT_TEXT = {"cpu": "1,000,000 cores", "gpu": "100,000 cards", "memory": "1Ei", "rdma": "100,000 devices"}

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]{0,2})$")
_BRACKETED = re.compile(r"^\s*([^()（）\s]+)\s*(?:[(（]\s*([^()（）]*?)\s*[)）])?\s*$")


def parse_quantity(value: str | int | float, *, what: str = "quantity") -> Decimal:
    """Parse a Kubernetes quantity (``500m``, ``32Gi``, ``1G``, ``1e3``) to a Decimal."""
    if isinstance(value, bool):
        raise SpecError(f"{what} must be a number or a quantity string, got {value!r}")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise SpecError(
            f"{what} {value!r} is not a quantity; write a number with an optional unit, "
            f"e.g. \"2\", \"500m\", \"32Gi\", \"512Mi\" or \"1G\""
        )
    number, unit = match.groups()
    try:
        amount = Decimal(number)
    except DecimalException:
        raise SpecError(f"{what} {_shown(value)} has a malformed number {_shown(number)}") from None
    try:
        if unit in _BINARY:
            return amount * _BINARY[unit]
        if unit in _DECIMAL:
            return amount * _DECIMAL[unit]
    except DecimalException:  # an exponent past Decimal's range
        raise AmountError(f"{what} {_shown(value)} is too large; write e.g. \"2\" or \"32Gi\"") from None
    raise SpecError(
        f"{what} {value!r} has unknown unit {unit!r}; use one of "
        f"{', '.join(list(_BINARY) + [u for u in _DECIMAL if u])}"
    )


class AmountError(SpecError, ValueError):
    """A resource amount or combination the grammar refuses.

    Also a ValueError, so that when a spec model's validator parses a worker,
    pydantic reports it at the field like any other value error.
    """


def _shown(raw: object) -> str:
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def _positive(amount: float, what: str, raw: object, *, allow_zero: bool = True, limit: float = MAX_CUSTOM) -> float:
    """``amount`` if it is finite, not negative (nor zero unless allowed) and at most ``limit``."""
    if math.isnan(amount):
        raise AmountError(f"{what} {_shown(raw)} is not a number; give an amount such as \"1\"")
    if amount < 0 or (amount == 0 and not allow_zero):
        rule = "must be > 0" if not allow_zero else "must be >= 0"
        raise AmountError(f"{what} {_shown(raw)} {rule}; give a positive amount such as \"1\"")
    if amount > limit:  # infinity too: a number past float's range (1e400) is a typo for something smaller
        most = _LIMIT_TEXT.get(what, f"{limit:,}")
        raise AmountError(f"{what} {_shown(raw)} is too large: an amount is at most {most}, more than any cluster "
                        f"has (and where whole amounts stay exact); check the value for a typo")
    return amount


def parse_cpu(value: str | int | float) -> float:
    """CPU cores: ``2``, ``0.5``, ``500m``. CubeStudio's ``4(AMD)`` keeps only the count."""
    text = str(value).strip()
    match = _BRACKETED.match(text) if isinstance(value, str) else None
    if match and match.group(2) is not None:
        text = match.group(1)
    return _positive(float(parse_quantity(text, what="cpu")), "cpu", value, limit=MAX_CPU)


def parse_memory(value: str | int | float) -> int:
    """Memory in bytes: ``32Gi``, ``512Mi``, ``1G``, or a plain byte count."""
    amount = parse_quantity(value, what="memory")
    _positive(float(amount), "memory", value, limit=MAX_MEMORY)  # a Decimal past float's range becomes inf
    return int(amount)  # from the Decimal: a float detour loses whole bytes above ~2**50


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """A parsed gpu string: count, Ray resource name and the accelerator model, if any."""

    count: float
    resource: str = GPU
    model: str | None = None


def parse_gpu(value: str | int | float) -> GpuRequest:
    """Parse ``2``, ``0.5``, ``2(V100)``, ``1(npu,910B)`` (Chinese brackets work too).

    A fractional count must be below 1 (a share of one card); counts of 1 or more
    must be whole, because Ray gives whole cards to such requests.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        count_text, inside = str(value), None
    else:
        match = _BRACKETED.match(str(value))
        if not match:
            raise SpecError(_gpu_hint(value))
        count_text, inside = match.groups()
    try:
        count = float(count_text)
    except ValueError:
        raise SpecError(_gpu_hint(value)) from None
    _positive(count, "gpu", value, limit=MAX_CARDS)
    if count > 1 and not count.is_integer():
        raise SpecError(
            f"gpu {value!r}: a count above 1 must be whole ({count} is not); "
            f"ask for {math.ceil(count)} or for a fraction below 1 of one card"
        )
    resource, model = GPU, None
    if inside:
        words = [w.strip() for w in re.split(r"[,，]", inside) if w.strip()]
        if len(words) > 2 or not words:
            raise SpecError(_gpu_hint(value))
        if words[0].lower() in GPU_VENDORS:
            resource = GPU_VENDORS[words[0].lower()]
            model = words[1] if len(words) == 2 else None
        elif len(words) == 1:
            model = words[0]
        else:
            raise SpecError(
                f"gpu {value!r}: unknown vendor {words[0]!r}; known vendors are "
                f"{', '.join(sorted(GPU_VENDORS))}"
            )
    return GpuRequest(count=count, resource=resource, model=model)


def _gpu_hint(value: object) -> str:
    return (f"gpu {value!r} is not a gpu request; write a count, a fraction below 1, or a "
            f"count with the card in brackets, e.g. \"2\", \"0.5\", \"2(V100)\", \"1(npu,910B)\"")


def parse_rdma(value: str | int | float) -> tuple[float, str | None]:
    """Parse ``1``, ``1(roce)``, ``2(ib)`` into (count, fabric)."""
    match = _BRACKETED.match(str(value))
    if not match:
        raise SpecError(f"rdma {value!r} is not an rdma request; write e.g. \"1\", \"1(roce)\" or \"2(ib)\"")
    count_text, fabric = match.groups()
    try:
        count = float(count_text)
    except ValueError:
        raise SpecError(f"rdma {value!r}: {count_text!r} is not a number; write e.g. \"1(roce)\"") from None
    _positive(count, "rdma", value, limit=MAX_RDMA)
    if fabric is not None:
        fabric = fabric.lower()
        if fabric not in RDMA_FABRICS:
            raise SpecError(f"rdma {value!r}: unknown fabric {fabric!r}; use one of {', '.join(RDMA_FABRICS)}")
    return count, fabric


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
        parts.append(f"{k}={format_memory(v)}" if k == MEMORY else f"{k}={_num(v)}")
    return ", ".join(parts) or "nothing"


def format_memory(num_bytes: float) -> str:
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if num_bytes >= size and (num_bytes / size).is_integer():
            return f"{int(num_bytes // size)}{unit}"
    if num_bytes >= 2**30:
        return f"{num_bytes / 2**30:.1f}Gi"
    return str(int(num_bytes))


def _num(v: float) -> str:
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
                out["cpu"] = f"{int(round(amount * 1000))}m" if not float(amount).is_integer() else _num(amount)
            elif name == MEMORY:
                # format_memory rounds odd sizes (1.1G -> "1.0Gi"); Kubernetes must get at least what was asked.
                text = format_memory(amount)
                out["memory"] = text if parse_memory(text) == int(amount) else str(int(amount))
            elif name in K8S_ACCELERATOR_NAMES:
                out[K8S_ACCELERATOR_NAMES[name]] = _num(math.ceil(amount))
            elif name == RDMA:
                out[RDMA_FABRICS.get(self.rdma_fabric or "rdma", "rdma/hca")] = _num(amount)
            else:
                out[name] = _num(amount)
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
        amounts[name] = _positive(float(amount), f"custom resource {name}", amount)
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
