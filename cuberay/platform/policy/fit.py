"""A platform file as the admission core sees it: its ledger, quotas, policy, and the static fit check.

The spec layer describes a platform; this module turns that description into
the policy objects (an empty :class:`Ledger` of the node pools, each tenant's
:class:`TenantQuota`, the configured :class:`Policy`) and answers "could this
job EVER run here?" with the same placement code admission uses, so
``cuberay spec validate --platform``, submit and the simulator agree.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Sequence

from cuberay.errors import AdmissionError, SpecError
from cuberay.platform.policy.gang_roles import could_ever_place
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.placement import place
from cuberay.platform.policy.queue import JobRequest, RoleGroup
from cuberay.platform.policy.scheduling import Policy, TenantQuota, named_pools, policy_named, quota_exceeded
from cuberay.platform.policy.topology import Locality, Topology
from cuberay.platform.policy.unplaceable import why_not
from cuberay.platform.spec.jobs import Job
from cuberay.platform.spec.platform_file import NodePool, Platform, Tenant
from cuberay.platform.spec.resources import LABEL_POOL
from cuberay.platform.spec.topology import level_pairs


def platform_topology(platform: Platform) -> Topology:
    """The platform's levels of closeness (its ``topology``, else the RDMA domain) as the admission core sees them."""
    declared = platform.spec.topology
    return Topology(level_pairs(declared), fill=declared is not None and declared.fill)


def locality(job: Job) -> Locality | None:
    """The job's ``topology`` request as the admission core sees it (None: no constraint)."""
    asked = job.spec.topology
    return None if asked is None else Locality(asked.mode, asked.level)


def topology_problem(platform: Platform, job: Job, file: str | None = None) -> None:
    """SpecError (exit 2) when the job asks for a level the platform does not have."""
    asked = job.spec.topology
    names = platform_topology(platform).names
    if asked is not None and asked.level not in names:
        raise SpecError(f"topology level {asked.level!r} is not one of the platform's levels ({', '.join(names)}); "
                        f"use one of them, or declare it in the platform file's spec.topology.levels",
                        file=file, path=f"spec.topology.{asked.mode}")


def pool_ledger(pools: Iterable[NodePool], topology: Topology | None = None) -> Ledger:
    """An empty ledger with one node per pool node, ids ``<pool>-<i>``, labelled as the pool says."""
    ledger = Ledger()
    if topology is not None:
        ledger.topology = topology
    for pool in pools:
        capacity, labels = pool.node_resources(), pool.node_labels()
        for i in range(pool.nodes):
            ledger.add_node(f"{pool.name}-{i}", capacity, labels)
    return ledger


def platform_ledger(platform: Platform) -> Ledger:
    """An empty ledger of the platform's node pools (nodes ``<pool>-<i>``), for the simulator and fit checks."""
    return pool_ledger(platform.spec.node_pools, platform_topology(platform))


def tenant_quotas(platform: Platform) -> dict[str, TenantQuota]:
    """Each tenant's guaranteed and max resources as the admission core sees them."""
    return {t.name: TenantQuota(t.name, t.guaranteed_resources(), t.max_resources(),
                                None if t.pools is None else tuple(t.pools)) for t in platform.tenants}


# A live admission cycle stops after this long and the next one continues (Policy.cycle_budget_s): with a
# backlog of 100k jobs or a burst of freed nodes, submit and the reads never wait behind one long cycle.
LIVE_CYCLE_BUDGET_S = 0.25


def platform_policy(platform: Platform) -> Policy:
    """The ``cuberay`` admission policy with the platform's scheduler settings applied.

    It carries the live cycle budget; the simulator runs every cycle to the end regardless.
    """
    s = platform.spec.scheduler
    las = None if s.las_threshold_gpu_hours is None else s.las_threshold_gpu_hours * 3600.0
    return replace(policy_named("cuberay"), backfill=s.backfill, reclaim=s.reclaim, preempt=s.preemption,
                   las_threshold_gpu_s=las, cycle_budget_s=LIVE_CYCLE_BUDGET_S)


def quota_problem(job: Job, tenant: Tenant) -> str | None:
    """Why ``job``'s smallest gang exceeds ``tenant``'s max quota, or None if it fits."""
    roles = gang(job).total_for(0) if job.role_requests() else None
    problem = quota_exceeded(tenant.name, tenant.max_resources(), job.worker_request().resources, job.min_workers,
                             roles)
    return None if problem is None else f"spec.workers: {problem}"


def pool_problem(job: Job, tenant: Tenant) -> str | None:
    """Why ``job`` names a node pool its tenant may not use (in spec.node_selector or a role's), or None."""
    if tenant.pools is None:
        return None
    requests = [("spec.node_selector", job.worker_request())]
    requests += [(f"spec.roles.{name}.node_selector", request) for name, request, _, _ in job.role_requests()]
    for field, request in requests:
        outside = sorted((named_pools(request) or frozenset()) - set(tenant.pools))
        if outside:
            named = f"node pool {outside[0]}" if len(outside) == 1 else f"node pools {', '.join(outside)}"
            mine = (f"only its own pools ({', '.join(tenant.pools)}). Name one of them, drop the pool from the "
                    f"selector," if tenant.pools else "no node pool. Drop the pool from the selector")
            return (f"{field} names {named} ({LABEL_POOL}), but tenant {tenant.name!r} may use {mine} or ask an "
                    f"admin to add it to spec.tenants.{tenant.name}.pools in the platform file")
    return None


def gang(job: Job, job_id: str = "") -> JobRequest:
    """The scheduler's view of ``job``'s smallest gang (its roles included), for the checks before submit."""
    roles = tuple(RoleGroup(*role) for role in job.role_requests())
    return JobRequest(job_id, job.tenant or "", job.worker_request(), job.min_workers, job.spec.placement,
                      topology=locality(job), roles=roles)


def capacity_problem(job: Job, pools: Sequence[NodePool], topology: Topology | None = None) -> str | None:
    """Why ``job``'s smallest gang can never be placed on ``pools`` (empty), or None; None too without pools.

    Uses the real placement policy on empty nodes, so the answer matches what admission will do.
    """
    if not pools:
        return None
    ledger = pool_ledger(pools)
    nodes = list(ledger.nodes.values())
    if job.role_requests():
        if topology is not None:
            ledger.topology = topology
        problem = could_ever_place(nodes, gang(job), ledger)
        return None if problem is None else f"spec.{problem if problem.startswith('roles.') else 'workers: ' + problem}"
    req, count, policy, near = job.worker_request(), job.min_workers, job.spec.placement, locality(job)
    if place(nodes, req, count, policy, empty=True, near=near, topology=topology) is not None:
        return None
    return f"spec.workers: {why_not(nodes, req, count, policy, near=near, topology=topology)}"


def check_job(platform: Platform, job: Job, *, file: str | None = None) -> Tenant:
    """Could ``job`` EVER run on ``platform``? Its tenant exists, the gang fits the tenant's max and its pools.

    Raises:
        SpecError: no tenant set, or an unknown one, or a topology level the platform lacks (exit 2).
        AdmissionError: larger than the tenant's max quota or than the node pools (exit 3).
    """
    if job.tenant is None:
        raise SpecError("the job names no tenant; set metadata.tenant or pass --tenant",
                        file=file, path="metadata.tenant")
    try:
        tenant = platform.tenant(job.tenant)
    except SpecError as exc:
        raise SpecError(exc.reason, file=file, path=exc.path) from None
    topology_problem(platform, job, file)
    pools = [p for p in platform.spec.node_pools if tenant.pools is None or p.name in tenant.pools]
    for problem in (pool_problem(job, tenant), quota_problem(job, tenant),
                    capacity_problem(job, pools, platform_topology(platform))):
        if problem:
            raise AdmissionError(f"{file + ': ' if file else ''}{problem}")
    return tenant
