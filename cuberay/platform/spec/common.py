"""Building blocks of every spec model: the base class, field types, resource amounts, placement kinds.

Every model is a frozen pydantic v2 model with ``extra="forbid"``, strict
types (``workers: "2"`` and ``cpu: true`` are errors, not guesses) and a
description on every field, so the JSON Schema doubles as the reference.
Resource strings keep the text the user wrote; they are checked against the
grammar of :mod:`cuberay.platform.spec.resource_grammar` at validation time and
turned into vectors by methods (``worker_request()``, ``max_resources()``).
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Annotated, Literal, Mapping, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

import cuberay.platform.spec.resources as res
from cuberay.platform.spec.load import (
    FieldError,
    amount_text,
    dns_label,
    duration,
    grammar,
    import_path,
    label_map,
    mount,
)
from cuberay.platform.spec.resource_grammar import parse_cpu, parse_gpu, parse_memory, parse_rdma
from cuberay.platform.spec.resources import Resources, WorkerRequest

API_VERSION = "cuberay.io/v1alpha1"
# The apiVersion field of every document: jobs, pipelines and the platform file.
ApiVersion = Annotated[Literal["cuberay.io/v1alpha1"],
                       Field(alias="apiVersion", description="Schema version; cuberay.io/v1alpha1.")]

# ---------------------------------------------------------------- field types

Name = Annotated[str, AfterValidator(dns_label)]
Labels = Annotated[dict[str, str], AfterValidator(label_map)]
ImportPath = Annotated[str, AfterValidator(import_path)]
Mount = Annotated[str, AfterValidator(mount)]
Amount = Union[str, int, float]
# A time limit as written: seconds or "90m", "2h", "1d", "1h30m" (checked here, read with parse_duration).
Duration = Annotated[Union[float, str], AfterValidator(duration)]
OptionalDuration = Annotated[Union[float, str, None], AfterValidator(duration)]


class SpecModel(BaseModel):
    """Base of every spec model: frozen, unknown keys refused, no type guessing."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, serialize_by_alias=True,
                              validate_by_alias=True, validate_by_name=False,
                              # Validators are built on first use, not at import: a CLI command that never
                              # reads a spec (status, queue) does not pay for every model's.
                              defer_build=True)


class Placement(str, Enum):
    """How a gang's workers are laid out on nodes (policy in :mod:`cuberay.platform.policy.placement`)."""

    PACK = "pack"
    SPREAD = "spread"
    STRICT_PACK = "strict_pack"
    STRICT_SPREAD = "strict_spread"
    FRAG = "frag"
    BEST_FIT = "best_fit"
    RANDOM = "random"
    AUTO = "auto"

    def resolve(self, req: WorkerRequest) -> "Placement":
        """``auto`` becomes frag for accelerator jobs and spread for CPU-only jobs."""
        if self is not Placement.AUTO:
            return self
        return Placement.FRAG if req.card_resource else Placement.SPREAD


# ---------------------------------------------------------------- resources

class _Amounts(SpecModel):
    """Grammar checks shared by worker, node and quota resources (fields are declared by subclasses)."""

    @field_validator("cpu", check_fields=False)
    @classmethod
    def _cpu(cls, v: Amount | None) -> Amount | None:
        if v is not None:
            grammar(parse_cpu, v)
        return v

    @field_validator("memory", check_fields=False)
    @classmethod
    def _memory(cls, v: Amount | None) -> Amount | None:
        if v is not None and grammar(parse_memory, v) < 1:
            raise ValueError(f"memory {v!r} is less than one byte; give an amount like '2Gi' or leave it out")
        return v

    @field_validator("gpu", check_fields=False)
    @classmethod
    def _gpu(cls, v: Amount | None) -> Amount | None:
        if v is not None:
            grammar(parse_gpu, v)
        return v

    @field_validator("rdma", check_fields=False)
    @classmethod
    def _rdma(cls, v: Amount | None) -> Amount | None:
        if v is not None:
            grammar(parse_rdma, v)
        return v

    @field_validator("custom", check_fields=False)
    @classmethod
    def _custom(cls, v: dict[str, float]) -> dict[str, float]:
        for name, amount in v.items():
            if name.lower() in ("cpu", "memory", "gpu", "rdma") or name.startswith("accelerator_type:"):
                raise FieldError([name], f"custom resource {name!r} is built in; set it with its own field "
                                         f"(cpu, memory, gpu: '1(A100)', rdma)")
            if not math.isfinite(amount) or amount <= 0:
                raise FieldError([name], f"custom resource {name!r} is {amount}; it must be > 0 (or leave it out)")
        return v

    def _request(self, labels: Mapping[str, str] | None = None) -> WorkerRequest:
        fields = self.model_dump()
        return res.parse_worker(cpu=fields.get("cpu"), memory=fields.get("memory"), gpu=fields.get("gpu"),
                                rdma=fields.get("rdma"), custom=fields.get("custom"), labels=labels)


class WorkerResources(_Amounts):
    """What ONE worker needs, in CubeStudio's grammar."""

    cpu: Amount = Field("1", description='CPU cores per worker: "2", "0.5" or "500m". "0" only with a gpu or custom.')
    memory: Amount | None = Field(None, description='Memory per worker: "4Gi", "512Mi", "1G"; null reserves none.')
    gpu: Amount = Field("0", description='GPUs per worker: "1", "0.5" (a share of one card), "1(V100)" (a model), '
                                         '"1(npu,910B)" (vendor and model); "0" means none.')
    rdma: Amount | None = Field(None, description='RDMA devices per worker: "1", "1(roce)", "2(ib)"; null for none.')
    custom: dict[str, float] = Field(default_factory=dict,
                                     description="Other Ray resources per worker, name -> amount.")

    @model_validator(mode="after")
    def _not_empty(self) -> WorkerResources:
        if not self._request().resources:
            raise FieldError(["cpu"], 'the worker asks for nothing and Ray cannot reserve an empty bundle; '
                                      'set cpu (e.g. "1"), gpu or a custom resource')
        return self


class NodeResources(_Amounts):
    """What ONE node of a pool offers."""

    cpu: Amount = Field(description='CPU cores per node, e.g. "32".')
    memory: Amount = Field(description='Memory per node, e.g. "256Gi".')
    gpu: Amount = Field("0", description='GPUs per node with the card model, e.g. "8(A100)"; "0" for none.')
    rdma: Amount | None = Field(None, description='RDMA devices per node with the fabric, e.g. "1(roce)".')
    custom: dict[str, float] = Field(default_factory=dict, description="Other Ray resources per node.")


_QUOTA_FIELDS = ("cpu", "memory", "gpu", "rdma")


class QuotaResources(_Amounts):
    """A quota: totals over all of a tenant's running workers. Zero is allowed (none of it)."""

    cpu: Amount | None = Field(None, description='CPU cores, e.g. "16".')
    memory: Amount | None = Field(None, description='Memory, e.g. "64Gi".')
    gpu: Amount | None = Field(None, description='GPU count, e.g. "8", or with a vendor, "8(npu)"; no card model.')
    rdma: Amount | None = Field(None, description='RDMA device count, e.g. "4"; no fabric.')
    custom: dict[str, float] = Field(default_factory=dict, description="Other Ray resources, name -> amount.")

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: Amount | None) -> Amount | None:
        if v is not None and grammar(parse_gpu, v).model:
            raise ValueError(f"gpu {v!r}: quotas count cards, not models; write a count such as '8' "
                             f"(or a vendor, '8(npu)')")
        return v

    @field_validator("rdma")
    @classmethod
    def _rdma(cls, v: Amount | None) -> Amount | None:
        if v is not None and grammar(parse_rdma, v)[1]:
            raise ValueError(f"rdma {v!r}: quotas count devices, not fabrics; write a count such as '4'")
        return v

    def by_field(self) -> dict[str, Resources]:
        """Each field that is set, as its own vector: ``{"cpu": Resources(CPU=4), "custom.TPU": ...}``."""
        out = {f: Resources.parse(**{f: getattr(self, f)}) for f in _QUOTA_FIELDS if getattr(self, f) is not None}
        out.update({f"custom.{k}": Resources({k: v}) for k, v in self.custom.items()})
        return out

    def resources(self) -> Resources:
        return res.total(self.by_field().values())


def amounts_text(vector: Resources) -> str:
    return ", ".join(amount_text(k, v) for k, v in vector.items()) or "0"
