"""Applying automatic resource correction at submit: history from the store, bounds from quota and nodes.

The rule itself is pure (:mod:`cuberay.platform.policy.correction`); this module reads the job's past
successful runs, works out what one worker may hold at most (the tenant's max over the gang's
minimum size, and the largest live node), and rewrites the spec's ``cpu`` and ``memory``. The
stored record keeps the corrected spec (what runs) and ``correction`` (requested vs corrected, why).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from cuberay.platform.control.store import Store
from cuberay.platform.policy.correction import MAX_AGE_S, MAX_SAMPLES, GiB, UsageSample, correct
from cuberay.platform.policy.fit import gang
from cuberay.platform.policy.scheduling import TenantQuota
from cuberay.platform.spec import load_spec


def worker_ceiling(quota: TenantQuota | None, workers: int,
                   node_capacities: Iterable[Mapping[str, float]],
                   roles: Mapping[str, float] | None = None) -> dict[str, float]:
    """The most CPU and memory one worker of a ``workers`` gang can be given; ``roles`` is what the gang's other
    roles hold in all (a gang with roles), which the tenant's max leaves the workers less of."""
    caps = list(node_capacities)
    ceiling: dict[str, float] = {}
    for name in ("CPU", "memory"):
        bounds = [max((c.get(name, 0.0) for c in caps), default=0.0)] if caps else []
        if quota is not None and quota.max is not None and quota.max.get(name, 0.0) > 0:
            bounds.append(max(quota.max.get(name, 0.0) - (roles or {}).get(name, 0.0), 0.0) / max(workers, 1))
        if bounds:
            ceiling[name] = min(bounds)
    return ceiling


def apply(store: Store, job: Any, quota: TenantQuota | None, node_capacities: Iterable[Mapping[str, float]],
          now: float) -> tuple[Any, dict[str, Any] | None]:
    """(the job to queue, the correction record or None)."""
    history = store.usage_history(job.tenant, job.name, since=now - MAX_AGE_S, limit=MAX_SAMPLES)
    samples = [UsageSample(t, cpu, mem) for t, cpu, mem in history]
    requested = job.worker_request().resources.as_dict()
    fix = correct(requested, samples, now=now, env=job.spec.env,
                  ceiling=worker_ceiling(quota, job.min_workers, node_capacities,
                                         gang(job).total_for(0) if job.role_requests() else None))
    if fix is None:
        return job, None
    data = job.model_dump(mode="json", by_alias=True)
    resources = data["spec"]["resources"]
    resources["cpu"] = _cpu_text(fix.corrected["CPU"])
    resources["memory"] = _memory_text(fix.corrected["memory"])
    record = {"requested": {"cpu": _cpu_text(requested.get("CPU", 0.0)),
                            "memory": _memory_text(requested.get("memory", 0.0))},
              "corrected": {"cpu": resources["cpu"], "memory": resources["memory"]},
              "reason": fix.reason}
    return load_spec(data), record


def describe(correction: Mapping[str, Any]) -> str:
    """One line for events and the CLI: what was asked, what it became, why."""
    asked, now = correction["requested"], correction["corrected"]
    return (f"per-worker request corrected from cpu {asked['cpu']}, memory {asked['memory']} to cpu {now['cpu']}, "
            f"memory {now['memory']}: {correction['reason']}")


def _cpu_text(cores: float) -> str:
    return str(int(cores)) if float(cores).is_integer() else f"{cores:g}"


def _memory_text(num_bytes: float) -> str:
    if num_bytes <= 0:
        return "0"
    gib = num_bytes / GiB
    return f"{int(gib)}Gi" if gib.is_integer() else str(int(num_bytes))
