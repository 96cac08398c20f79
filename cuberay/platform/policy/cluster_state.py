"""The snapshot admission looks at: ledger, tenants, queue, running jobs, reservation.

Pure bookkeeping (no Ray): executors submit, start, finish and preempt jobs
through it, and apply the decisions of ``admission.schedule``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from cuberay.platform.policy.decisions import Admit, Decision, Preempt, Reject, Reserve, Resize
from cuberay.platform.policy.gang_roles import could_ever_place
from cuberay.platform.policy.ledger import Allocation, Ledger
from cuberay.platform.policy.placement import place
from cuberay.platform.policy.queue import JobQueue, JobRequest
from cuberay.platform.policy.scheduling import Policy, TenantQuota, quota_exceeded
from cuberay.platform.policy.unplaceable import why_not
from cuberay.platform.policy.victim_index import VictimIndex

_EPS = 1e-9


@dataclass(slots=True)
class RunningJob:
    job: JobRequest
    allocation: Allocation
    start_time: float
    checkpoint_time: float | None = None     # last checkpoint the job reported
    checkpoint_every_s: float | None = None  # or: it checkpoints periodically from start_time
    band_flip: float = float("inf")          # when its attained service crosses the LAS threshold
    protected: bool = False                  # not a least-attained-service victim (it waited too long)
    resized_at: float | None = None          # when its allocation last grew or shrank

    def attained_at(self, now: float) -> float:
        return self.job.attained_gpu_s + self.job.gpus * max(0.0, now - self.start_time)

    def lost_work_at(self, now: float) -> float:
        """GPU-seconds a preemption now would throw away (since the last checkpoint or start)."""
        ran = max(0.0, now - max(self.start_time, self.checkpoint_time or self.start_time))
        if self.checkpoint_every_s:
            ran = min(ran, max(0.0, now - self.start_time) % self.checkpoint_every_s)
        return max(self.job.gpus, 1e-3) * ran


class ClusterState:
    """Everything admission looks at: ledger, tenants, queue, running jobs, reservation."""

    def __init__(self, ledger: Ledger, tenants: Mapping[str, TenantQuota], policy: Policy | None = None) -> None:
        self.ledger = ledger
        self.tenants = dict(tenants)
        self.policy = policy or Policy()
        self.queue = JobQueue(self.band_of)
        self.running: dict[str, RunningJob] = {}
        self.running_by_tenant: dict[str, dict[str, RunningJob]] = {}
        self.elastic: dict[str, RunningJob] = {}  # running resizable jobs (policy/resize.py looks only here)
        self.victims = VictimIndex()  # the running jobs in preemption order, kept across cycles
        self.usage: dict[str, dict[str, float]] = {t: {} for t in self.tenants}
        self.reservation: Reserve | None = None
        # How far cycles cut short by their time budget got (the queue-order key of the furthest bucket
        # examined), None after a full cycle. Scheduling memory, not a decision: a cycle stops at its budget
        # only once it admitted a job or examined a bucket beyond this, so every bucket is reached in turn.
        self.resume_after: tuple | None = None

    def band_of(self, job: JobRequest) -> int:
        threshold = self.policy.las_threshold_gpu_s
        return int(threshold is not None and not job.service and job.attained_gpu_s >= threshold)

    # -- submission ------------------------------------------------------------
    def check(self, job: JobRequest) -> str | None:
        """Why ``job`` can never run here (unknown tenant, over its max, larger than the cluster), or None."""
        quota = self.tenants.get(job.tenant)
        if quota is None:
            known = ", ".join(sorted(self.tenants)) or "none"
            return f"unknown tenant {job.tenant!r}; known tenants: {known}. Set metadata.tenant or --tenant"
        over = quota_exceeded(job.tenant, quota.max, job.worker.resources, job.workers,
                              job.total_for(0) if job.roles else None)
        if over:
            return over
        topo = self.ledger.topology
        if job.topology is not None and topo.depth(job.topology.level) is None:
            return (f"topology level {job.topology.level!r} is not one of this platform's levels "
                    f"({', '.join(topo.names)}); fix spec.topology")
        if job.roles:
            return self._roles_could_ever_place(job)
        if not self._could_ever_place(job):
            return why_not(self.ledger.nodes.values(), job.worker, job.workers, job.placement, near=job.topology,
                           topology=topo)
        return None

    def _could_ever_place(self, job: JobRequest) -> bool:
        """Placement on the empty nodes, cached on the ledger per gang shape (cleared when nodes change)."""
        key = ("ever", job.shape)
        hit = self.ledger.cache.get(key)
        if hit is None:
            placed = place(self.ledger.nodes.values(), job.worker, job.workers, job.placement, empty=True,
                           near=job.topology, topology=self.ledger.topology)
            hit = self.ledger.cache[key] = placed is not None
        return bool(hit)

    def _roles_could_ever_place(self, job: JobRequest) -> str | None:
        key = ("ever-roles", job.shape)
        if key not in self.ledger.cache:
            self.ledger.cache[key] = could_ever_place(self.ledger.nodes.values(), job, self.ledger)
        return self.ledger.cache[key]  # type: ignore[return-value]

    def submit(self, job: JobRequest) -> Reject | None:
        """Queue ``job``, or reject it at once with the reason if it can never run."""
        reason = self.check(job)
        if reason:
            return Reject(job.id, reason)
        self.ledger.mix.observe(job.worker, job.workers)  # the request mix frag placement weighs
        self.queue.add(job)
        return None

    def cancel(self, job_id: str) -> JobRequest | RunningJob | None:
        if job_id in self.queue:
            return self.queue.remove(job_id)
        return self.finish(job_id)

    # -- applying decisions ------------------------------------------------------
    def apply(self, decisions: Iterable[Decision], now: float) -> None:
        """Bookkeeping for decisions: preemptions first (they free what admissions use), the rest in order
        (a shrink comes before the admission it makes room for)."""
        decisions = list(decisions)
        for d in decisions:
            if isinstance(d, Preempt):
                self.preempt(d.job_id, now)
        for d in decisions:
            if isinstance(d, Admit):
                self.start(d.job_id, d.node_ids, now, protected=d.protected)
            elif isinstance(d, Resize):
                self.resize(d.job_id, d.node_ids, now)
            elif isinstance(d, Reserve):
                self.reservation = d if d.job_id else None

    def start(self, job_id: str, node_ids: Iterable[str], now: float, *, protected: bool = False) -> RunningJob:
        job = self.queue.remove(job_id)
        alloc = self.ledger.allocate(job.id, job.worker, node_ids, roles=job.member_requests(0))
        run = self.running[job.id] = RunningJob(job, alloc, now, protected=protected)
        self.set_band_flip(run)
        self.running_by_tenant.setdefault(job.tenant, {})[job.id] = run
        self.victims.add(run)
        if job.resizable and job.max_workers:
            self.elastic[job.id] = run
        add_amounts(self.usage.setdefault(job.tenant, {}), alloc.total, 1.0)
        if self.reservation and self.reservation.job_id == job_id:
            self.reservation = None
        return run

    def resize(self, job_id: str, node_ids: Iterable[str], now: float) -> RunningJob:
        """A running job's allocation becomes one worker per entry of ``node_ids`` (see ``Ledger.resize``)."""
        run = self.running[job_id]
        alloc = self.ledger.resize(job_id, node_ids)
        usage = self.usage.setdefault(run.job.tenant, {})
        add_amounts(usage, run.allocation.total, -1.0)
        add_amounts(usage, alloc.total, 1.0)
        run.allocation = alloc
        run.resized_at = now
        return run

    def set_band_flip(self, run: RunningJob) -> None:
        """Precompute when a running job leaves the first service band (cheap checks in the cycle).

        Also called after a running job's start time changes (the simulator moves it to the end of the
        restart cost): its place in the victim index follows both."""
        self._band_flip(run)
        self.victims.rekey(run)

    def _band_flip(self, run: RunningJob) -> None:
        t = self.policy.las_threshold_gpu_s
        if t is None or run.job.service:
            run.band_flip = float("inf")
        elif run.job.gpus <= 0:
            run.band_flip = float("inf") if run.job.attained_gpu_s < t else float("-inf")
        else:
            run.band_flip = run.start_time + (t - run.job.attained_gpu_s) / run.job.gpus

    def finish(self, job_id: str) -> RunningJob | None:
        run = self.running.pop(job_id, None)
        if run is not None:
            self.running_by_tenant.get(run.job.tenant, {}).pop(job_id, None)
            self.victims.remove(job_id)
            self.elastic.pop(job_id, None)
            alloc = self.ledger.release(job_id)
            if alloc is not None:
                add_amounts(self.usage.setdefault(run.job.tenant, {}), alloc.total, -1.0)
        return run

    def preempt(self, job_id: str, now: float, attained_gpu_s: float | None = None) -> RunningJob | None:
        """Stop a running job and put it back in the queue with its service so far."""
        run = self.finish(job_id)
        if run is not None:
            run.job.attained_gpu_s = run.attained_at(now) if attained_gpu_s is None else attained_gpu_s
            run.job.queued_at = now
            self.queue.add(run.job)
        return run

    def remove_node(self, node_id: str, now: float) -> list[RunningJob]:
        """A node left: requeue the jobs that had workers on it, then drop it from the ledger."""
        hit = [r for r in list(self.running.values()) if node_id in r.allocation.node_ids]
        for run in hit:
            self.preempt(run.job.id, now)
        self.ledger.remove_node(node_id)
        return hit

    def tenant_share(self, tenant: str, usage: Mapping[str, float] | None = None) -> float:
        """Dominant share of the tenant's guarantee in use (DRF); no guarantee counts as a huge share."""
        used = self.usage.get(tenant, {}) if usage is None else usage
        quota = self.tenants.get(tenant)
        share = 0.0
        for name, amount in used.items():
            if amount <= _EPS:
                continue
            g = quota.guaranteed.get(name, 0.0) if quota else 0.0
            cap = self.ledger.total_capacity.get(name, 0.0) or 1.0
            share = max(share, amount / g if g > 0 else 1e6 * amount / cap)
        return share


def add_amounts(usage: dict[str, float], amounts: Mapping[str, float], sign: float) -> None:
    for k, v in amounts.items():
        usage[k] = usage.get(k, 0.0) + sign * v
