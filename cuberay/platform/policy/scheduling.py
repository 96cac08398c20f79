"""Scheduling knobs and tenant quotas as the pure core sees them.

``policy.fit`` builds these from the platform file; the simulator builds
them from flags. Named policies: ``cuberay`` (ours) and the
baselines ``fifo`` (strict FIFO gang, like Volcano's default queue) and
``fifo-backfill`` (FIFO with aggressive backfill and no reservation).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from cuberay.errors import SpecError
from cuberay.platform.spec.load import amount_text, field_of
from cuberay.platform.spec.resources import LABEL_POOL, Resources, WorkerRequest


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """A tenant's guaranteed (nominal) resources and its cap (guaranteed + borrowing); None = no cap."""

    name: str
    guaranteed: Resources = Resources()
    max: Resources | None = None
    pools: tuple[str, ...] | None = None  # node pools its jobs may use (label cuberay.io/pool); None = any node


def quota_exceeded(tenant: str, limit: Mapping[str, float] | None, per_worker: Resources, workers: int,
                   roles: Resources | None = None) -> str | None:
    """Why a gang of ``workers`` x ``per_worker`` (and its roles' ``roles`` in all) can never start under
    ``tenant``'s max (None: no max, or it fits).

    The one wording of this refusal: the static check (``cuberay spec validate --platform``) and admission's
    check at submit both use it.
    """
    if limit is None:
        return None
    over = (per_worker * workers + (roles or Resources())).exceeding(limit)
    if not over:
        return None

    def rest(r: str) -> str:
        return f" + {amount_text(r, roles.get(r, 0.0))} for its roles" if roles else ""

    seen = "; ".join(f"max {field_of(r)} is {amount_text(r, cap)} and the job asks {workers} x "
                     f"{amount_text(r, per_worker.get(r, 0.0))}{rest(r)} = {amount_text(r, asked)}"
                     for r, (asked, cap) in over.items())
    fields = _listed([field_of(r) for r in over])
    raise_ = _listed([f"tenants.{tenant}.quota.max.{field_of(r)}" for r in over])
    return (f"tenant {tenant!r} {seen}. A job starts only when its whole gang fits within its tenant's max: lower "
            f"workers or each worker's {fields}, or ask an admin to raise {raise_}")


def _listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def named_pools(worker: WorkerRequest) -> frozenset[str] | None:
    """The node pools a worker's own node_selector names (``pool`` or ``in(a,b)``), or None if it names none."""
    value = dict(worker.labels).get(LABEL_POOL)
    if value is None:
        return None
    inner = value[3:-1] if value.startswith("in(") and value.endswith(")") else value
    return frozenset(v.strip() for v in inner.split(",") if v.strip())


def confine_to_pools(worker: WorkerRequest, pools: tuple[str, ...] | None) -> WorkerRequest:
    """``worker`` restricted to nodes of ``pools``; unchanged for None.

    A pool the worker names itself narrows the choice, never widens it: only the named pools that are also the
    tenant's remain (none left: no node matches; submit refuses such a job first, with the fix, and this keeps a
    queued one confined after a reload takes a pool from its tenant). The same rule holds in the simulator (pool
    nodes carry the label), on a live Ray whose nodes carry it (KubeRay worker groups set it) and in the
    Kueue/Volcano quotas rendered per pool.
    """
    if pools is None:
        return worker
    asked = named_pools(worker)
    allowed = set(pools) if asked is None else set(pools) & asked
    if asked is not None and allowed == asked:
        return worker
    rest = tuple(label for label in worker.labels if label[0] != LABEL_POOL)
    return replace(worker, labels=tuple(sorted((*rest, (LABEL_POOL, f"in({','.join(sorted(allowed))})")))))


@dataclass(frozen=True, slots=True)
class Policy:
    """How admission orders, backfills and preempts."""

    name: str = "cuberay"
    fifo: bool = False                  # order by age only, ignore priority and tenant share
    fair_share: bool = True             # order tenants by dominant share of their guarantee (DRF)
    backfill: bool = True               # later jobs may start when the head is blocked
    reserve: bool = True                # hold capacity for the first blocked job (no starvation)
    reclaim: bool = True                # a tenant under its guarantee preempts borrowers
    # Under LAS, only band-0 jobs reclaim: a long job of a tenant below its guarantee waits for capacity (or
    # promotion) instead of evicting borrowers; on a saturated cluster those evictions doubled the mean JCT.
    reclaim_first_band_only: bool = True
    preempt: bool = True                # higher priority (or less attained service) preempts lower
    las_threshold_gpu_s: float | None = 10800.0  # least-attained-service bands (3 GPU-hours); None: off
    min_run_before_preempt_s: float = 0.0   # priority/LAS victims must have run this long (0: LAS decides)
    las_promote: float | None = 4.0     # back to band 0 after waiting this many times its run time per card
    las_promote_max_wait_s: float | None = None  # ... or this long, whichever is shorter (None: no cap)
    las_victims_most_attained: bool = True  # LAS victims: most attained service first (else least work lost)
    # Starvation guard: a job queued this long in all (across preemptions) is overdue: back in band 0, never an
    # LAS victim once started, and only overdue gangs take the reservation. None: no overdue rule, and the
    # oldest blocked gang takes the reservation at once.
    overdue_after_s: float | None = 4 * 3600.0
    # ... counted only for gangs that need more than one node (True), or for every job (False). Multi-node gangs
    # are the ones LAS preemption and backfill starve (demoted after minutes, preempted by every short job, and
    # they need many cards free at once); protecting every long-waiting job instead fills a busy cluster with
    # unpreemptible long jobs.
    overdue_multi_node_only: bool = True
    las_preempt: bool = True            # band-0 jobs may preempt band-1 jobs (else bands only order the queue)
    max_preemptions_per_cycle: int = 1
    scan_limit: int | None = None       # most buckets examined per cycle (None: all)
    # Time budget of one cycle (seconds): past it, once the cycle admitted a job or examined a bucket beyond
    # where the last cut-short cycle got, it stops before the next bucket; the next cycle starts again from
    # the top of the queue order. A stopped cycle decides a prefix of what a full one would, so the order
    # guarantees hold.
    # None: every cycle examines the whole queue (the simulator; decisions then never depend on the clock).
    cycle_budget_s: float | None = None


POLICIES: dict[str, Policy] = {
    "cuberay": Policy(),
    "fifo": Policy(name="fifo", fifo=True, fair_share=False, backfill=False, reserve=False, las_threshold_gpu_s=None,
                   reclaim=False, preempt=False),
    "fifo-backfill": Policy(name="fifo-backfill", fifo=True, fair_share=False, backfill=True, las_threshold_gpu_s=None,
                            reserve=False, reclaim=False, preempt=False),
}


def policy_named(name: str, **overrides: object) -> Policy:
    """Look up a named policy, optionally overriding fields."""
    try:
        base = POLICIES[name]
    except KeyError:
        raise SpecError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None
    return replace(base, **overrides) if overrides else base  # type: ignore[arg-type]
