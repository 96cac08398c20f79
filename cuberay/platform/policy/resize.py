"""Resizing running allocations: elastic jobs grow into idle capacity and give it back before anyone is preempted.

A mixin of the admission cycle (:mod:`cuberay.platform.policy.admission`), like
preemption: it works on the cycle's checkout of the ledger and its per-tenant
usage, and its decisions are :class:`Resize` values (the job's new full node
list) that executors apply with ``ClusterState.resize``.

A *resizable* job (``JobRequest.resizable``: elastic function-mode training, a
ServeApp's replicas) needs ``workers`` (its gang, the part it is guaranteed
while it runs) and can use up to ``max_workers``. Workers above ``workers`` are
*extras*: capacity lent while nobody else needs it.

- **Grow** (at the end of every cycle): a running resizable job below its max
  takes idle capacity one worker at a time while its tenant stays within its
  max, no job of its tenant waits, no job waiting for capacity this cycle asks
  for a resource the worker uses, and the capacity is not held by the
  reservation. Higher priority first, then the tenant with the smaller share,
  then the oldest job.
- **Shrink** (before any whole-job preemption): a job waiting for capacity
  takes extras back, never below a job's ``workers``: from its own tenant's
  jobs of no higher priority, from lower-priority jobs, and on reclaim (its
  tenant below its guarantee) from tenants borrowing above theirs, never taking
  such a tenant below its guarantee. Lowest priority and newest first, and only
  workers on nodes where the waiting job could run.
"""

from __future__ import annotations

from typing import Iterable

from cuberay.platform.policy.cluster_state import RunningJob, add_amounts
from cuberay.platform.policy.decisions import Resize
from cuberay.platform.policy.nodes import FitCounter, NodeState
from cuberay.platform.policy.placement import Placement, place
from cuberay.platform.policy.preemption import EPS, _contended
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.topology_admission import home_domain, in_domain


class Resizing:
    """The resize half of the admission cycle; the cycle supplies state, placement and admit."""

    # The cycle provides: s (ClusterState), p (Policy), co (ledger checkout), usage, _shares, preempted,
    # decisions, blocked, reservation, and _place/_admit/_share/_within_guarantee/_borrowing/_max_allows.

    # -- shrink -------------------------------------------------------------------------------
    def _try_shrink(self, job: JobRequest, is_holder: bool) -> bool:
        """Make room for ``job`` by taking extras back from elastic jobs; admit it and return True, or undo."""
        donors = self._donors(job)
        if not donors:
            return False
        contended = _contended(job)
        fits_job = FitCounter(job.worker, empty=True)
        selector = job.worker.node_selector()
        nodes = self.s.ledger.nodes
        mark, saved = len(self.co._undo), {t: dict(u) for t, u in self.usage.items()}
        shrunk: dict[str, list[str]] = {}
        for run, outranked in donors:
            current = list(self.s.ledger.allocations[run.job.id].node_ids)
            for i in reversed(range(len(current))):
                if len(current) <= run.job.workers:
                    break
                node = nodes.get(current[i])
                if node is None or (selector and not node.matches(selector)) or not fits_job(node):
                    continue  # this worker's node could never host the waiting job: keep it
                if not outranked and run.job.tenant != job.tenant and not self._keeps_guarantee(run, contended):
                    break
                current = current[:i] + current[i + 1:]
                self._tentative_resize(run, current)
                shrunk[run.job.id] = current
                nodes_for_job = self._place(job, honour_reservation=not is_holder)
                if nodes_for_job:
                    for job_id, new in shrunk.items():
                        self.decisions.append(Resize(job_id, tuple(new), self._shrink_reason(job, job_id)))
                        self.preempted.add(job_id)  # settled for this cycle: no victim, no growth
                    self._admit(job, nodes_for_job, f"admitted after shrinking {len(shrunk)} elastic job(s)")
                    return True
        self._undo_to(mark)
        self.usage.clear()
        self.usage.update(saved)
        self._shares.clear()
        return False

    def _donors(self, job: JobRequest) -> list[tuple[RunningJob, bool]]:
        """Running jobs whose extras ``job`` may take, cheapest first, each with whether ``job`` outranks it."""
        if not self.s.elastic:
            return []
        contended = _contended(job)
        within = self.p.reclaim and self._within_guarantee(job, contended)
        out = []
        for run in self.s.elastic.values():
            alloc = self.s.ledger.allocations.get(run.job.id)
            if run.job.id in self.preempted or alloc is None or len(alloc.slots) <= run.job.workers:
                continue
            outranks = self.p.preempt and job.priority > run.job.priority
            if run.job.tenant == job.tenant:
                allowed = job.priority >= run.job.priority
            else:
                allowed = outranks or (within and self._borrowing(run.job.tenant, contended))
            if allowed:
                out.append((run, outranks))
        out.sort(key=lambda ro: (ro[0].job.priority, -ro[0].start_time, ro[0].job.id))
        return out

    def _keeps_guarantee(self, run: RunningJob, contended: tuple[str, ...]) -> bool:
        """Would the donor's tenant stay at or above its guarantee without one more worker?"""
        quota = self.s.tenants.get(run.job.tenant)
        used = self.usage.get(run.job.tenant, {})
        for n in contended:
            amount = run.job.worker.resources.get(n, 0.0)
            if amount > 0 and used.get(n, 0.0) - amount < (quota.guaranteed.get(n, 0.0) if quota else 0.0) - EPS:
                return False
        return True

    def _shrink_reason(self, job: JobRequest, donor_id: str) -> str:
        donor = self.s.running[donor_id].job
        if donor.tenant != job.tenant and job.priority <= donor.priority:
            return f"reclaimed: tenant {job.tenant!r} needs its guaranteed capacity back for {job.id}"
        if job.priority > donor.priority:
            return f"shrunk for higher-priority job {job.id} (priority {job.priority} > {donor.priority})"
        return f"shrunk for {job.id} of the same tenant: workers above the minimum are lent only while nobody waits"

    # -- grow ---------------------------------------------------------------------------------
    def _grow(self) -> None:
        """Give running elastic jobs idle capacity nobody waiting could use (see the module doc)."""
        if not self.s.elastic:
            return
        busy: set[str] = set()
        for job in self.blocked:
            busy.update(_contended(job))
        waiting = {b.tenant for b in self.s.queue.buckets()}
        reserved = self.reservation.nodes if self.reservation else None
        candidates = [r for r in self.s.elastic.values()
                      if r.job.id not in self.preempted and r.job.tenant not in waiting and r.job.max_workers
                      and not busy.intersection(n for n, a in r.job.worker.resources.items() if a > 0)]
        candidates.sort(key=lambda r: (-r.job.priority, self._share(r.job.tenant), r.start_time, r.job.id))
        for run in candidates:
            alloc = self.s.ledger.allocations.get(run.job.id)
            if alloc is None:
                continue
            before = list(alloc.node_ids)
            current = list(before)
            while len(current) < run.job.max_workers and self._max_allows(run.job, 1):  # type: ignore[operator]
                node_id = self._one_more(run.job, current, reserved)
                if node_id is None:
                    break
                current.append(node_id)
                self._tentative_resize(run, current)
            if len(current) > len(before):
                self.decisions.append(Resize(run.job.id, tuple(current), f"grew into idle capacity: "
                                             f"{len(before)} -> {len(current)} workers (max {run.job.max_workers})"))

    def _one_more(self, job: JobRequest, current: list[str], reserved) -> str | None:
        """A node for one more worker under the job's placement: its own nodes first when it packs."""
        policy = job.placement.resolve(job.worker)
        nodes = self.s.ledger.nodes
        mine = [nodes[n] for n in dict.fromkeys(current) if n in nodes]
        if policy is Placement.STRICT_SPREAD:
            pool: Iterable[NodeState] = [n for n in nodes.values() if n.id not in set(current)]
            tries = [(pool, Placement.SPREAD)]
        elif policy is Placement.STRICT_PACK:
            tries = [(mine, Placement.PACK)]
        elif policy is Placement.PACK:
            tries = [(mine, Placement.PACK), (nodes.values(), Placement.PACK)]
        else:
            tries = [(nodes.values(), policy)]
        if job.topology is not None:  # grow inside the domain its workers are in (required: only there)
            home = home_domain(self.s.ledger, job, current)
            keep = {n.id for n in in_domain(self.s.ledger, job, home)} if home is not None else set()
            near = [([n for n in pool if n.id in keep], how) for pool, how in tries]
            tries = near if job.topology.required else near + tries
        for pool, how in tries:
            found = place(pool, job.worker, 1, how, reserved=reserved)
            if found:
                return found[0]
        return None

    # -- tentative changes --------------------------------------------------------------------
    def _tentative_resize(self, run: RunningJob, node_ids: list[str]) -> None:
        """Resize on the cycle's checkout (undone with the rest of the cycle) and move the tenant's usage."""
        before = self.s.ledger.allocations[run.job.id]
        after = self.s.ledger.resize(run.job.id, node_ids)
        self.co._undo.append(("restore", before))
        self.co._undo.append(("release", run.job.id))  # undo pops this first: release the new, restore the old
        usage = self.usage.setdefault(run.job.tenant, {})
        add_amounts(usage, before.total, -1.0)
        add_amounts(usage, after.total, 1.0)
        self._shares.pop(run.job.tenant, None)

    def _undo_to(self, mark: int) -> None:
        """Undo the checkout's changes made after ``mark`` (a failed shrink), keeping earlier ones."""
        undo = self.co._undo
        while len(undo) > mark:
            op, arg = undo.pop()
            if op == "release":
                self.s.ledger.release(arg)
            else:
                self.s.ledger.restore(arg)
