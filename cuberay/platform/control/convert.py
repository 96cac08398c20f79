"""What the controller turns specs and records into: quotas, policy, JobRequests, identities, views.

No Ray here: these are the translations between the spec layer, the store and
the pure scheduling core, kept apart from the actor so they read (and test)
on their own.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable

from cuberay import kinds
from cuberay.errors import AdmissionError, SpecError
from cuberay.platform.api.records import JobIdentity, JobRecord, TenantUsage
from cuberay.platform.policy.admission import ClusterState
from cuberay.platform.policy.fit import locality
from cuberay.platform.policy.queue import JobRequest, RoleGroup
from cuberay.platform.policy.scheduling import confine_to_pools
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import Job, Platform, Tenant
from cuberay.platform.spec.platform_file import TENANT_ENV, TenantChoice


def require_runnable(job: Job, file: str | None = None) -> None:
    """SpecError (exit 2) for a job of a kind without an adapter here (cuberay.kinds), naming what runs.

    Submit refuses such a job, so it never waits in the queue and holds quota only to fail when its turn comes.
    """
    if kinds.get(job.kind) is None:
        runs = ", ".join(kinds.names()[:-1]) + " and " + kinds.names()[-1]
        raise SpecError(f"{job.kind} jobs cannot be submitted: this platform runs {runs} "
                        f"jobs. `cuberay spec validate` still checks a {job.kind} file", file=file, path="kind")


def live_platform(platform: Platform) -> Platform:
    """The platform without its declared node pools: on a live cluster Ray's own nodes are the truth.

    ``policy.fit.check_job`` compares a job with the pools; those describe the
    simulator's or KubeRay's cluster, not necessarily the one the controller
    runs on, so the live capacity check is the ledger's (``ClusterState.submit``).
    """
    spec = platform.spec.model_copy(update={"node_pools": []})
    return platform.model_copy(update={"spec": spec})


def choose_tenant(platform: Platform, user: str, requested: str | None, spec_tenant: str | None = None,
                  preferred: str | None = None) -> TenantChoice:
    """The tenant ``user`` submits to and why (:meth:`Platform.choose_tenant`: --tenant, metadata.tenant, the
    caller's CUBERAY_TENANT, the platform file's defaults, the only tenant); AdmissionError naming the asked
    tenant's members and admins if the user is not one of them."""
    asked = next(((name, why) for name, why in ((requested, ""), (spec_tenant, ""), (preferred, f" ({TENANT_ENV})"))
                  if name is not None), None)
    if asked is not None:
        name, source = asked
        tenant = next((t for t in platform.tenants if t.name == name), None)
        if tenant is not None and not tenant.is_member(user):
            mine = platform.tenants_of(user)
            members = ", ".join(tenant.members) or "none"
            admins = ", ".join(tenant.admins) or "none listed"
            raise AdmissionError(
                f"user {user!r} may not submit to tenant {name!r}{source}: its members are {members} and its "
                f"admins {admins}. Ask an admin of {name!r} to add you to tenants.{name}.members "
                f"in the platform file (then apply it with `cuberay up`, no restart needed), or submit to "
                f"{'one of your tenants: ' + ', '.join(mine) if mine else 'a tenant you belong to'} "
                f"(set CUBERAY_USER if you are someone else)")
    return platform.choose_tenant(user, requested, spec_tenant=spec_tenant, preferred=preferred)


def same_request(earlier: JobRecord, job: Job) -> JobRecord:
    """The job an earlier submit with the same request id made; SpecError if that id named another job."""
    if (earlier.kind, earlier.name) != (job.kind, job.name):
        raise SpecError(f"request id {earlier.request_id!r} was already used for {earlier.kind} {earlier.name!r} "
                        f"(job {earlier.id}), not {job.kind} {job.name!r}; use a new request id for a new job",
                        path="request_id")
    if earlier.state == JobState.REJECTED:
        raise AdmissionError(f"job {earlier.id} rejected: {earlier.reason}")
    return earlier.model_copy(update={"repeat": True})


def job_request(job_id: str, job: Job, tenant: Tenant, submit_time: float, user: str,
                attained_gpu_s: float = 0.0) -> JobRequest:
    """The scheduler's view of a job: gang of min_workers, growing to max_workers when elastic."""
    elastic, kind = job.max_workers > job.min_workers, kinds.of(job.kind)
    pools = None if tenant.pools is None else tuple(tenant.pools)
    roles = tuple(RoleGroup(name, confine_to_pools(request, pools), count, placement)
                  for name, request, count, placement in job.role_requests())
    return JobRequest(
        id=job_id, tenant=tenant.name, workers=job.min_workers, roles=roles,
        worker=confine_to_pools(job.worker_request(), pools),
        max_workers=job.max_workers if elastic else None, placement=job.spec.placement,
        priority=job.effective_priority(tenant), submit_time=submit_time,
        attained_gpu_s=attained_gpu_s, max_runtime_s=job.max_runtime_s, service=kind.service,
        resizable=elastic and kind.resizes(job), topology=locality(job), user=sys.intern(user),
    )


def allocation_of(node_ids: Iterable[str]) -> list[dict[str, Any]]:
    """The stored form of an allocation: one entry per worker."""
    return [{"node_id": node_id} for node_id in node_ids]


def node_ids_of(allocation: list[dict[str, Any]] | None) -> list[str]:
    return [str(worker["node_id"]) for worker in allocation or []]


def submission_id(job_id: str, attempt: int) -> str:
    """The Ray Job id of one attempt; Ray refuses to reuse an id, so later attempts get a suffix."""
    return f"cuberay-{job_id}" if attempt <= 1 else f"cuberay-{job_id}-{attempt}"


def identity(record: JobRecord, run_id: str) -> JobIdentity:
    """The KFJ_* identity of a job: the resource strings exactly as the user wrote them."""
    res = record.spec.get("spec", {}).get("resources", {})

    def text(name: str) -> str:
        value = res.get(name)
        return "" if value is None else str(value)

    return JobIdentity(job_id=record.id, name=record.name, tenant=record.tenant, user=record.user,
                       run_id=run_id, kind=record.kind, cpu=text("cpu"), memory=text("memory"),
                       gpu=text("gpu"), rdma=text("rdma"), namespace=record.tenant)


def short(node_id: str) -> str:
    return node_id[:8]


def tenant_usages(platform: Platform, state: ClusterState) -> list[TenantUsage]:
    """Quota, use and borrowing per tenant (Ray resource names; memory in bytes)."""
    out = []
    for tenant in platform.tenants:
        guaranteed = tenant.guaranteed_resources().as_dict()
        limit = tenant.max_resources()
        in_use = {k: v for k, v in state.usage.get(tenant.name, {}).items() if abs(v) > 1e-9}
        borrowed = {k: v - guaranteed.get(k, 0.0) for k, v in in_use.items() if v > guaranteed.get(k, 0.0) + 1e-9}
        out.append(TenantUsage(
            name=tenant.name, guaranteed=guaranteed, max=None if limit is None else limit.as_dict(),
            in_use=in_use, borrowed=borrowed,
            running=sum(1 for r in state.running.values() if r.job.tenant == tenant.name),
            queued=state.queue.count(tenant.name)))
    return out
