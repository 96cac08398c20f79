"""Admission: queue order, quotas, borrow/reclaim, priority, backfill, preemption.

``schedule(state, now)`` is a pure function of a :class:`ClusterState`
snapshot: it works on a checkout of the ledger, undoes every tentative change
before returning, and hands back decision values (Admit, Preempt, Reserve) plus
the reason each examined job waits. Executors (the live controller, the
simulator) apply the decisions with :meth:`ClusterState.apply` and do the side
effects (Ray placement groups, Ray Jobs, simulated finish events).

Order: priority, then service band (least attained service first, Tiresias
style, when ``las_threshold_gpu_s`` is set; a job that waited ``las_promote``
times its run time per card is promoted back), then the tenant's dominant share of its guarantee
(DRF), then age. Quotas: a tenant may use idle capacity up to its ``max``; a
tenant below its guarantee reclaims by preempting borrowers (lowest priority,
later band, no bigger than needed, least work lost, newest first), never taking
a borrower below its own guarantee (under LAS, only first-band jobs reclaim). Starvation: a
multi-node gang (any job, without ``overdue_multi_node_only``) queued ``overdue_after_s``
in all is overdue: promoted, and once started never an LAS victim; the overdue
gang that waited longest (with no such limit: the oldest blocked gang) holds a
reservation that claims free capacity as it frees; backfilled jobs may not use
it, and once started it is not an LAS victim.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import replace
from typing import Callable

from cuberay.platform.policy.cluster_state import ClusterState, RunningJob, add_amounts
from cuberay.platform.policy.decisions import (
    Admit,
    Cycle,
    Decision,
    Preempt,
    Reject,
    Reserve,
    Resize,
)
from cuberay.platform.policy.gang_roles import place_roles
from cuberay.platform.policy.ledger import Allocation, Ledger
from cuberay.platform.policy.placement import place
from cuberay.platform.policy.preemption import EPS as _EPS
from cuberay.platform.policy.preemption import Preemption
from cuberay.platform.policy.queue import Bucket, JobRequest
from cuberay.platform.policy.reservation import Reserving, claim, held_now, worth_reserving
from cuberay.platform.policy.resize import Resizing
from cuberay.platform.policy.topology import REQUIRED
from cuberay.platform.policy.topology_admission import near_reason
from cuberay.platform.spec.resources import CARD_RESOURCES, format_amount

# -- the cycle -----------------------------------------------------------------------

class _Checkout:
    """Tentative ledger changes with an undo log, so a cycle leaves the state untouched."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._undo: list[tuple[str, object]] = []

    def allocate(self, job: JobRequest, node_ids: list[str]) -> None:
        self.ledger.allocate(job.id, job.worker, node_ids, roles=job.member_requests(0))
        self._undo.append(("release", job.id))

    def release(self, job_id: str) -> Allocation | None:
        alloc = self.ledger.release(job_id)
        if alloc is not None:
            self._undo.append(("restore", alloc))
        return alloc

    def rollback(self) -> None:
        while self._undo:
            op, arg = self._undo.pop()
            if op == "release":
                self.ledger.release(arg)  # type: ignore[arg-type]
            else:
                self.ledger.restore(arg)  # type: ignore[arg-type]


class AdmissionCycle(Preemption, Resizing, Reserving):
    """One admission pass. Kept as an object so each step is a short method."""

    def __init__(self, state: ClusterState, now: float, explain: bool = True,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.started = clock()
        self.truncated = False  # stopped at the time budget before the end of the queue
        self.admitted = 0  # jobs admitted so far this cycle
        self.s = state
        self.p = state.policy
        self.now = now
        self.co = _Checkout(state.ledger)
        self.usage = {t: dict(u) for t, u in state.usage.items()}
        self._shares: dict[str, float] = {}
        self.explain = explain  # off in the simulator: waiting jobs get no reason strings
        self._quota_blocked: set[str] = set()
        self.decisions: list[Decision] = []
        self.waits: dict[str, str] = {}
        self.preempted: set[str] = set()
        self.failed_shapes: set[object] = set()
        self.blocked: list[JobRequest] = []  # capacity-blocked jobs seen this cycle
        self.preemption_attempts_left = self.p.max_preemptions_per_cycle
        self.failed_preemptions: set[tuple] = set()
        self._lowest: int | None = None
        self._placed: list[str] = []  # the last placement a preemption found (see _keep_needed)
        self._held_memo: tuple[int, object, dict[str, float]] | None = None
        self.reservation = self._refresh_reservation(state.reservation)

    # ordering
    def key(self, b: Bucket, head: tuple[float, int, str]) -> tuple:
        if self.p.fifo:
            return (head[0], head[1])
        share = self._share(b.tenant) if self.p.fair_share else 0.0
        band = b.band
        if band and (self.p.las_promote is not None or self.p.overdue_after_s is not None):
            band = self.band(self.s.queue.get(head[2]))  # type: ignore[arg-type]
        return (-b.priority, band, share, head[0], head[1])

    def _share(self, tenant: str) -> float:
        """The tenant's share, cached for the cycle and dropped whenever its usage changes."""
        share = self._shares.get(tenant)
        if share is None:
            share = self._shares[tenant] = self.s.tenant_share(tenant, self.usage.get(tenant, {}))
        return share

    def band(self, job: JobRequest) -> int:
        """Service band now: Tiresias-style promotion back to band 0 after waiting ``las_promote`` times
        its run time per card since it was last queued, or once overdue (``overdue_after_s`` queued in all).

        ``las_promote_max_wait_s``, when set, caps the first wait.
        """
        band = self.s.band_of(job)
        factor = self.p.las_promote
        if band and factor is not None:
            due = factor * job.attained_gpu_s / max(job.gpus, 1.0)
            cap = self.p.las_promote_max_wait_s
            if self.now - job.queued_at >= (due if cap is None else min(due, cap)):
                return 0
        if band and self.p.overdue_after_s is not None and self._overdue(job):
            return 0
        return band

    def run(self) -> Cycle:
        try:
            if self.p.reserve and self.reservation is None:
                self._reserve_for_oldest()
            self._loop()
            if self.truncated:
                # Jobs not examined may need what is idle, and the oldest blocked one may be among them:
                # growing elastic jobs and picking a holder wait for a cycle that reaches the end.
                return Cycle(self.decisions, self.waits, complete=False)
            self._grow()  # elastic jobs take idle capacity nobody waiting can use (policy/resize.py)
            blocked = [j for j in self.blocked if worth_reserving(j) and self._overdue(j)]
            if self.p.reserve and self.reservation is None and blocked:
                oldest = min(blocked, key=self._reserve_order)
                self.reservation = Reserve(oldest.id, claim(self.s.ledger, oldest), self.now)
                self.decisions.append(self.reservation)
        finally:
            self.co.rollback()
        return Cycle(self.decisions, self.waits)

    def _loop(self) -> None:
        # A holder that waited longest in all may sit behind younger jobs of its own bucket, which
        # a blocked head would hide: it goes first (its claim is the point of holding it).
        early = None
        if self.p.overdue_after_s is not None and self.reservation is not None \
                and self.reservation.job_id is not None \
                and not self.s.queue.is_head(self.reservation.job_id):
            early = self.s.queue.get(self.reservation.job_id)
            if early is not None:
                self._try(early)
        heap: list[tuple[tuple, int, Bucket, int]] = []
        for i, b in enumerate(self.s.queue.buckets()):
            heap.append((self.key(b, b.entries[0]), i, b, 0))
        heapq.heapify(heap)
        scanned = 0
        budget = self.p.cycle_budget_s
        resume = self.s.resume_after if budget is not None else None
        last: tuple | None = None
        beyond = 0  # buckets examined past where the last cycle stopped (at least one before stopping again)
        # Within a cycle only the tenant's share in a key can change (band and age are fixed for an entry),
        # so a popped key is refreshed by its share alone, not recomputed.
        shared = not self.p.fifo and self.p.fair_share
        while heap:
            key, i, b, pos = heapq.heappop(heap)
            head = b.entries[pos]
            fresh = (key[0], key[1], self._share(b.tenant), key[3], key[4]) if shared else key
            if fresh > key:  # the tenant's share grew since this entry was pushed
                heapq.heappush(heap, (fresh, i, b, pos))
                continue
            if budget is not None:
                # Out of time, and this cycle changed something (an admission, or a bucket the last one
                # did not reach): stop. Each cycle so makes progress, and up to where the last one stopped
                # only admissions (in order) cost time, not re-examining what stays blocked.
                if (beyond or self.admitted) and self.clock() - self.started > budget:
                    heapq.heappush(heap, (fresh, i, b, pos))
                    self._stop(last if beyond else resume, heap)
                    return
                if resume is None or fresh > resume:
                    beyond += 1
            last = fresh
            scanned += 1
            if self.p.scan_limit is not None and scanned > self.p.scan_limit:
                return
            job = self.s.queue.get(head[2])
            assert job is not None
            if job is early:  # tried above; behind it, the same shape fits no better
                if pos + 1 < len(b.entries):
                    heapq.heappush(heap, (self.key(b, b.entries[pos + 1]), i, b, pos + 1))
                continue
            if self._hopeless(job):
                continue
            if self._try(job):
                if pos + 1 < len(b.entries):
                    heapq.heappush(heap, (self.key(b, b.entries[pos + 1]), i, b, pos + 1))
            elif not self.p.backfill and job.id not in self._quota_blocked:
                return
            elif self.explain:
                self._note_behind(b, pos)

    def _stop(self, reached: tuple | None, heap: list[tuple[tuple, int, Bucket, int]]) -> None:
        """Out of time: remember how far cycles got, and say why the jobs not reached wait (bucket heads)."""
        self.truncated = True
        self.s.resume_after = reached
        if self.explain:
            for _, _, b, pos in heap:
                self.waits.setdefault(b.entries[pos][2], "waiting its turn: the admission cycle reached its "
                                      "time budget before this job; the next cycle continues from here")

    def _hopeless(self, job: JobRequest) -> bool:
        """Simulator shortcut: no free accelerator, no preemption left, nothing to explain or reserve."""
        if self.explain or job.gpus <= 0 or self.preemption_attempts_left > 0:
            return False
        if self.p.reserve and self.reservation is None and worth_reserving(job) and self._overdue(job):
            return False  # it may be the one to take the reservation
        free = self.s.ledger.total_free
        for n in job.total:  # every bucket of a full cluster comes here: a loop, not a generator
            if n in CARD_RESOURCES and free.get(n, 0.0) > _EPS:
                return False
        return True

    def _note_behind(self, b: Bucket, pos: int) -> None:
        if pos + 1 < len(b.entries):
            head = b.entries[pos][2]
            for _, _, job_id in b.entries[pos + 1: pos + 4]:
                self.waits.setdefault(job_id, f"behind {head}, which needs the same resources")

    # one candidate
    def _try(self, job: JobRequest) -> bool:
        quota_reason = self._over_max(job)
        if quota_reason:
            # Only the tenant's own lower-priority jobs can make room under its max.
            if self.p.preempt and self._try_preempt(job, False, own_only=True):
                return True
            self._quota_blocked.add(job.id)
            self.waits[job.id] = quota_reason
            return False
        is_holder = self.reservation is not None and self.reservation.job_id == job.id
        # Same shape failed earlier in this cycle: nothing has been freed since, so skip the node scan.
        nodes = None if (not is_holder and job.shape in self.failed_shapes) else \
            self._place(job, honour_reservation=not is_holder)
        if nodes:
            self._admit(job, nodes, "admitted")
            return True
        if not is_holder:
            self.failed_shapes.add(job.shape)
        if self._try_shrink(job, is_holder):  # elastic jobs' extras go back before anyone is preempted
            self.failed_shapes.clear()
            return True
        if self._try_preempt(job, is_holder):
            self.failed_shapes.clear()  # victims may have freed more than the job took
            return True
        self.waits[job.id] = self._capacity_reason(job) if self.explain else "waiting for capacity"
        self.blocked.append(job)
        return False

    def _over_max(self, job: JobRequest) -> str | None:
        quota = self.s.tenants.get(job.tenant)
        if quota is None or quota.max is None:
            return None
        used = self.usage.get(job.tenant, {})
        for name, amount in job.total.items():
            cap = quota.max.get(name, 0.0)
            if used.get(name, 0.0) + amount > cap + _EPS:
                return (f"tenant {job.tenant!r} is at its max {name}: {format_amount(used.get(name, 0.0))} in use + "
                        f"{format_amount(amount)} asked > max {format_amount(cap)}; waits for the tenant's own jobs to finish")
        return None

    def _place(self, job: JobRequest, honour_reservation: bool) -> list[str] | None:
        reserved = self.reservation.nodes if (self.reservation and honour_reservation) else None
        free = self.s.ledger.total_free
        held = self._held(reserved) if reserved else None
        for name, amount in job.total.items():  # cheap whole-cluster check before scanning nodes
            if free.get(name, 0.0) - (held.get(name, 0.0) if held else 0.0) + _EPS < amount:
                return None
        nodes = self.s.ledger  # placement reads a large cluster through the ledger's free-capacity index
        if job.max_workers and job.max_workers > job.workers and self._max_allows(job, job.max_workers):
            # At its max only inside one domain: a preferred gang whose min fits one starts there, not spread.
            near = job.topology if job.topology is None or job.topology.required else \
                replace(job.topology, mode=REQUIRED)
            found = place(nodes, job.worker, job.max_workers, job.placement, reserved=reserved, near=near)
            if found:
                return found
        found = place(nodes, job.worker, job.workers, job.placement, reserved=reserved, near=job.topology)
        return place_roles(self.s.ledger, job, found, reserved, job.topology) if found and job.roles else found

    def _held(self, reserved: dict[str, dict[str, float]]) -> dict[str, float]:
        """``held_now`` of the reservation, recomputed only after the ledger changed (blocked jobs ask often)."""
        changes, memo = self.s.ledger.changes, self._held_memo
        if memo is None or memo[0] != changes or memo[1] is not reserved:
            memo = self._held_memo = (changes, reserved, held_now(self.s.ledger, reserved))
        return memo[2]

    def _max_allows(self, job: JobRequest, workers: int) -> bool:
        """Would ``workers`` copies of the worker keep the tenant within its max?"""
        quota = self.s.tenants.get(job.tenant)
        if quota is None or quota.max is None:
            return True
        used = self.usage.get(job.tenant, {})
        return all(used.get(n, 0.0) + a * workers <= quota.max.get(n, 0.0) + _EPS
                   for n, a in job.worker.resources.items())

    def _admit(self, job: JobRequest, nodes: list[str], reason: str) -> None:
        self.co.allocate(job, nodes)
        self.admitted += 1
        add_amounts(self.usage.setdefault(job.tenant, {}), job.total_for(len(nodes) - job.role_members), 1.0)
        self._shares.pop(job.tenant, None)
        holder = self.reservation is not None and self.reservation.job_id == job.id
        overdue = self.p.overdue_after_s is not None and self._overdue(job)
        self.decisions.append(Admit(job.id, tuple(nodes), reason, protected=holder or overdue))
        if self.reservation and self.reservation.job_id == job.id:
            self.reservation = None
            self.decisions.append(Reserve(None))

    def _capacity_reason(self, job: JobRequest) -> str:
        free = self.s.ledger.total_free
        parts = [f"{format_amount(a)} {n}" for n, a in job.total.items() if n != "memory"]
        have = ", ".join(f"{format_amount(max(free.get(n, 0.0), 0.0))} {n}" for n, _ in job.total.items() if n != "memory")
        roles = f" and {job.role_members} in roles" if job.roles else ""
        msg = f"waiting for capacity: gang of {job.workers}{roles} needs {', '.join(parts) or 'memory'}; free now {have or '-'}"
        if job.topology is not None:
            msg += near_reason(self.s.ledger, job)
        if self.reservation and self.reservation.job_id != job.id:
            msg += f"; capacity is held for {self.reservation.job_id}"
        return msg


def schedule(state: ClusterState, now: float, *, explain: bool = True,
             clock: Callable[[], float] = time.perf_counter) -> Cycle:
    """Run one admission cycle over ``state`` and return its decisions; ``state`` is left unchanged
    (but for ``resume_after``, where a cycle cut short by ``Policy.cycle_budget_s`` stopped).

    With ``explain`` off, waiting jobs get a short fixed reason (the simulator does not read them).
    ``clock`` times the budget.
    """
    cycle = AdmissionCycle(state, now, explain, clock)
    out = cycle.run()
    if out.complete and state.policy.cycle_budget_s is not None:
        state.resume_after = None
    return out


__all__ = ["Admit", "Preempt", "Reserve", "Resize", "Reject", "Cycle", "Decision", "RunningJob", "ClusterState", "schedule",
           "AdmissionCycle"]
