"""The resource grammar: one amount as CubeStudio users type it, parsed and bounded.

Grammar (per worker):
  cpu     ``2``, ``0.5``, ``500m``
  memory  ``32Gi``, ``512Mi``, ``1G``, ``1024`` (bytes)
  gpu     ``2``, ``0.5``, ``2(V100)``, ``1(npu,910B)``, ``1(nvidia,A100)``
  rdma    ``1``, ``1(roce)``, ``2(ib)``
  custom  any other name with a number

The words become Ray's resource names (``CPU``, ``memory`` in bytes, ``GPU``,
``rdma``, custom names), defined here; the vectors they make are in
:mod:`cuberay.platform.spec.resources`. The accelerator type, GPU vendor and
RDMA fabric are *constraints* on the node, returned beside the count.

Kubernetes quantities are parsed here (a few lines) instead of importing
``kubernetes.utils`` so that the simulator stays light; a unit test checks the
two parsers agree.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, DecimalException

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
# RDMA fabrics users write in brackets, and the device-plugin resource each maps to.
RDMA_FABRICS: dict[str, str] = {"ib": "rdma/hca", "roce": "rdma/shared", "rdma": "rdma/hca"}

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


def checked_amount(amount: float, what: str, raw: object, *, allow_zero: bool = True,
                   limit: float = MAX_CUSTOM) -> float:
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
    return checked_amount(float(parse_quantity(text, what="cpu")), "cpu", value, limit=MAX_CPU)


def parse_memory(value: str | int | float) -> int:
    """Memory in bytes: ``32Gi``, ``512Mi``, ``1G``, or a plain byte count."""
    amount = parse_quantity(value, what="memory")
    checked_amount(float(amount), "memory", value, limit=MAX_MEMORY)  # a Decimal past float's range becomes inf
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
    checked_amount(count, "gpu", value, limit=MAX_CARDS)
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
    checked_amount(count, "rdma", value, limit=MAX_RDMA)
    if fabric is not None:
        fabric = fabric.lower()
        if fabric not in RDMA_FABRICS:
            raise SpecError(f"rdma {value!r}: unknown fabric {fabric!r}; use one of {', '.join(RDMA_FABRICS)}")
    return count, fabric


def format_memory(num_bytes: float) -> str:
    """A byte count as users write it: ``32Gi`` when whole in a unit, else tenths of a Gi, else bytes."""
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if num_bytes >= size and (num_bytes / size).is_integer():
            return f"{int(num_bytes // size)}{unit}"
    if num_bytes >= 2**30:
        return f"{num_bytes / 2**30:.1f}Gi"
    return str(int(num_bytes))
