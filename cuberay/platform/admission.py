"""Admission: queue order, quotas, borrow/reclaim, priority, backfill, preemption.

``schedule(state, now)`` is a pure function of a :class:`ClusterState`
snapshot: it works on a checkout of the ledger, undoes every tentative change
before returning, and hands back decision values (Admit, Preempt, Reserve) plus
the reason each examined job waits. Executors (the live controller, the
simulator) apply the decisions with :meth:`ClusterState.apply` and do the side
effects (Ray placement groups, Ray Jobs, simulated finish events).

Order: priority, then service band (least attained service first, Tiresias
style, when ``las_threshold_gpu_s`` is set; a job that waited as long as it
ran is promoted back), then the tenant's dominant share of its guarantee
(DRF), then age. Quotas: a tenant may use idle capacity up to its ``max``; a
tenant below its guarantee reclaims by preempting borrowers (lowest priority,
later band, no bigger than needed, least work lost, newest first), never taking
a borrower below its own guarantee. Starvation: the oldest waiting gang that
cannot start holds a reservation that claims free capacity as it frees;
backfilled jobs may not use it, and once started it is not an LAS victim.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Union

from cuberay.platform.ledger import Allocation, FitCounter, Ledger
from cuberay.platform.placement import Placement, place, score_key, why_not
from cuberay.platform.queue import Bucket, JobQueue, JobRequest
from cuberay.platform.resources import CARD_RESOURCES, Resources, WorkerRequest, format_resources
from cuberay.platform.scheduling import Policy, TenantQuota

_EPS = 1e-9


# -- decisions -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Admit:
    job_id: str
    node_ids: tuple[str, ...]
    reason: str = "admitted"
    protected: bool = False  # admitted as overdue or as the reservation holder: no LAS preemption


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str
    by: str
    reason: str


@dataclass(frozen=True, slots=True)
class Reserve:
    """Hold capacity for a blocked job (``job_id`` None clears the reservation)."""

    job_id: str | None
    nodes: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    at: float = 0.0  # when the nodes were picked


Decision = Union[Admit, Preempt, Reserve]


@dataclass(frozen=True, slots=True)
class Reject:
    job_id: str
    reason: str


@dataclass(slots=True)
class Cycle:
    decisions: list[Decision]
    waits: dict[str, str]

    @property
    def admitted(self) -> list[Admit]:
        return [d for d in self.decisions if isinstance(d, Admit)]

    @property
    def preempted(self) -> list[Preempt]:
        return [d for d in self.decisions if isinstance(d, Preempt)]


@dataclass(slots=True)
class RunningJob:
    job: JobRequest
    allocation: Allocation
    start_time: float
    checkpoint_time: float | None = None     # last checkpoint the job reported
    checkpoint_every_s: float | None = None  # or: it checkpoints periodically from start_time
    band_flip: float = float("inf")          # when its attained service crosses the LAS threshold
    protected: bool = False                  # not a least-attained-service victim (it waited too long)

    def attained_at(self, now: float) -> float:
        return self.job.attained_gpu_s + self.job.gpus * max(0.0, now - self.start_time)

    def lost_work_at(self, now: float) -> float:
        """GPU-seconds a preemption now would throw away (since the last checkpoint or start)."""
        ran = max(0.0, now - max(self.start_time, self.checkpoint_time or self.start_time))
        if self.checkpoint_every_s:
            ran = min(ran, max(0.0, now - self.start_time) % self.checkpoint_every_s)
        return max(self.job.gpus, 1e-3) * ran


# -- state ---------------------------------------------------------------------------

class ClusterState:
    """Everything admission looks at: ledger, tenants, queue, running jobs, reservation."""

    def __init__(self, ledger: Ledger, tenants: Mapping[str, TenantQuota], policy: Policy | None = None) -> None:
        self.ledger = ledger
        self.tenants = dict(tenants)
        self.policy = policy or Policy()
        self.queue = JobQueue(self.band_of)
        self.running: dict[str, RunningJob] = {}
        self.running_by_tenant: dict[str, dict[str, RunningJob]] = {}
        self.usage: dict[str, dict[str, float]] = {t: {} for t in self.tenants}
        self.reservation: Reserve | None = None
        self._fit_cache: dict[object, bool] = {}
        self._fit_cache_version = -1

    def band_of(self, job: JobRequest) -> int:
        threshold = self.policy.las_threshold_gpu_s
        return int(threshold is not None and job.attained_gpu_s >= threshold)

    # -- submission ------------------------------------------------------------
    def check(self, job: JobRequest) -> str | None:
        """Why ``job`` can never run here (unknown tenant, over its max, larger than the cluster), or None."""
        quota = self.tenants.get(job.tenant)
        if quota is None:
            known = ", ".join(sorted(self.tenants)) or "none"
            return f"unknown tenant {job.tenant!r}; known tenants: {known}. Set metadata.tenant or --tenant"
        if quota.max is not None:
            over = job.total.exceeding(quota.max)
            if over:
                name, (asked, cap) = next(iter(over.items()))
                per = job.worker.resources.get(name, 0.0)
                return (f"tenant {job.tenant!r} max {name} is {_n(cap)}; job asks {job.workers} x {_n(per)} = "
                        f"{_n(asked)}. Lower workers or ask an admin to raise "
                        f"tenants.{job.tenant}.quota.max.{_user_name(name)}")
        if not self._could_ever_place(job):
            return why_not(self.ledger.nodes.values(), job.worker, job.workers, job.placement)
        return None

    def _could_ever_place(self, job: JobRequest) -> bool:
        if self._fit_cache_version != self.ledger.version:
            self._fit_cache.clear()
            self._fit_cache_version = self.ledger.version
        hit = self._fit_cache.get(job.shape)
        if hit is None:
            placed = place(self.ledger.nodes.values(), job.worker, job.workers, job.placement, empty=True)
            hit = self._fit_cache[job.shape] = placed is not None
        return hit

    def submit(self, job: JobRequest) -> Reject | None:
        """Queue ``job``, or reject it at once with the reason if it can never run."""
        reason = self.check(job)
        if reason:
            return Reject(job.id, reason)
        self.queue.add(job)
        return None

    def cancel(self, job_id: str) -> JobRequest | RunningJob | None:
        if job_id in self.queue:
            return self.queue.remove(job_id)
        return self.finish(job_id)

    # -- applying decisions ------------------------------------------------------
    def apply(self, decisions: Iterable[Decision], now: float) -> None:
        """Bookkeeping for decisions: preemptions first (they free what admissions use)."""
        decisions = list(decisions)
        for d in decisions:
            if isinstance(d, Preempt):
                self.preempt(d.job_id, now)
        for d in decisions:
            if isinstance(d, Admit):
                self.start(d.job_id, d.node_ids, now, protected=d.protected)
            elif isinstance(d, Reserve):
                self.reservation = d if d.job_id else None

    def start(self, job_id: str, node_ids: Iterable[str], now: float, *, protected: bool = False) -> RunningJob:
        job = self.queue.remove(job_id)
        alloc = self.ledger.allocate(job.id, job.worker, node_ids)
        run = self.running[job.id] = RunningJob(job, alloc, now, protected=protected)
        self.set_band_flip(run)
        self.running_by_tenant.setdefault(job.tenant, {})[job.id] = run
        _add(self.usage.setdefault(job.tenant, {}), alloc.total, 1.0)
        if self.reservation and self.reservation.job_id == job_id:
            self.reservation = None
        return run

    def set_band_flip(self, run: RunningJob) -> None:
        """Precompute when a running job leaves the first service band (cheap checks in the cycle)."""
        t = self.policy.las_threshold_gpu_s
        if t is None:
            run.band_flip = float("inf")
        elif run.job.gpus <= 0:
            run.band_flip = float("inf") if run.job.attained_gpu_s < t else float("-inf")
        else:
            run.band_flip = run.start_time + (t - run.job.attained_gpu_s) / run.job.gpus

    def finish(self, job_id: str) -> RunningJob | None:
        run = self.running.pop(job_id, None)
        if run is not None:
            self.running_by_tenant.get(run.job.tenant, {}).pop(job_id, None)
            alloc = self.ledger.release(job_id)
            if alloc is not None:
                _add(self.usage.setdefault(run.job.tenant, {}), alloc.total, -1.0)
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


# -- the cycle -----------------------------------------------------------------------

class _Checkout:
    """Tentative ledger changes with an undo log, so a cycle leaves the state untouched."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._undo: list[tuple[str, object]] = []

    def allocate(self, job: JobRequest, node_ids: list[str]) -> None:
        self.ledger.allocate(job.id, job.worker, node_ids)
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


class _Cycle:
    """One admission pass. Kept as an object so each step is a short method."""

    def __init__(self, state: ClusterState, now: float) -> None:
        self.s = state
        self.p = state.policy
        self.now = now
        self.co = _Checkout(state.ledger)
        self.usage = {t: dict(u) for t, u in state.usage.items()}
        self._shares: dict[str, float] = {}
        self.explain = True
        self.decisions: list[Decision] = []
        self.waits: dict[str, str] = {}
        self.preempted: set[str] = set()
        self.failed_shapes: set[object] = set()
        self.blocked: list[JobRequest] = []  # capacity-blocked jobs seen this cycle
        self.preemption_attempts_left = self.p.max_preemptions_per_cycle
        self.failed_preemptions: set[tuple] = set()
        self._lowest: int | None = None
        self.reservation = self._refresh_reservation(state.reservation)

    def _refresh_reservation(self, res: Reserve | None) -> Reserve | None:
        """Keep the holder; re-claim the capacity that is free now (see ``_reservation_nodes``)."""
        holder = self.s.queue.get(res.job_id) if res and res.job_id else None
        if holder is None:
            if res is not None:
                self.decisions.append(Reserve(None))
            return None
        nodes = _reservation_nodes(self.s.ledger, holder)
        if nodes != res.nodes:
            res = Reserve(holder.id, nodes, self.now)
            self.decisions.append(res)
        return res

    # ordering
    def key(self, b: Bucket, head: tuple[float, int, str]) -> tuple:
        if self.p.fifo:
            return (head[0], head[1])
        share = self._share(b.tenant) if self.p.fair_share else 0.0
        band = b.band
        if band and self.p.las_promote is not None:
            band = self.band(self.s.queue.get(head[2]))  # type: ignore[arg-type]
        return (-b.priority, band, share, head[0], head[1])

    def _share(self, tenant: str) -> float:
        """The tenant's share, cached for the cycle and dropped whenever its usage changes."""
        share = self._shares.get(tenant)
        if share is None:
            share = self._shares[tenant] = self.s.tenant_share(tenant, self.usage.get(tenant, {}))
        return share

    def band(self, job: JobRequest) -> int:
        """Service band now: Tiresias-style promotion back to band 0 after waiting as long as it ran.

        The wait is capped (``las_promote_max_wait_s``): a preempted week-long job must not wait a week.
        """
        band = self.s.band_of(job)
        factor = self.p.las_promote
        if band and factor is not None:
            ran = job.attained_gpu_s / max(job.gpus, 1.0)
            if self.now - job.queued_at >= min(factor * ran, self.p.las_promote_max_wait_s):
                return 0
        return band

    def run(self) -> Cycle:
        try:
            if self.p.reserve and self.reservation is None:
                self._reserve_for_oldest()
            self._loop()
            blocked = [j for j in self.blocked if _worth_reserving(j)]
            if self.p.reserve and self.reservation is None and blocked:
                oldest = min(blocked, key=lambda j: (-j.priority, j.submit_time, j.seq))
                self.reservation = Reserve(oldest.id, _reservation_nodes(self.s.ledger, oldest), self.now)
                self.decisions.append(self.reservation)
        finally:
            self.co.rollback()
        return Cycle(self.decisions, self.waits)

    def _loop(self) -> None:
        heap: list[tuple[tuple, int, Bucket, int]] = []
        for i, b in enumerate(self.s.queue.buckets()):
            heap.append((self.key(b, b.entries[0]), i, b, 0))
        heapq.heapify(heap)
        scanned = 0
        while heap:
            key, i, b, pos = heapq.heappop(heap)
            head = b.entries[pos]
            fresh = self.key(b, head)
            if fresh > key:  # the tenant's share grew since this entry was pushed
                heapq.heappush(heap, (fresh, i, b, pos))
                continue
            scanned += 1
            if self.p.scan_limit is not None and scanned > self.p.scan_limit:
                return
            job = self.s.queue.get(head[2])
            assert job is not None
            if self._hopeless(job):
                continue
            if self._try(job):
                if pos + 1 < len(b.entries):
                    heapq.heappush(heap, (self.key(b, b.entries[pos + 1]), i, b, pos + 1))
            elif not self.p.backfill and job.id not in self._quota_blocked:
                return
            elif self.explain:
                self._note_behind(b, pos)

    _quota_blocked: set[str]

    def _hopeless(self, job: JobRequest) -> bool:
        """Simulator shortcut: no free accelerator, no preemption left, nothing to explain or reserve."""
        if self.explain or job.gpus <= 0 or self.preemption_attempts_left > 0:
            return False
        if self.p.reserve and self.reservation is None:
            return False
        free = self.s.ledger.total_free
        return all(free.get(n, 0.0) <= _EPS for n in job.total if n in CARD_RESOURCES)

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
                return (f"tenant {job.tenant!r} is at its max {name}: {_n(used.get(name, 0.0))} in use + "
                        f"{_n(amount)} asked > max {_n(cap)}; waits for the tenant's own jobs to finish")
        return None

    def _place(self, job: JobRequest, honour_reservation: bool) -> list[str] | None:
        reserved = self.reservation.nodes if (self.reservation and honour_reservation) else None
        free = self.s.ledger.total_free
        held = _held_now(self.s.ledger, reserved) if reserved else None
        for name, amount in job.total.items():  # cheap whole-cluster check before scanning nodes
            if free.get(name, 0.0) - (held.get(name, 0.0) if held else 0.0) + _EPS < amount:
                return None
        nodes = self.s.ledger.nodes.values()
        if job.max_workers and job.max_workers > job.workers and self._max_allows(job, job.max_workers):
            found = place(nodes, job.worker, job.max_workers, job.placement, reserved=reserved)
            if found:
                return found
        return place(nodes, job.worker, job.workers, job.placement, reserved=reserved)

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
        _add(self.usage.setdefault(job.tenant, {}), job.worker.resources * len(nodes), 1.0)
        self._shares.pop(job.tenant, None)
        holder = self.reservation is not None and self.reservation.job_id == job.id
        self.decisions.append(Admit(job.id, tuple(nodes), reason, protected=holder))
        if self.reservation and self.reservation.job_id == job.id:
            self.reservation = None
            self.decisions.append(Reserve(None))

    def _capacity_reason(self, job: JobRequest) -> str:
        free = self.s.ledger.total_free
        parts = [f"{_n(a)} {n}" for n, a in job.total.items() if n != "memory"]
        have = ", ".join(f"{_n(max(free.get(n, 0.0), 0.0))} {n}" for n, _ in job.total.items() if n != "memory")
        msg = f"waiting for capacity: gang of {job.workers} needs {', '.join(parts) or 'memory'}; free now {have or '-'}"
        if self.reservation and self.reservation.job_id != job.id:
            msg += f"; capacity is held for {self.reservation.job_id}"
        return msg

    # reservation (backfill without runtime estimates: hold capacity for one blocked job)
    def _reserve_for_oldest(self) -> None:
        """Give the reservation to the oldest waiting job of the highest priority, if it cannot start now.

        Queue order (service band, tenant share) decides who backfills; the
        reservation goes by age, so whatever the order favours, the job that has
        waited longest is always accumulating capacity and cannot starve. It is
        sticky until the holder starts or leaves the queue.
        """
        queue = self.s.queue
        heads = [(-b.priority, b.entries[0][0], b.entries[0][1], b.entries[0][2]) for b in queue.buckets()
                 if _worth_reserving(queue.get(b.entries[0][2]))]  # type: ignore[arg-type]
        if not heads:
            return
        job = queue.get(min(heads)[3])
        if job is None or self._over_max(job) or self._place(job, honour_reservation=False):
            return
        self.reservation = Reserve(job.id, _reservation_nodes(self.s.ledger, job), self.now)
        self.decisions.append(self.reservation)

    # preemption
    def _try_preempt(self, job: JobRequest, is_holder: bool, own_only: bool = False) -> bool:
        if self.preemption_attempts_left <= 0 or not (self.p.preempt or self.p.reclaim):
            return False
        memo = (job.tenant, job.shape, job.priority, self.band(job), own_only)
        if memo in self.failed_preemptions:
            return False
        self.preemption_attempts_left -= 1
        chosen = self._release_until_fits(job, is_holder, own_only)
        if not chosen:
            self.failed_preemptions.add(memo)
            return False
        chosen = self._keep_needed(job, chosen, is_holder)
        nodes = self._place(job, honour_reservation=not is_holder)
        assert nodes is not None
        for run in chosen:
            self.preempted.add(run.job.id)
            self.decisions.append(Preempt(run.job.id, job.id, self._victim_reason(job, run)))
        self._admit(job, nodes, f"admitted after preempting {len(chosen)} job(s)")
        return True

    def _release_until_fits(self, job: JobRequest, is_holder: bool, own_only: bool = False) -> list[RunningJob]:
        """Release victims in order until the job fits (and is within its max); undo and return [] if never."""
        contended = _contended(job)
        chosen: list[RunningJob] = []
        slot = FitCounter(job.worker)
        nodes = self.s.ledger.nodes
        for run in self._victims(job, contended, own_only):
            if run.job.tenant != job.tenant and not self._still_at_guarantee(run, contended):
                continue  # usage moved while we released others
            self._release(run)
            chosen.append(run)
            # A full placement scan only when this victim left room for a worker on one of its nodes.
            if not any(slot(nodes[n]) for n in set(run.allocation.node_ids) if n in nodes):
                continue
            if self._over_max(job) is None and self._place(job, honour_reservation=not is_holder):
                return chosen
        for run in reversed(chosen):
            self._restore(run)
        return []

    def _keep_needed(self, job: JobRequest, chosen: list[RunningJob], is_holder: bool) -> list[RunningJob]:
        """Give back victims the job turned out not to need (last chosen first)."""
        if len(chosen) < 2:
            return chosen
        needed = []
        for run in reversed(chosen[:-1]):
            self._restore(run)
            if self._over_max(job) is not None or self._place(job, honour_reservation=not is_holder) is None:
                self._release(run)
                needed.append(run)
        return [chosen[-1], *needed]

    def _release(self, run: RunningJob) -> None:
        self.co.release(run.job.id)
        _add(self.usage.setdefault(run.job.tenant, {}), run.allocation.total, -1.0)
        self._shares.pop(run.job.tenant, None)

    def _restore(self, run: RunningJob) -> None:
        self.s.ledger.restore(run.allocation)
        self.co._undo.append(("release", run.job.id))
        _add(self.usage.setdefault(run.job.tenant, {}), run.allocation.total, 1.0)
        self._shares.pop(run.job.tenant, None)

    def _victims(self, job: JobRequest, contended: tuple[str, ...], own_only: bool = False) -> Iterable[RunningJob]:
        """Running jobs this job may preempt, cheapest to lose first; [] when they cannot free enough."""
        within = self.p.reclaim and not own_only and self._within_guarantee(job, contended)
        can_outrank = self.p.preempt and ((self.p.las_threshold_gpu_s is not None and self.p.las_preempt)
                                          or job.priority > self._lowest_running())
        if not within and not can_outrank:
            return []
        if within and not can_outrank and not self._reclaimable_enough(job, contended):
            return []
        out: list[RunningJob] = []
        now, min_run, preempted = self.now, self.p.min_run_before_preempt_s, self.preempted
        prio = job.priority
        las_first_band = self.p.las_threshold_gpu_s is not None and self.p.las_preempt and self.band(job) == 0
        cards = job.gpus > 0  # then the contended resources are the accelerator cards
        for tenant, runs in self.s.running_by_tenant.items():
            same = tenant == job.tenant
            if not same and (own_only or not self._borrowing(tenant, contended)):
                continue
            for r in runs.values():
                rp = r.job.priority
                outranks = can_outrank and (prio > rp or (
                    prio == rp and las_first_band and now >= r.band_flip and not r.protected)) \
                    and now - r.start_time >= min_run
                if (outranks if same else (within or outranks)) and r.job.id not in preempted:
                    if same or (r.job.gpus > 0 if cards else any(r.allocation.total.get(n, 0.0) > 0 for n in contended)):
                        out.append(r)
        if not out:
            return []
        free = self.s.ledger.total_free
        for n in contended:
            if free.get(n, 0.0) + sum(r.allocation.total.get(n, 0.0) for r in out) + _EPS < job.total.get(n, 0.0):
                return []
        now = self.now
        # Cheapest first: lowest priority, later service band, no bigger than the need (preempting a
        # 16-GPU job to start a 1-GPU one wastes the other 15), least work lost, newest. Lazily
        # ordered: most jobs need one or two victims, so a heap beats sorting every candidate.
        need = job.gpus
        heap = [(r.job.priority, now < r.band_flip, r.job.gpus - need if r.job.gpus > need else 0.0,
                 r.lost_work_at(now), -r.start_time, i, r) for i, r in enumerate(out)]
        heapq.heapify(heap)
        return (heapq.heappop(heap)[-1] for _ in range(len(heap)))

    def _lowest_running(self) -> int:
        if self._lowest is None:
            self._lowest = min((r.job.priority for r in self.s.running.values()), default=1 << 30)
        return self._lowest

    def _reclaimable_enough(self, job: JobRequest, contended: tuple[str, ...]) -> bool:
        """Free capacity plus what borrowers hold above their guarantees covers the job (cheap bound)."""
        free = self.s.ledger.total_free
        for n in contended:
            spare = free.get(n, 0.0)
            for tenant, used in self.usage.items():
                if tenant != job.tenant:
                    quota = self.s.tenants.get(tenant)
                    spare += max(0.0, used.get(n, 0.0) - (quota.guaranteed.get(n, 0.0) if quota else 0.0))
            if spare + _EPS < job.total.get(n, 0.0):
                return False
        return True

    def _outranks(self, job: JobRequest, run: RunningJob) -> bool:
        if job.priority != run.job.priority:
            return job.priority > run.job.priority
        return (self.p.las_threshold_gpu_s is not None and self.p.las_preempt and self.band(job) == 0
                and self.now >= run.band_flip and not run.protected)

    def _borrowing(self, tenant: str, contended: tuple[str, ...]) -> bool:
        quota = self.s.tenants.get(tenant)
        used = self.usage.get(tenant, {})
        return any(used.get(n, 0.0) > (quota.guaranteed.get(n, 0.0) if quota else 0.0) + _EPS for n in contended)

    def _within_guarantee(self, job: JobRequest, contended: tuple[str, ...]) -> bool:
        quota = self.s.tenants.get(job.tenant)
        if quota is None:
            return False
        used = self.usage.get(job.tenant, {})
        return all(used.get(n, 0.0) + job.total.get(n, 0.0) <= quota.guaranteed.get(n, 0.0) + _EPS
                   for n in contended)

    def _still_at_guarantee(self, run: RunningJob, contended: tuple[str, ...]) -> bool:
        """The victim's tenant must stay at or above its guarantee on the contended resources."""
        quota = self.s.tenants.get(run.job.tenant)
        used = self.usage.get(run.job.tenant, {})
        total = run.allocation.total
        for n in contended:
            amount = total.get(n, 0.0)
            if amount > 0 and used.get(n, 0.0) - amount < (quota.guaranteed.get(n, 0.0) if quota else 0.0) - _EPS:
                return False
        return True

    def _victim_reason(self, job: JobRequest, run: RunningJob) -> str:
        if run.job.tenant != job.tenant and not self._outranks(job, run):
            return f"reclaimed: tenant {job.tenant!r} needs its guaranteed capacity back for {job.id}"
        if run.job.priority < job.priority:
            return f"preempted by higher-priority job {job.id} (priority {job.priority} > {run.job.priority})"
        return f"preempted by {job.id}, which has had less service (least-attained-service order)"


def schedule(state: ClusterState, now: float, *, explain: bool = True) -> Cycle:
    """Run one admission cycle over ``state`` and return its decisions; ``state`` is left unchanged.

    With ``explain`` off, waiting jobs get a short fixed reason (the simulator does not read them).
    """
    cycle = _Cycle(state, now)
    cycle._quota_blocked = set()
    cycle.explain = explain
    return cycle.run()


def queue_order(state: ClusterState, now: float = 0.0) -> list[JobRequest]:
    """Every queued job in the order a cycle at ``now`` would consider them if each one started.

    Like the cycle, a tenant's share grows with each of its jobs taken, so
    tenants interleave (``cuberay queue`` shows the positions from this).
    """
    cycle = _Cycle(state, now)
    heap = [(cycle.key(b, b.entries[0]), i, b, 0) for i, b in enumerate(state.queue.buckets())]
    heapq.heapify(heap)
    out: list[JobRequest] = []
    while heap:
        key, i, b, pos = heapq.heappop(heap)
        fresh = cycle.key(b, b.entries[pos])
        if fresh > key:
            heapq.heappush(heap, (fresh, i, b, pos))
            continue
        job = state.queue.get(b.entries[pos][2])
        assert job is not None
        out.append(job)
        _add(cycle.usage.setdefault(job.tenant, {}), job.total, 1.0)
        cycle._shares.pop(job.tenant, None)
        if pos + 1 < len(b.entries):
            heapq.heappush(heap, (cycle.key(b, b.entries[pos + 1]), i, b, pos + 1))
    return out


# -- helpers -------------------------------------------------------------------------

def _hosts(ledger: Ledger, worker: WorkerRequest) -> list[tuple[str, int]]:
    """Nodes that could host ``worker`` when empty, with how many (static per node set, so cached)."""
    key = ("hosts", worker)
    hit = ledger.cache.get(key)
    if hit is None:
        selector = worker.node_selector()
        capacity = FitCounter(worker, empty=True)
        hit = ledger.cache[key] = [(n.id, k) for n in ledger.nodes.values()
                                   if n.alive and (not selector or n.matches(selector)) and (k := capacity(n)) > 0]
    return hit


def _worth_reserving(job: JobRequest) -> bool:
    """Only gangs and multi-card workers can be starved by backfill.

    A single worker of at most one card starts on the next slot that frees;
    holding capacity for it gains nothing, and a stream of such jobs would
    otherwise pass the reservation from one to the next while a big gang waits.
    """
    return job.workers > 1 or job.gpus > 1 or bool(job.max_workers and job.max_workers > 1)


def _reservation_nodes(ledger: Ledger, job: JobRequest) -> dict[str, dict[str, float]]:
    """Claim capacity for the reservation holder: its gang's share of the most-free nodes, as it frees.

    Nodes that could host workers are taken most-free first until they could
    host the whole gang; on each, the holder claims what is free now, up to its
    workers' needs there. Recomputed every cycle: without runtime estimates we
    cannot know which node drains first, but claimed capacity is never lost to
    backfill, so claims only grow and the holder starts once enough has freed.
    """
    keys = score_key(job.worker)
    nodes = ledger.nodes
    if len(keys) == 1:  # one accelerator resource: skip the generator in this per-cycle loop
        key = keys[0]
        candidates = [(-nodes[node_id].free.get(key, 0.0), node_id, k) for node_id, k in _hosts(ledger, job.worker)]
    else:
        candidates = [(-sum(nodes[node_id].free.get(key, 0.0) for key in keys), node_id, k)
                      for node_id, k in _hosts(ledger, job.worker)]
    candidates.sort()
    policy = job.placement.resolve(job.worker)
    if policy is Placement.STRICT_PACK:
        candidates = [c for c in candidates if c[2] >= job.workers][:1]
    per_node_cap = 1 if policy is Placement.STRICT_SPREAD else None
    held: dict[str, dict[str, float]] = {}
    left = job.workers
    for _, node_id, k in candidates:
        take = min(k, left, per_node_cap or k)
        free = ledger.nodes[node_id].free
        claim = {name: min(amount * take, max(free.get(name, 0.0), 0.0))
                 for name, amount in job.worker.resources.items()}
        if any(v > _EPS for v in claim.values()):
            held[node_id] = claim
        left -= take
        if left <= 0:
            break
    return held


def _contended(job: JobRequest) -> tuple[str, ...]:
    """Resources a preemption must free for this job: its accelerators, else all it asks for."""
    cards = tuple(n for n in job.total if n in CARD_RESOURCES)
    return cards or tuple(job.total)


def _held_now(ledger: Ledger, reserved: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Free capacity that a reservation keeps from other jobs right now (at most what is free)."""
    out: dict[str, float] = {}
    for node_id, amounts in reserved.items():
        node = ledger.nodes.get(node_id)
        if node is None:
            continue
        for k, v in amounts.items():
            out[k] = out.get(k, 0.0) + min(v, max(node.free.get(k, 0.0), 0.0))
    return out


def _add(usage: dict[str, float], amounts: Mapping[str, float], sign: float) -> None:
    for k, v in amounts.items():
        usage[k] = usage.get(k, 0.0) + sign * v


def _sum(vectors: Iterable[Resources]) -> Resources:
    out: dict[str, float] = {}
    for v in vectors:
        for k, a in v.items():
            out[k] = out.get(k, 0.0) + a
    return Resources(out)


def _n(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _user_name(ray_name: str) -> str:
    return {"CPU": "cpu", "GPU": "gpu", "memory": "memory", "rdma": "rdma"}.get(ray_name, ray_name)


__all__ = ["Admit", "Preempt", "Reserve", "Reject", "Cycle", "RunningJob", "ClusterState", "schedule",
           "queue_order", "format_resources"]
