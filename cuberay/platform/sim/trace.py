"""What a replay replays: the trace's jobs, read from a Philly or a generic CSV file, and default quotas.

Pure apart from reading the trace file a caller hands it; the nodes of a replay
are in :mod:`cuberay.platform.sim.cluster`, the replay itself in
:mod:`cuberay.platform.sim.engine`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Sequence

from cuberay.errors import SpecError
from cuberay.platform.policy.scheduling import TenantQuota
from cuberay.platform.sim.cluster import NodeSpec
from cuberay.platform.spec.resources import CPU, GPU, Resources


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace: a gang of ``workers`` identical workers."""

    id: str
    submit_time: float          # seconds from the start of the trace
    duration: float             # seconds of useful run time
    gpus: float = 1.0           # per worker
    workers: int = 1
    cpus: float = 0.0           # per worker
    memory: float = 0.0         # per worker, bytes
    tenant: str = "default"
    priority: int = 0
    placement: str = "pack"
    max_workers: int | None = None  # elastic: may grow to this many workers (``duration`` is at ``workers``)
    near: tuple[str, str] | None = None  # (required|preferred, level): the gang's topology request
    slowdown: tuple[tuple[str, float], ...] = ()  # (level, run-time multiplier when crossed): its own distance cost

    @property
    def total_gpus(self) -> float:
        return self.gpus * self.workers


def parse_time(value: str | float | None) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(str(value)).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise SpecError(f"time {value!r} is neither seconds nor a date like 2017-10-01 or "
                        f"'2017-10-01 12:00:00'") from None


def load_philly(path: str, start: str | float | None = None, end: str | float | None = None,
                placement: str = "pack") -> list[TraceJob]:
    """Read the Philly trace (``timestamp,duration,num_gpus,gpu_time,cluster``; rows unsorted).

    Each job is a gang of ``num_gpus`` workers with 1 GPU each; the virtual
    cluster is the tenant. ``start``/``end`` select submissions by date
    (``end`` inclusive of the whole day when given as a date).
    """
    lo, hi = parse_time(start), parse_time(end)
    if hi is not None and isinstance(end, str) and len(end.strip()) == 10:
        hi += 86400  # a bare date means "through the end of that day"
    rows = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        _require(reader.fieldnames, ("timestamp", "duration", "num_gpus", "cluster"), path)
        for n, row in enumerate(reader, start=2):
            try:
                ts = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
                dur, gpus = float(row["duration"]), int(float(row["num_gpus"]))
            except (ValueError, TypeError, OverflowError) as exc:  # OverflowError: int('inf')
                raise SpecError(f"bad row: {exc}", file=path, path=f"line {n}") from None
            if (lo is None or ts >= lo) and (hi is None or ts < hi):
                rows.append((ts, dur, gpus, row["cluster"], n))
    rows.sort()
    if not rows:
        return []
    t0 = rows[0][0]
    return [TraceJob(f"philly-{n}", ts - t0, max(dur, 1.0), 1.0, max(gpus, 1), tenant=vc, placement=placement)
            for ts, dur, gpus, vc, n in rows]


def load_generic(path: str, start: float | None = None, end: float | None = None) -> list[TraceJob]:
    """Read ``submit_time,duration,gpus[,cpus,memory,workers,tenant,priority,max_workers,topology,slowdown_<level>]``.

    ``gpus`` may be fractional; ``topology`` is ``required:LEVEL`` or ``preferred:LEVEL``; each
    ``slowdown_<level>`` column is the job's own run-time multiplier when its gang crosses that level.
    """
    jobs = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        _require(reader.fieldnames, ("submit_time", "duration", "gpus"), path)
        costs = [c for c in reader.fieldnames or () if c.startswith(SLOWDOWN_PREFIX)]
        for n, row in enumerate(reader, start=2):
            try:
                t = float(row["submit_time"])
                job = TraceJob(
                    f"job-{n}", t, float(row["duration"]), float(row["gpus"] or 0),
                    int(float(row.get("workers") or 1)), float(row.get("cpus") or 0),
                    float(row.get("memory") or 0), row.get("tenant") or "default",
                    int(float(row.get("priority") or 0)),
                    max_workers=int(float(row["max_workers"])) if row.get("max_workers") else None,
                    near=_near(row.get("topology")),
                    slowdown=tuple((c[len(SLOWDOWN_PREFIX):], float(row[c])) for c in costs if row.get(c)))
            except (ValueError, TypeError, OverflowError) as exc:  # OverflowError: int('inf')
                raise SpecError(f"bad row: {exc}", file=path, path=f"line {n}") from None
            if (start is None or t >= start) and (end is None or t < end):
                jobs.append(job)
    jobs.sort(key=lambda j: j.submit_time)
    return jobs


SLOWDOWN_PREFIX = "slowdown_"


def _near(text: str | None) -> tuple[str, str] | None:
    """``required:rack`` -> ("required", "rack"); empty -> None."""
    if not text:
        return None
    mode, _, level = text.partition(":")
    if mode not in ("required", "preferred") or not level:
        raise ValueError(f"topology {text!r} is not 'required:LEVEL' or 'preferred:LEVEL'")
    return mode, level


def _require(fields: Sequence[str] | None, needed: Iterable[str], path: str) -> None:
    missing = [f for f in needed if f not in (fields or ())]
    if missing:
        raise SpecError(f"missing columns {', '.join(missing)} (header has {', '.join(fields or []) or 'nothing'})",
                        file=path, path="header")


def proportional_quotas(jobs: Sequence[TraceJob], cluster: Sequence[NodeSpec]) -> dict[str, TenantQuota]:
    """Guarantees proportional to each tenant's GPU-time in the trace; no cap (borrowing allowed)."""
    gpu_time: dict[str, float] = {}
    for j in jobs:
        gpu_time[j.tenant] = gpu_time.get(j.tenant, 0.0) + j.total_gpus * j.duration
    capacity = sum(n.capacity.get(GPU, 0.0) for n in cluster)
    cpus = sum(n.capacity.get(CPU, 0.0) for n in cluster)
    total = sum(gpu_time.values()) or 1.0
    out = {}
    for tenant, t in gpu_time.items():
        share = t / total
        out[tenant] = TenantQuota(tenant, Resources({GPU: capacity * share, CPU: cpus * share}), None)
    for j in jobs:  # tenants with no GPU-time still exist
        out.setdefault(j.tenant, TenantQuota(j.tenant, Resources(), None))
    return out
