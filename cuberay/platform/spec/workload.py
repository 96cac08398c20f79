"""What every job kind shares: metadata, the gang's size and resources, limits, env; the document header."""

from __future__ import annotations

from typing import Annotated, Any, Mapping, Union

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from cuberay.platform.spec.common import (
    API_VERSION,
    ApiVersion,
    Labels,
    Name,
    OptionalDuration,
    Placement,
    SpecModel,
    WorkerResources,
)
from cuberay.platform.spec.load import FieldError, env_name, parse_duration
from cuberay.platform.spec.platform_file import Tenant
from cuberay.platform.spec.resources import WorkerRequest
from cuberay.platform.spec.topology import TopologyRequest

# ---------------------------------------------------------------- jobs

class Claim(SpecModel):
    """Something only one active job may hold at a time (a Serve route, a Serve app name), checked at submit."""

    what: str = Field(description="What is claimed, as the user knows it, e.g. 'route_prefix'.")
    value: str = Field(description="The value claimed, e.g. '/digits'.")
    fix: str = Field(description="What the submitter can do when an active job already holds it.")


class ObjectMeta(SpecModel):
    """Name, tenant and labels of a job."""

    name: Name = Field(description="Job name, a DNS-1123 label (at most 63 characters).")
    tenant: Name | None = Field(None, description="Tenant to run in; null = the CLI --tenant or the user's only one.")
    labels: Labels = Field(default_factory=dict, description="Free-form labels, shown in the Ray dashboard.")


class DocumentHeader(SpecModel):
    """apiVersion, kind and metadata: the header every job and pipeline document starts with."""

    api_version: ApiVersion = API_VERSION
    kind: str = Field(description="The document's kind.")
    metadata: ObjectMeta = Field(description="Name, tenant and labels.")

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def tenant(self) -> str | None:
        return self.metadata.tenant


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


def bounds(workers: int | ElasticWorkers) -> tuple[int, int]:
    """The least and most workers (or replicas) of a ``Workers`` value; a plain count is both."""
    return (workers.min, workers.max) if isinstance(workers, ElasticWorkers) else (workers, workers)


class WorkloadSpec(SpecModel):
    """Fields every job kind has."""

    workers: Workers = Field(1, description="Gang size: a number >= 1, or {min, max} for an elastic gang. "
                                            "TuneJob: concurrent trial slots; ServeApp: replicas.")
    resources: WorkerResources = Field(default_factory=WorkerResources, description="Resources of EACH worker.")
    placement: Placement = Field(Placement.AUTO, strict=False, description="pack | spread | strict_pack | "
                                 "strict_spread | frag (least GPU fragmentation) | best_fit | random | auto "
                                 "(GPU jobs and one-worker CPU jobs frag, CPU-only gangs spread; CPU-only work "
                                 "keeps off GPU nodes while others fit).")
    node_selector: Labels = Field(default_factory=dict, description="Node labels every worker's node must have, "
                                                                    "e.g. cuberay.io/pool: a100.")
    topology: TopologyRequest | None = Field(None, description="How close the workers must or should be: "
                                             "{required: rack} (one rack, or wait) or {preferred: rack} (one rack "
                                             "if any fits, else as few as possible); levels are the platform's "
                                             "spec.topology and host. null = no constraint (RDMA jobs prefer one "
                                             "RDMA domain).")
    priority: int | None = Field(None, description="Priority (higher first); null = the tenant's default.")
    max_runtime: OptionalDuration = Field(None, description='Limit on run time: seconds, or "90m", "2h", '
                                                                   '"1d"; null = none.')
    max_failures: int = Field(0, ge=0, description="Restarts after a failure before the job is FAILED.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for every worker.")
    runtime_env: dict[str, Any] = Field(default_factory=dict, description="A Ray runtime_env, passed verbatim "
                                        "(working_dir, pip, env_vars, py_modules, ...).")

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
        return bounds(self.workers)[0]

    @property
    def max_workers(self) -> int:
        return bounds(self.workers)[1]


class JobBase(DocumentHeader):
    """What the job kinds share beyond the header: the spec's common fields and their accessors."""

    spec: WorkloadSpec = Field(description="What to run and with which resources.")

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

    def role_requests(self) -> tuple[tuple[str, WorkerRequest, int, Placement], ...]:
        """Roles besides the workers, each (name, what each member needs, members, placement), admitted with the
        workers as one gang; a kind whose spec declares roles overrides it. () = the workers are the gang."""
        return ()

    def members(self, workers: int) -> list[tuple[str, int, WorkerRequest]]:
        """(role, index in its role, what it needs) of each gang member with ``workers`` workers, in the order
        admission places them: the workers, then each role's members."""
        out = [("worker", i, self.worker_request()) for i in range(workers)]
        for name, request, count, _ in self.role_requests():
            out += [(name, i, request) for i in range(count)]
        return out

    def claims(self) -> tuple[Claim, ...]:
        """What this job holds uniquely while it is active (queued, admitted or running); a kind with such
        names overrides it, and the controller refuses a submit whose claims another active job holds."""
        return ()

    def effective_priority(self, tenant: Tenant | None) -> int:
        """The job's priority, or its tenant's default (0 without a tenant)."""
        if self.spec.priority is not None:
            return self.spec.priority
        return tenant.priority if tenant is not None else 0

    def with_tenant(self, tenant: str) -> JobBase:
        """A copy in ``tenant`` (validated)."""
        data = self.model_dump()
        data["metadata"]["tenant"] = tenant
        return type(self).model_validate(data)  # type: ignore[return-value]
