"""Preemption: which running jobs a waiting one may displace, cheapest to lose first.

A mixin of the admission cycle (:mod:`cuberay.platform.policy.admission`): it
works on the cycle's checkout of the ledger and its per-tenant usage, so every
tentative release is undone when the preemption does not pay off.

Two reasons let a job displace others: *reclaim* (its tenant is below its
guarantee and takes capacity back from tenants borrowing above theirs, never
taking a borrower below its own guarantee; under LAS with ``reclaim_first_band_only``, only
a first-band job reclaims) and *outranking* (higher priority,
or an earlier least-attained-service band, after the victim ran at least
``min_run_before_preempt_s``). Victims are ordered lowest priority, later
band, no bigger than needed, then least work lost, newest (or, under LAS with
``las_victims_most_attained``, most attained service first).
"""

from __future__ import annotations

import heapq
from typing import Iterable

from cuberay.platform.policy.cluster_state import RunningJob, add_amounts
from cuberay.platform.policy.decisions import Preempt
from cuberay.platform.policy.nodes import FitCounter
from cuberay.platform.policy.placement import Placement
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.topology import CUBERAY
from cuberay.platform.policy.victim_order import indexed_victims
from cuberay.platform.spec.resources import CARD_RESOURCES

EPS = 1e-9
DOMAINS_TRIED = 8  # a gang with a locality looks for victims in this many domains at most (first-touched first)


class Preemption:
    """The preemption half of the admission cycle; the cycle supplies state, placement and admit."""

    # The cycle provides: s (ClusterState), p (Policy), now, co (ledger checkout), usage, _shares, preempted,
    # decisions, preemption_attempts_left, failed_preemptions, _lowest, and band/_place/_admit/_over_max.

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
        """Release victims in order until the job fits (and is within its max); undo and return [] if never.

        A gang with a (cuberay) locality takes its victims from one domain of its level, the one whose
        victims come first in the order; a preferred one falls back to the whole order.
        """
        if job.topology is not None and job.topology.algorithm == CUBERAY:
            chosen = self._release_in_one_domain(job, is_holder, own_only)
            if chosen or job.topology.required:
                return chosen
        contended = _contended(job)
        chosen: list[RunningJob] = []
        slots = [FitCounter(job.worker), *(FitCounter(role.worker) for role in job.roles)]
        nodes = self.s.ledger.nodes
        for run in self._victims(job, contended, own_only):
            if run.job.tenant != job.tenant and not self._still_at_guarantee(run, contended):
                continue  # usage moved while we released others
            self._release(run)
            chosen.append(run)
            # A full placement scan only when this victim left room for a member on one of its nodes.
            if not any(slot(nodes[n]) for n in set(run.allocation.node_ids) if n in nodes for slot in slots):
                continue
            if self._over_max(job) is None:
                placed = self._place(job, honour_reservation=not is_holder)
                if placed:
                    self._placed = placed
                    return chosen
        for run in reversed(chosen):
            self._restore(run)
        return []

    def _release_in_one_domain(self, job: JobRequest, is_holder: bool, own_only: bool) -> list[RunningJob]:
        topo, nodes = self.s.ledger.topology, self.s.ledger.nodes
        depth = topo.depth(job.topology.level)  # type: ignore[union-attr]
        if depth is None:
            return []
        contended = _contended(job)
        order = list(self._victims(job, contended, own_only))
        touching: dict[tuple, list[int]] = {}
        for i, run in enumerate(order):
            for key in {topo.key(nodes[n], depth) for n in run.allocation.node_ids if n in nodes} - {None}:
                touching.setdefault(key, []).append(i)
        best: tuple[tuple[int, int], list[RunningJob], list[str]] | None = None
        for key in sorted(touching, key=lambda k: (touching[k][0], k))[:DOMAINS_TRIED]:
            chosen: list[RunningJob] = []
            for i in touching[key]:
                run = order[i]
                if best is not None and i >= best[0][0]:
                    break  # this domain already needs a victim later in the order than the best one's last
                if run.job.tenant != job.tenant and not self._still_at_guarantee(run, contended):
                    continue
                self._release(run)
                chosen.append(run)
                placed = self._place(job, honour_reservation=not is_holder) if self._over_max(job) is None else None
                if placed:
                    best = ((i, len(chosen)), list(chosen), placed)
                    break
            for run in reversed(chosen):
                self._restore(run)
        if best is None:
            return []
        for run in best[1]:
            self._release(run)
        self._placed = best[2]
        return best[1]

    def _keep_needed(self, job: JobRequest, chosen: list[RunningJob], is_holder: bool) -> list[RunningJob]:
        """Give back victims the job turned out not to need (last chosen first)."""
        if len(chosen) < 2:
            return chosen
        needed = []
        # Taking back a victim that shares no node with a placement found since changes none of that
        # placement's nodes, so the job still fits and placement would say so (it finds a gang whenever one
        # fits, but for strict_pack on an indexed cluster): no need to place again. Quota is still checked.
        # Not with roles: a victim taken back can move the workers' placement and leave a role no room.
        complete = not job.roles and job.placement.resolve(job.worker) is not Placement.STRICT_PACK
        placed = set(self._placed)
        for run in reversed(chosen[:-1]):
            self._restore(run)
            if self._over_max(job) is not None:
                self._release(run)
                needed.append(run)
                continue
            if complete and placed.isdisjoint(run.allocation.node_ids):
                continue
            again = self._place(job, honour_reservation=not is_holder)
            if again is None:
                self._release(run)
                needed.append(run)
            else:
                placed = set(again)
        return [chosen[-1], *needed]

    def _release(self, run: RunningJob) -> None:
        self.co.release(run.job.id)
        add_amounts(self.usage.setdefault(run.job.tenant, {}), run.allocation.total, -1.0)
        self._shares.pop(run.job.tenant, None)

    def _restore(self, run: RunningJob) -> None:
        self.s.ledger.restore(run.allocation)
        self.co._undo.append(("release", run.job.id))
        add_amounts(self.usage.setdefault(run.job.tenant, {}), run.allocation.total, 1.0)
        self._shares.pop(run.job.tenant, None)

    def _victims(self, job: JobRequest, contended: tuple[str, ...], own_only: bool = False) -> Iterable[RunningJob]:
        """Running jobs this job may preempt, cheapest to lose first; [] when they cannot free enough."""
        within = self.p.reclaim and not own_only and self._within_guarantee(job, contended)
        if within and self.p.reclaim_first_band_only and self.p.las_threshold_gpu_s is not None \
                and self.band(job) != 0:
            # A long job waiting for its tenant's guarantee evicts no borrower: it waits for capacity to
            # free (or for promotion back to band 0); the tenant's new, short jobs still reclaim at once.
            within = False
        can_outrank = self.p.preempt and ((self.p.las_threshold_gpu_s is not None and self.p.las_preempt)
                                          or job.priority > self._lowest_running())
        if not within and not can_outrank:
            return []
        if within and not can_outrank and not self._reclaimable_enough(job, contended):
            return []
        las_first_band = self.p.las_threshold_gpu_s is not None and self.p.las_preempt and self.band(job) == 0
        if job.gpus > 0 and not job.roles and self.p.las_victims_most_attained and self.p.las_threshold_gpu_s is not None:
            # The default order (most attained first) is kept across cycles: read from the index, not scanned.
            indexed = indexed_victims(self, job, contended, own_only, within, can_outrank, las_first_band)
            if indexed is not None:
                return indexed
        groups: dict[tuple, list[tuple[int, RunningJob]]] = {}
        found, need = 0, job.gpus
        single = contended[0] if len(contended) == 1 else None
        now, min_run, preempted = self.now, self.p.min_run_before_preempt_s, self.preempted
        prio = job.priority
        cards = job.gpus > 0 and not job.roles  # then the contended resources are the accelerator cards
        freed = [0.0] * len(contended)  # what the candidates hold of each contended resource
        for tenant, runs in self.s.running_by_tenant.items():
            same = tenant == job.tenant
            if not same and (own_only or not self._borrowing(tenant, contended)):
                continue
            must_outrank = same or not within  # a reclaim from a borrower needs no outranking
            if must_outrank and (not can_outrank or (not las_first_band and prio <= self._lowest_running())):
                continue  # (outranking without the first LAS band needs a lower priority: none runs)
            # Another tenant's job that would take it below its guarantee now never qualifies later in this
            # attempt either (releasing victims only lowers usage): left out here, not skipped one by one.
            floor = () if same else self._guarantee_floor(tenant, contended)
            one = floor[0] if len(floor) == 1 else None
            # The scheduler's widest loop (every running job of these tenants): tests inlined, cheapest first.
            for r in runs.values():
                rj = r.job
                if must_outrank:
                    rp = rj.priority
                    if not (prio > rp or (prio == rp and las_first_band and now >= r.band_flip and not r.protected)):
                        continue
                    if now - r.start_time < min_run:
                        continue
                if rj.id in preempted:
                    continue
                total = r.allocation.total
                if not same and not (rj.gpus > 0 if cards else any(total.get(n, 0.0) > 0 for n in contended)):
                    continue
                if one is not None:  # one contended resource (the cards): _above inlined
                    amount = total.get(one[0], 0.0)
                    if amount > 0 and one[1] - amount < one[2]:
                        continue
                elif floor and not _above(total, floor):
                    continue
                # Cheapest first: lowest priority, later service band, no bigger than the need (preempting a
                # 16-GPU job to start a 1-GPU one wastes the other 15), least work lost, newest. Lazily
                # ordered: most jobs need one or two victims, so candidates are grouped by the cheap leading
                # keys and only the groups reached are ordered by work lost (the same order as sorting all).
                g = rj.gpus
                group = (rj.priority, now < r.band_flip, g - need if g > need else 0.0)
                members = groups.get(group)
                if members is None:
                    members = groups[group] = []
                members.append((found, r))
                found += 1
                if single is not None:
                    freed[0] += total.get(single, 0.0)
                else:
                    for k, n in enumerate(contended):
                        freed[k] += total.get(n, 0.0)
        if not found:
            return []
        free = self.s.ledger.total_free
        for k, n in enumerate(contended):
            if free.get(n, 0.0) + freed[k] + EPS < job.total.get(n, 0.0):
                return []
        most_attained = self.p.las_victims_most_attained and self.p.las_threshold_gpu_s is not None
        return self._in_order(groups, most_attained)

    def _in_order(self, groups: dict[tuple, list[tuple[int, RunningJob]]], most_attained: bool) -> Iterable[RunningJob]:
        now = self.now
        for key in sorted(groups):
            if most_attained:  # LAS order: the job that has had the most service goes first
                heap = [(-r.attained_at(now), -r.start_time, i, r) for i, r in groups[key]]
            else:
                heap = _by_work_lost(groups[key], now)
            heapq.heapify(heap)
            while heap:
                yield heapq.heappop(heap)[-1]

    def _lowest_running(self) -> int:
        if self._lowest is None:
            index = self.s.victims
            self._lowest = index.lowest_priority() if len(index) == len(self.s.running) else \
                min((r.job.priority for r in self.s.running.values()), default=1 << 30)
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
            if spare + EPS < job.total.get(n, 0.0):
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
        for n in contended:  # once per tenant and preemption attempt: a loop, not a generator
            if used.get(n, 0.0) > (quota.guaranteed.get(n, 0.0) if quota else 0.0) + EPS:
                return True
        return False

    def _within_guarantee(self, job: JobRequest, contended: tuple[str, ...]) -> bool:
        quota = self.s.tenants.get(job.tenant)
        if quota is None:
            return False
        used = self.usage.get(job.tenant, {})
        return all(used.get(n, 0.0) + job.total.get(n, 0.0) <= quota.guaranteed.get(n, 0.0) + EPS
                   for n in contended)

    def _guarantee_floor(self, tenant: str, contended: tuple[str, ...]) -> tuple[tuple[str, float, float], ...]:
        """(resource, usage, guarantee - EPS) of ``tenant``: the terms of ``_still_at_guarantee`` for its jobs."""
        quota = self.s.tenants.get(tenant)
        used = self.usage.get(tenant, {})
        return tuple((n, used.get(n, 0.0), (quota.guaranteed.get(n, 0.0) if quota else 0.0) - EPS) for n in contended)

    def _still_at_guarantee(self, run: RunningJob, contended: tuple[str, ...]) -> bool:
        """The victim's tenant must stay at or above its guarantee on the contended resources."""
        quota = self.s.tenants.get(run.job.tenant)
        used = self.usage.get(run.job.tenant, {})
        total = run.allocation.total
        for n in contended:
            amount = total.get(n, 0.0)
            if amount > 0 and used.get(n, 0.0) - amount < (quota.guaranteed.get(n, 0.0) if quota else 0.0) - EPS:
                return False
        return True

    def _victim_reason(self, job: JobRequest, run: RunningJob) -> str:
        if run.job.tenant != job.tenant and not self._outranks(job, run):
            return f"reclaimed: tenant {job.tenant!r} needs its guaranteed capacity back for {job.id}"
        if run.job.priority < job.priority:
            return f"preempted by higher-priority job {job.id} (priority {job.priority} > {run.job.priority})"
        return f"preempted by {job.id}, which has had less service (least-attained-service order)"


def _by_work_lost(members: list[tuple[int, RunningJob]], now: float) -> list[tuple]:
    """(``lost_work_at(now)``, -start, i, run) of each member: the same arithmetic, inlined (every candidate of
    the group reached is keyed, thousands on a large busy cluster)."""
    out = []
    for i, r in members:
        start, every = r.start_time, r.checkpoint_every_s
        ran = max(0.0, now - max(start, r.checkpoint_time or start))
        if every:
            ran = min(ran, max(0.0, now - start) % every)
        out.append((max(r.job.gpus, 1e-3) * ran, -start, i, r))
    return out


def _above(total, floor: tuple[tuple[str, float, float], ...]) -> bool:
    """``_still_at_guarantee`` with the tenant's terms prepared (the same comparisons)."""
    for n, used, limit in floor:
        amount = total.get(n, 0.0)
        if amount > 0 and used - amount < limit:
            return False
    return True


def _contended(job: JobRequest) -> tuple[str, ...]:
    """Resources a preemption must free for this job: its accelerators, else all it asks for. A gang with roles
    contends for all it asks for: its parameter servers' CPU nodes may be what holds it back, not the cards."""
    cards = () if job.roles else tuple(n for n in job.total if n in CARD_RESOURCES)
    return cards or tuple(job.total)
