"""Platform metrics: what the controller exports to Prometheus through Ray.

The definitions (`METRICS`) are plain data so that the Grafana generator and
the unit tests can use them without Ray; `PlatformMetrics` creates the Ray
metric objects and must be built inside a Ray worker (the controller actor).

Ray exports every metric on the Prometheus endpoint of the node where the
recording process runs, named ``ray_<name>`` (counters ``ray_<name>_total``,
histograms ``ray_<name>_bucket|_sum|_count``). Tags are tenant, resource and
reason only: never a job id, so the number of series stays bounded.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

# Ray discards (with only a warning) a metric whose name fails
# `ray.util.metrics._VALID_METRIC_NAME_RE` = ^[a-zA-Z_:][a-zA-Z0-9_:]*$ and warns
# that ":" will become an error, so cuberay allows the stricter subset.
# tests/integration/test_metrics.py checks Ray's regex still accepts it.
METRIC_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Labels Ray itself attaches to every exported series; a tag with one of these
# names would clash.
RAY_RESERVED_LABELS = frozenset(
    {"Component", "NodeAddress", "SessionName", "Version", "WorkerId", "JobId", "le", "instance", "job"}
)
EXPORT_PREFIX = "ray_"

# Wait-time histogram buckets: one second to one day.
WAIT_BOUNDARIES_S: tuple[float, ...] = (
    1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400,
)


class MetricKind(str, enum.Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class MetricDef:
    """One metric as declared to Ray."""

    name: str
    kind: MetricKind
    description: str
    tag_keys: tuple[str, ...]
    boundaries: tuple[float, ...] = field(default=())

    @property
    def exported(self) -> str:
        """The Prometheus series name to use in PromQL (histograms: add _bucket/_sum/_count)."""
        suffix = "_total" if self.kind is MetricKind.COUNTER else ""
        return f"{EXPORT_PREFIX}{self.name}{suffix}"

    @property
    def exported_series(self) -> tuple[str, ...]:
        """Every series name Prometheus will hold for this metric."""
        if self.kind is MetricKind.HISTOGRAM:
            return tuple(f"{self.exported}_{part}" for part in ("bucket", "sum", "count"))
        return (self.exported,)


TENANT = ("tenant",)
QUEUE_LENGTH = MetricDef(
    "cuberay_queue_length", MetricKind.GAUGE, "Jobs waiting (QUEUED or PREEMPTED) per tenant.", TENANT,
)
RUNNING_JOBS = MetricDef(
    "cuberay_running_jobs", MetricKind.GAUGE, "Jobs holding an allocation (ADMITTED or RUNNING) per tenant.", TENANT,
)
ALLOCATED = MetricDef(
    "cuberay_allocated", MetricKind.GAUGE,
    "Resources allocated to the tenant's jobs (Ray units: CPU, GPU, memory bytes, ...).", ("tenant", "resource"),
)
GUARANTEED = MetricDef(
    "cuberay_guaranteed", MetricKind.GAUGE, "Tenant's guaranteed (nominal) quota per resource.", ("tenant", "resource"),
)
WAIT_SECONDS = MetricDef(
    "cuberay_wait_seconds", MetricKind.HISTOGRAM, "Time from submission to admission.", TENANT, WAIT_BOUNDARIES_S,
)
ADMISSIONS = MetricDef("cuberay_admissions", MetricKind.COUNTER, "Jobs admitted.", TENANT)
PREEMPTIONS = MetricDef("cuberay_preemptions", MetricKind.COUNTER, "Jobs preempted to reclaim quota.", TENANT)
REJECTIONS = MetricDef(
    "cuberay_rejections", MetricKind.COUNTER, "Jobs rejected at submission, by reason.", ("tenant", "reason"),
)

METRICS: tuple[MetricDef, ...] = (
    QUEUE_LENGTH, RUNNING_JOBS, ALLOCATED, GUARANTEED, WAIT_SECONDS, ADMISSIONS, PREEMPTIONS, REJECTIONS,
)


@dataclass(frozen=True)
class TenantStats:
    """One tenant's numbers at one admission cycle (resource keys are Ray names)."""

    queued: int = 0
    running: int = 0
    allocated: Mapping[str, float] = field(default_factory=dict)
    guaranteed: Mapping[str, float] = field(default_factory=dict)


class PlatformMetrics:
    """The controller's Ray metrics. Build it inside a Ray worker process."""

    def __init__(self) -> None:
        from ray.util import (
            metrics as ray_metrics,  # lazily: the definitions above need no Ray
        )

        classes = {MetricKind.GAUGE: ray_metrics.Gauge, MetricKind.COUNTER: ray_metrics.Counter}
        self._m: dict[str, Any] = {}
        for d in METRICS:
            if d.kind is MetricKind.HISTOGRAM:
                self._m[d.name] = ray_metrics.Histogram(
                    d.name, description=d.description, boundaries=list(d.boundaries), tag_keys=d.tag_keys
                )
            else:
                self._m[d.name] = classes[d.kind](d.name, description=d.description, tag_keys=d.tag_keys)
        # Gauges keep their last value: remember what was set so that a tenant or
        # resource that leaves the snapshot is set back to 0 instead of going stale.
        self._seen_tenants: set[str] = set()
        self._seen_resources: set[tuple[str, str, str]] = set()

    def observe_snapshot(self, per_tenant: Mapping[str, TenantStats]) -> None:
        """Set the gauges from the controller's current view of every tenant."""
        resources_now: set[tuple[str, str, str]] = set()
        for tenant, stats in per_tenant.items():
            self._m[QUEUE_LENGTH.name].set(stats.queued, tags={"tenant": tenant})
            self._m[RUNNING_JOBS.name].set(stats.running, tags={"tenant": tenant})
            for metric, values in ((ALLOCATED, stats.allocated), (GUARANTEED, stats.guaranteed)):
                for resource, value in values.items():
                    self._m[metric.name].set(float(value), tags={"tenant": tenant, "resource": resource})
                    resources_now.add((metric.name, tenant, resource))
        for tenant in self._seen_tenants - set(per_tenant):
            self._m[QUEUE_LENGTH.name].set(0, tags={"tenant": tenant})
            self._m[RUNNING_JOBS.name].set(0, tags={"tenant": tenant})
        for name, tenant, resource in self._seen_resources - resources_now:
            self._m[name].set(0.0, tags={"tenant": tenant, "resource": resource})
        self._seen_tenants |= set(per_tenant)
        self._seen_resources |= resources_now

    def admitted(self, tenant: str, wait_s: float) -> None:
        self._m[ADMISSIONS.name].inc(1.0, tags={"tenant": tenant})
        self._m[WAIT_SECONDS.name].observe(max(0.0, float(wait_s)), tags={"tenant": tenant})

    def preempted(self, tenant: str) -> None:
        self._m[PREEMPTIONS.name].inc(1.0, tags={"tenant": tenant})

    def rejected(self, tenant: str, reason: str) -> None:
        """`reason` must be a short fixed word (quota, capacity, membership, ...), not a message."""
        self._m[REJECTIONS.name].inc(1.0, tags={"tenant": tenant, "reason": reason})
