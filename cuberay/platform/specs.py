"""The one spec model: Platform, Tenant and the job kinds TrainJob, TuneJob, ServeApp, Task.

Every model is a frozen pydantic v2 model with ``extra="forbid"``, strict
types (``workers: "2"`` and ``cpu: true`` are errors, not guesses) and a
description on every field, so the JSON Schema doubles as the reference.
Resource strings keep the text the user wrote; they are checked against the
grammar of :mod:`cuberay.platform.resources` at validation time and turned
into vectors by methods (``worker_request()``, ``max_resources()``).

Files look like Kubernetes objects::

    apiVersion: cuberay.io/v1alpha1
    kind: TrainJob            # TrainJob | TuneJob | ServeApp | Task | Platform
    metadata: {name: mnist-ddp, tenant: vision}
    spec: {workers: 2, resources: {cpu: "1", memory: 2Gi}, entrypoint: "pkg.mod:train_func"}
"""

from __future__ import annotations

import difflib
from dataclasses import replace
import math
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter,
                      ValidationError, field_validator, model_validator)

from cuberay.errors import AdmissionError, SpecError
from cuberay.platform import resources as res
from cuberay.platform.ledger import Ledger
from cuberay.platform.placement import Placement
from cuberay.platform.resources import Resources, WorkerRequest
from cuberay.platform.scheduling import Policy, TenantQuota, policy_named
from cuberay.platform.spec_load import (Document, FieldError, amount_text, capacity_problem, dns_label, env_name,
                                        field_names, grammar, import_path, label_map, mount, one_document, over_text,
                                        parse_duration, pool_ledger, quota_problem, read_documents, require_mapping,
                                        spec_error)

API_VERSION = "cuberay.io/v1alpha1"
WILDCARD_MEMBER = "*"


# ---------------------------------------------------------------- field types

Name = Annotated[str, AfterValidator(dns_label)]
Labels = Annotated[dict[str, str], AfterValidator(label_map)]
ImportPath = Annotated[str, AfterValidator(import_path)]
Mount = Annotated[str, AfterValidator(mount)]
Amount = Union[str, int, float]


class SpecModel(BaseModel):
    """Base of every spec model: frozen, unknown keys refused, no type guessing."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, serialize_by_alias=True,
                              validate_by_alias=True, validate_by_name=False)


# ---------------------------------------------------------------- resources

class _Amounts(SpecModel):
    """Grammar checks shared by worker, node and quota resources (fields are declared by subclasses)."""

    @field_validator("cpu", check_fields=False)
    @classmethod
    def _cpu(cls, v: Amount | None) -> Amount | None:
        if v is not None:
            grammar(res.parse_cpu, v)
        return v

    @field_validator("memory", check_fields=False)
    @classmethod
    def _memory(cls, v: Amount | None) -> Amount | None:
        if v is not None and grammar(res.parse_memory, v) < 1:
            raise ValueError(f"memory {v!r} is less than one byte; give an amount like '2Gi' or leave it out")
        return v

    @field_validator("gpu", check_fields=False)
    @classmethod
    def _gpu(cls, v: Amount | None) -> Amount | None:
        if v is not None:
            grammar(res.parse_gpu, v)
        return v

    @field_validator("rdma", check_fields=False)
    @classmethod
    def _rdma(cls, v: Amount | None) -> Amount | None:
        if v is not None:
            grammar(res.parse_rdma, v)
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
        if v is not None and grammar(res.parse_gpu, v).model:
            raise ValueError(f"gpu {v!r}: quotas count cards, not models; write a count such as '8' "
                             f"(or a vendor, '8(npu)')")
        return v

    @field_validator("rdma")
    @classmethod
    def _rdma(cls, v: Amount | None) -> Amount | None:
        if v is not None and grammar(res.parse_rdma, v)[1]:
            raise ValueError(f"rdma {v!r}: quotas count devices, not fabrics; write a count such as '4'")
        return v

    def by_field(self) -> dict[str, Resources]:
        """Each field that is set, as its own vector: ``{"cpu": Resources(CPU=4), "custom.TPU": ...}``."""
        out = {f: Resources.parse(**{f: getattr(self, f)}) for f in _QUOTA_FIELDS if getattr(self, f) is not None}
        out.update({f"custom.{k}": Resources({k: v}) for k, v in self.custom.items()})
        return out

    def resources(self) -> Resources:
        return res.total(self.by_field().values())


def _amounts(vector: Resources) -> str:
    return ", ".join(amount_text(k, v) for k, v in vector.items()) or "0"


class Quota(SpecModel):
    """A tenant's share: ``guaranteed`` (Kueue's nominal quota) and ``max`` (nominal + borrowing)."""

    guaranteed: QuotaResources = Field(default_factory=QuotaResources,
                                       description="Resources the tenant can always get back (by reclaiming them "
                                                   "from borrowers). Unlisted resources: 0.")
    max: QuotaResources | None = Field(None, description="The most the tenant may use, borrowing idle capacity. "
                                                         "null = unlimited; a resource not listed here is capped "
                                                         "at its guaranteed amount.")

    @model_validator(mode="after")
    def _max_covers_guaranteed(self) -> Quota:
        if self.max is None:
            return self
        guaranteed, limit = self.guaranteed.by_field(), self.max.by_field()
        for field, vector in guaranteed.items():
            if field in limit and not vector <= limit[field]:
                raise FieldError(["max", *field.split(".")],
                                 f"max {field} {_amounts(limit[field])} is below guaranteed {_amounts(vector)}; "
                                 f"raise max or lower guaranteed")
        return self

    def guaranteed_resources(self) -> Resources:
        return self.guaranteed.resources()

    def max_resources(self) -> Resources | None:
        """The cap as a vector (unlisted resources capped at guaranteed), or None for unlimited."""
        if self.max is None:
            return None
        return res.total({**self.guaranteed.by_field(), **self.max.by_field()}.values())


# ---------------------------------------------------------------- platform

class Tenant(SpecModel):
    """A team sharing the platform (CubeStudio's project group, Kueue's ClusterQueue)."""

    name: Name = Field(description="Tenant name, a DNS-1123 label; also its Kubernetes namespace.")
    members: list[str] = Field(default_factory=list, description='Login names that may submit here; "*" lets '
                                                                 'everyone in. Admins are members too.')
    admins: list[str] = Field(default_factory=list, description="Login names that may manage the tenant's jobs.")
    quota: Quota = Field(default_factory=Quota, description="Guaranteed and max resources.")
    priority: int = Field(0, description="Default priority of the tenant's jobs (higher runs first).")
    storage: str | None = Field(None, description="Storage path; default <platform storage>/<tenant name>.")
    mounts: list[Mount] = Field(default_factory=list, description='CubeStudio-style mounts, kept verbatim: '
                                                                '"name(pvc):/mnt", "/data(hostpath):/data".')

    @field_validator("members", "admins")
    @classmethod
    def _logins(cls, v: list[str]) -> list[str]:
        for i, login in enumerate(v):
            if not login.strip() or login != login.strip():
                raise FieldError([i], f"login {login!r} is empty or padded with spaces; write the bare name")
        return v

    @field_validator("admins")
    @classmethod
    def _no_wildcard_admin(cls, v: list[str]) -> list[str]:
        if WILDCARD_MEMBER in v:
            raise FieldError([v.index(WILDCARD_MEMBER)], '"*" is only allowed in members; list admins by name')
        return v

    def is_member(self, user: str) -> bool:
        return user in self.members or user in self.admins or WILDCARD_MEMBER in self.members

    def is_admin(self, user: str) -> bool:
        return user in self.admins

    def guaranteed_resources(self) -> Resources:
        return self.quota.guaranteed_resources()

    def max_resources(self) -> Resources | None:
        return self.quota.max_resources()


class NodePool(SpecModel):
    """A group of identical nodes, for the simulator and for KubeRay worker groups."""

    name: Name = Field(description="Pool name; nodes get the label cuberay.io/pool=<name>.")
    labels: Labels = Field(default_factory=dict, description="Extra node labels of every node in the pool.")
    nodes: int = Field(ge=1, description="How many nodes the pool has.")
    resources: NodeResources = Field(description="What one node offers.")

    def node_resources(self) -> Resources:
        return self.resources._request().resources

    def node_labels(self) -> dict[str, str]:
        """Labels of each node: the pool's, the pool name, the card model and the RDMA fabric."""
        offer = self.resources._request()
        return {**self.labels, res.LABEL_POOL: self.name, **offer.node_selector()}


class SchedulerSettings(SpecModel):
    """Knobs of the admission cycle."""

    backfill: bool = Field(True, description="EASY backfill: small jobs may jump a blocked one without delaying it.")
    reclaim: bool = Field(True, description="A tenant under its guarantee takes capacity back from borrowers.")
    preemption: bool = Field(True, description="Higher-priority jobs may preempt lower ones of the same tenant.")
    las_threshold_gpu_hours: float | None = Field(1.0, gt=0, description="Least-attained-service: jobs that used "
                                                  "more GPU-hours than this drop behind newer ones and may be "
                                                  "preempted by them (Tiresias-style); null = off.")
    max_drivers: int = Field(16, ge=1, description="Most job drivers (Ray Jobs) running at once.")
    cycle_interval_s: float = Field(2.0, gt=0, description="Seconds between admission cycles.")


class PlatformSpec(SpecModel):
    """Tenants, node pools, storage and scheduler settings of one platform."""

    storage: str = Field("~/.cuberay", description="Directory for the database, logs and tenant storage.")
    database: str | None = Field(None, description="SQLAlchemy URL, e.g. postgresql://host/cuberay; null = "
                                                   "SQLite at <storage>/cuberay.db.")
    tenants: list[Tenant] = Field(min_length=1, description="The tenants; names are unique.")
    node_pools: list[NodePool] = Field(default_factory=list, description="Node pools for simulation and KubeRay; "
                                                                         "empty = use the nodes Ray has.")
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings, description="Admission settings.")

    @field_validator("database")
    @classmethod
    def _database(cls, v: str | None) -> str | None:
        if v is not None:
            from sqlalchemy.engine import make_url
            from sqlalchemy.exc import ArgumentError
            try:
                make_url(v)
            except ArgumentError:
                raise ValueError(f"{v!r} is not an SQLAlchemy URL; write e.g. "
                                 f"'postgresql://user@host/cuberay' or 'sqlite:////var/lib/cuberay.db'") from None
        return v

    @field_validator("tenants", "node_pools")
    @classmethod
    def _unique_names(cls, v: list[Any]) -> list[Any]:
        first: dict[str, int] = {}
        for i, item in enumerate(v):
            if item.name in first:
                raise FieldError([i, "name"], f"name {item.name!r} is used at [{first[item.name]}] and [{i}]; "
                                              f"names must be unique, rename one")
            first[item.name] = i
        return v

    @model_validator(mode="after")
    def _fill_storage_and_check_guarantees(self) -> PlatformSpec:
        if self.node_pools:
            promised = res.total(t.guaranteed_resources() for t in self.tenants)
            if over := promised.exceeding(self.capacity()):
                raise FieldError(["tenants"], f"the guaranteed quotas add up to more than the node pools hold "
                                              f"({over_text(over)}); lower the guarantees or add nodes")
        tenants = [t if t.storage else t.model_copy(update={"storage": f"{self.storage.rstrip('/')}/{t.name}"})
                   for t in self.tenants]
        return self.model_copy(update={"tenants": tenants})

    def capacity(self) -> Resources:
        """Total of the node pools (the zero vector when none are declared)."""
        return res.total(p.node_resources() * p.nodes for p in self.node_pools)


class PlatformMeta(SpecModel):
    """Name and labels of a platform."""

    name: Name = Field("local", description="Platform name.")
    labels: Labels = Field(default_factory=dict, description="Free-form labels.")


class Platform(SpecModel):
    """The admin's file: tenants, quotas, node pools (``configs/platform.yaml``)."""

    api_version: Literal["cuberay.io/v1alpha1"] = Field(API_VERSION, alias="apiVersion",
                                                        description="Schema version; cuberay.io/v1alpha1.")
    kind: Literal["Platform"] = Field("Platform", description="Always Platform.")
    metadata: PlatformMeta = Field(default_factory=PlatformMeta, description="Name and labels.")
    spec: PlatformSpec = Field(description="Tenants, node pools, storage, scheduler settings.")

    @property
    def tenants(self) -> list[Tenant]:
        return self.spec.tenants

    def tenant(self, name: str) -> Tenant:
        """The tenant called ``name``; SpecError listing the known ones if there is none."""
        for tenant in self.spec.tenants:
            if tenant.name == name:
                return tenant
        known = ", ".join(t.name for t in self.spec.tenants)
        raise SpecError(f"unknown tenant {name!r}; known tenants: {known}", path="metadata.tenant")

    def tenants_of(self, user: str) -> list[str]:
        """Names of the tenants ``user`` may submit to (named memberships first, then wildcard ones)."""
        named = [t.name for t in self.spec.tenants if user in t.members or user in t.admins]
        return named + [t.name for t in self.spec.tenants if t.is_member(user) and t.name not in named]

    def resolve_tenant(self, user: str, requested: str | None = None) -> Tenant:
        """The tenant a job of ``user`` runs in: ``requested`` (checked), else the user's only tenant.

        Raises:
            SpecError: unknown tenant, or no/several candidate tenants (the fix names --tenant).
            AdmissionError: ``user`` is not a member of ``requested``.
        """
        if requested is not None:
            tenant = self.tenant(requested)
            if not tenant.is_member(user):
                raise AdmissionError(f"user {user!r} is not a member of tenant {requested!r}; pick one of "
                                     f"{self.tenants_of(user) or 'no tenant'} or ask an admin "
                                     f"({', '.join(tenant.admins) or 'none listed'}) to add you")
            return tenant
        named = [t for t in self.spec.tenants if user in t.members or user in t.admins]
        candidates = named or [t for t in self.spec.tenants if t.is_member(user)]
        if len(candidates) == 1:
            return candidates[0]
        choice = ", ".join(t.name for t in candidates)
        why = f"user {user!r} is in several tenants ({choice})" if candidates else \
            f"user {user!r} is in no tenant (tenants: {', '.join(t.name for t in self.spec.tenants)})"
        raise SpecError(f"{why}; set metadata.tenant or pass --tenant", path="metadata.tenant")

    def storage_path(self) -> Path:
        return Path(self.spec.storage).expanduser()

    def database_url(self) -> str:
        return self.spec.database or f"sqlite:///{self.storage_path() / 'cuberay.db'}"

    def capacity(self) -> Resources:
        """Total of the node pools (the zero vector when none are declared)."""
        return self.spec.capacity()

    def ledger(self) -> Ledger:
        """An empty ledger of the node pools (nodes ``<pool>-<i>``), for the simulator and fit checks."""
        return pool_ledger(self.spec.node_pools)

    def quotas(self) -> dict[str, TenantQuota]:
        """Each tenant's guaranteed and max resources as the admission core sees them."""
        return {t.name: TenantQuota(t.name, t.guaranteed_resources(), t.max_resources()) for t in self.tenants}

    def policy(self) -> Policy:
        """The ``cuberay`` admission policy with this platform's scheduler settings applied."""
        s = self.spec.scheduler
        las = None if s.las_threshold_gpu_hours is None else s.las_threshold_gpu_hours * 3600.0
        return replace(policy_named("cuberay"), backfill=s.backfill, reclaim=s.reclaim, preempt=s.preemption,
                       las_threshold_gpu_s=las)

    def check_job(self, job: Job, *, file: str | None = None) -> Tenant:
        """Could ``job`` EVER run here? Its tenant exists, the gang fits the tenant's max and the pools.

        Raises:
            SpecError: no tenant set, or an unknown one (exit 2).
            AdmissionError: larger than the tenant's max quota or than the node pools (exit 3).
        """
        if job.tenant is None:
            raise SpecError("the job names no tenant; set metadata.tenant or pass --tenant",
                            file=file, path="metadata.tenant")
        try:
            tenant = self.tenant(job.tenant)
        except SpecError as exc:
            raise SpecError(exc.reason, file=file, path=exc.path) from None
        for problem in (quota_problem(job, tenant), capacity_problem(job, self.spec.node_pools)):
            if problem:
                raise AdmissionError(f"{file + ': ' if file else ''}{problem}")
        return tenant


# ---------------------------------------------------------------- jobs

class ObjectMeta(SpecModel):
    """Name, tenant and labels of a job."""

    name: Name = Field(description="Job name, a DNS-1123 label (at most 63 characters).")
    tenant: Name | None = Field(None, description="Tenant to run in; null = the CLI --tenant or the user's only one.")
    labels: Labels = Field(default_factory=dict, description="Free-form labels, shown in the Ray dashboard.")


class ElasticWorkers(SpecModel):
    """An elastic gang: it starts with ``min`` workers and may grow to ``max``."""

    min: int = Field(ge=1, description="Workers the job needs to start.")
    max: int = Field(ge=1, description="Workers the job can use at most.")

    @model_validator(mode="after")
    def _ordered(self) -> ElasticWorkers:
        if self.max < self.min:
            raise FieldError(["max"], f"max {self.max} is below min {self.min}; raise max or lower min")
        return self


def _workers_tag(value: Any) -> str:
    return "workers-range" if isinstance(value, (Mapping, ElasticWorkers)) else "workers-count"


Workers = Annotated[Union[Annotated[int, Field(ge=1), Tag("workers-count")],
                          Annotated[ElasticWorkers, Tag("workers-range")]], Discriminator(_workers_tag)]


class WorkloadSpec(SpecModel):
    """Fields every job kind has."""

    workers: Workers = Field(1, description="Gang size: a number >= 1, or {min, max} for an elastic gang. "
                                            "TuneJob: concurrent trial slots; ServeApp: replicas.")
    resources: WorkerResources = Field(default_factory=WorkerResources, description="Resources of EACH worker.")
    placement: Placement = Field(Placement.AUTO, strict=False, description="pack | spread | strict_pack | "
                                 "strict_spread | auto (GPU jobs pack, CPU jobs spread).")
    node_selector: Labels = Field(default_factory=dict, description="Node labels every worker's node must have, "
                                                                    "e.g. cuberay.io/pool: a100.")
    priority: int | None = Field(None, description="Priority (higher first); null = the tenant's default.")
    max_runtime: Union[float, str, None] = Field(None, description='Limit on run time: seconds, or "90m", "2h", '
                                                                   '"1d"; null = none.')
    max_failures: int = Field(0, ge=0, description="Restarts after a failure before the job is FAILED.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for every worker.")
    runtime_env: dict[str, Any] = Field(default_factory=dict, description="A Ray runtime_env, passed verbatim "
                                        "(working_dir, pip, env_vars, py_modules, ...).")

    @field_validator("max_runtime")
    @classmethod
    def _duration(cls, v: float | str | None) -> float | str | None:
        if v is not None:
            parse_duration(v)
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        if not isinstance(v, Mapping):
            return v
        for name in v:
            env_name(name)
        # Numbers are unambiguous text (OMP_NUM_THREADS: 4); booleans are not (True? true? 1?),
        # so they stay booleans and strict str refuses them with a hint to quote.
        return {k: str(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x for k, x in v.items()}

    @property
    def min_workers(self) -> int:
        return self.workers.min if isinstance(self.workers, ElasticWorkers) else self.workers

    @property
    def max_workers(self) -> int:
        return self.workers.max if isinstance(self.workers, ElasticWorkers) else self.workers


class TrainSpec(WorkloadSpec):
    """A distributed training gang: a Ray Train function, or a command on every worker."""

    entrypoint: ImportPath | None = Field(None, description='Function mode: "pkg.module:train_func", run by a Ray '
                                                            'Train TorchTrainer. Exactly one of entrypoint, command.')
    command: str | None = Field(None, description="Command mode: a shell command each worker runs with RANK, "
                                                  "WORLD_SIZE, MASTER_ADDR, MASTER_PORT, VC_* set.")
    config: dict[str, Any] = Field(default_factory=dict, description="Passed to train_func (function mode).")
    backend: Literal["torch", "deepspeed"] = Field("torch", description="torch (DDP) or deepspeed (function mode).")
    deepspeed: dict[str, Any] | None = Field(None, description="DeepSpeed config dict (backend: deepspeed).")

    @model_validator(mode="after")
    def _one_mode(self) -> TrainSpec:
        if (self.entrypoint is None) == (self.command is None):
            raise FieldError(["entrypoint"], "set exactly one of entrypoint ('pkg.module:train_func', function "
                                             "mode) and command ('python train.py', command mode)")
        if self.command is not None:
            for field, bad in (("config", bool(self.config)), ("backend", self.backend != "torch"),
                               ("deepspeed", self.deepspeed is not None)):
                if bad:
                    raise FieldError([field], f"{field} applies to function mode (entrypoint) only; in command "
                                              f"mode pass settings on the command line")
        if self.deepspeed is not None and self.backend != "deepspeed":
            raise FieldError(["backend"], "a deepspeed config is set but backend is torch; set backend: deepspeed")
        return self


class TaskSpec(WorkloadSpec):
    """A gang of workers each running one shell command (CubeStudio env names set)."""

    command: str = Field(min_length=1, description="Shell command each worker runs.")


_NNI_TYPES = ("choice", "randint", "uniform", "quniform", "loguniform", "qloguniform",
              "normal", "qnormal", "lognormal", "qlognormal")


class TuneSpec(WorkloadSpec):
    """Hyperparameter search with Ray Tune; each worker slot runs one trial at a time."""

    entrypoint: ImportPath = Field(description='The trainable, "pkg.module:function".')
    search_space: dict[str, Any] = Field(default_factory=dict, description='Parameters to search; NNI format '
                                         'accepted: {lr: {_type: loguniform, _value: [0.0001, 0.1]}}.')
    num_samples: int = Field(1, ge=1, description="Number of trials.")
    metric: str = Field(min_length=1, description="Metric the trainable reports, e.g. accuracy.")
    mode: Literal["max", "min"] = Field(description="Whether to maximise or minimise the metric.")
    max_concurrent_trials: int | None = Field(None, ge=1, description="Trials at once; null = one per worker.")

    @field_validator("search_space")
    @classmethod
    def _nni(cls, v: dict[str, Any]) -> dict[str, Any]:
        for name, dist in v.items():
            if isinstance(dist, Mapping) and "_type" in dist:
                if dist["_type"] not in _NNI_TYPES or not isinstance(dist.get("_value"), list):
                    raise FieldError([name], f"NNI parameter needs _type (one of {', '.join(_NNI_TYPES)}) and a "
                                             f"_value list, got {dict(dist)!r}")
        return v

    @model_validator(mode="after")
    def _trials_fit(self) -> TuneSpec:
        if self.max_concurrent_trials is not None and self.max_concurrent_trials > self.max_workers:
            raise FieldError(["max_concurrent_trials"], f"{self.max_concurrent_trials} trials at once need as many "
                                                        f"workers, but workers is {self.max_workers}; raise workers")
        return self


class ServeVersion(SpecModel):
    """One model version behind the app's route."""

    name: Name = Field(description="Version name, e.g. v2.")
    import_path: ImportPath = Field(description='The Serve application, "pkg.module:app".')
    weight: float = Field(1.0, ge=0, description="Share of traffic, relative to the other versions.")


class ServeSpec(WorkloadSpec):
    """An online service on Ray Serve; workers are replicas."""

    import_path: ImportPath | None = Field(None, description='The Serve application, "pkg.module:app" (one version).')
    route_prefix: str = Field("/", description='HTTP route, starting with "/".')
    versions: list[ServeVersion] = Field(default_factory=list, description="Several versions with traffic weights "
                                                                           "(instead of import_path).")

    @field_validator("route_prefix")
    @classmethod
    def _route(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"route_prefix {v!r} must start with '/', e.g. '/{v}'")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> ServeSpec:
        if (self.import_path is None) == (not self.versions):
            raise FieldError(["import_path"], "set exactly one of import_path (one version) and versions")
        seen: dict[str, int] = {}
        for i, version in enumerate(self.versions):
            if version.name in seen:
                raise FieldError(["versions", i, "name"], f"version {version.name!r} is listed at "
                                                          f"[{seen[version.name]}] and [{i}]; rename one")
            seen[version.name] = i
        if self.versions and not sum(v.weight for v in self.versions) > 0:
            raise FieldError(["versions"], "all weights are 0, so no version gets traffic; give one a weight > 0")
        return self


class _Job(SpecModel):
    """Header and accessors shared by the job kinds."""

    api_version: Literal["cuberay.io/v1alpha1"] = Field(API_VERSION, alias="apiVersion",
                                                        description="Schema version; cuberay.io/v1alpha1.")
    kind: str = Field(description="Job kind.")
    metadata: ObjectMeta = Field(description="Name, tenant and labels.")
    spec: WorkloadSpec = Field(description="What to run and with which resources.")

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def tenant(self) -> str | None:
        return self.metadata.tenant

    @property
    def min_workers(self) -> int:
        return self.spec.min_workers

    @property
    def max_workers(self) -> int:
        return self.spec.max_workers

    @property
    def max_runtime_s(self) -> float | None:
        return None if self.spec.max_runtime is None else parse_duration(self.spec.max_runtime)

    def worker_request(self) -> WorkerRequest:
        """What each worker needs from its node; node_selector becomes label constraints."""
        return self.spec.resources._request(labels=self.spec.node_selector)

    def effective_priority(self, tenant: Tenant | None) -> int:
        """The job's priority, or its tenant's default (0 without a tenant)."""
        if self.spec.priority is not None:
            return self.spec.priority
        return tenant.priority if tenant is not None else 0

    def with_tenant(self, tenant: str) -> Job:
        """A copy in ``tenant`` (validated)."""
        data = self.model_dump()
        data["metadata"]["tenant"] = tenant
        return load_spec(data)


class TrainJob(_Job):
    """Distributed training: Ray Train (function mode) or a command gang (command mode)."""

    kind: Literal["TrainJob"] = Field("TrainJob", description="TrainJob.")
    spec: TrainSpec = Field(description="Training gang.")


class TuneJob(_Job):
    """Hyperparameter search with Ray Tune."""

    kind: Literal["TuneJob"] = Field("TuneJob", description="TuneJob.")
    spec: TuneSpec = Field(description="Search.")


class ServeApp(_Job):
    """An online service on Ray Serve."""

    kind: Literal["ServeApp"] = Field("ServeApp", description="ServeApp.")
    spec: ServeSpec = Field(description="Service.")


class Task(_Job):
    """A gang running a shell command."""

    kind: Literal["Task"] = Field("Task", description="Task.")
    spec: TaskSpec = Field(description="Command gang.")


Job = Annotated[Union[TrainJob, TuneJob, ServeApp, Task], Field(discriminator="kind")]
JOB_KINDS: dict[str, type[_Job]] = {"TrainJob": TrainJob, "TuneJob": TuneJob, "ServeApp": ServeApp, "Task": Task}
_JOBS: TypeAdapter[Job] = TypeAdapter(Job)
_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


# ---------------------------------------------------------------- loading

def _job_from(doc: Document) -> Job:
    data = require_mapping(doc)
    kind = data.get("kind")
    if kind == "Platform":
        raise SpecError("this is a Platform file, not a job; pass it with --platform (or use load_platform)",
                        file=doc.file, path="kind")
    if not isinstance(kind, str) or kind not in JOB_KINDS:
        close = difflib.get_close_matches(str(kind), JOB_KINDS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(JOB_KINDS)}"
        what = "the document has no kind" if kind is None else f"kind {kind!r} is not a job kind"
        raise SpecError(f"{what}; {hint}", file=doc.file, path="kind")
    try:
        return _JOBS.validate_python(data)
    except ValidationError as exc:
        raise spec_error(exc, doc, vocabulary=field_names(SpecModel), strip_first=True) from None


def _platform_from(doc: Document) -> Platform:
    data = require_mapping(doc)
    if data.get("kind") != "Platform":
        raise SpecError(f"kind is {data.get('kind')!r}; a platform file has kind: Platform", file=doc.file,
                        path="kind")
    try:
        return Platform.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, doc, vocabulary=field_names(SpecModel)) from None


def load_spec(source: str | Path | Mapping[str, Any] | _Job) -> Job:
    """One job from a path, YAML text or a mapping (a Job passes through).

    Raises:
        SpecError: invalid YAML, unknown kind or field, a bad value (names file, field path, line and fix).
    """
    if isinstance(source, _Job):
        return source  # type: ignore[return-value]
    return _job_from(one_document(read_documents(source), "job"))


def load_specs(source: str | Path | Mapping[str, Any]) -> list[Job]:
    """Every job of a multi-document file (``---`` separated); names must be unique per tenant."""
    docs = load_documents(source)
    for i, doc in enumerate(docs):
        if isinstance(doc, Platform):
            raise SpecError(f"document {i + 1} is a Platform; keep jobs and the platform in separate files",
                            path="kind")
    return docs  # type: ignore[return-value]


def load_platform(source: str | Path | Mapping[str, Any]) -> Platform:
    """The platform file (tenants, quotas, node pools)."""
    return _platform_from(one_document(read_documents(source), "Platform"))


def load_documents(source: str | Path | Mapping[str, Any]) -> list[Job | Platform]:
    """Every document of a file, each a job or a Platform by its kind (for ``cuberay spec validate``).

    Names must be unique per tenant within the file.
    """
    docs = read_documents(source)
    out: list[Job | Platform] = []
    first: dict[tuple[str, str | None, str], int] = {}
    for i, doc in enumerate(docs):
        is_platform = isinstance(doc.data, Mapping) and doc.data.get("kind") == "Platform"
        obj = _platform_from(doc) if is_platform else _job_from(doc)
        key = ("Platform" if is_platform else "job", getattr(obj, "tenant", None), obj.metadata.name)
        if key in first:
            raise SpecError(f"name {key[2]!r} is used by documents {first[key] + 1} and {i + 1}; names must be "
                            f"unique per tenant, rename one", file=doc.file, path="metadata.name")
        first[key] = i
        out.append(obj)
    return out


def job_schema() -> dict[str, Any]:
    """JSON Schema of a job file (any kind), for editors (yaml-language-server)."""
    return {"$schema": _SCHEMA_DIALECT, "title": "cuberay job", **_JOBS.json_schema()}


def platform_schema() -> dict[str, Any]:
    """JSON Schema of the platform file."""
    return {"$schema": _SCHEMA_DIALECT, **Platform.model_json_schema()}
