"""The reservation that keeps big gangs from starving: who holds it and what it claims.

Backfill without runtime estimates: the oldest waiting gang holds a
reservation that claims free capacity as it frees; other jobs may not use it.
"""

from __future__ import annotations

import heapq
from typing import Mapping

from cuberay.platform.policy.decisions import Reserve
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.nodes import FitCounter, NodeState
from cuberay.platform.policy.placement import Placement, score_key
from cuberay.platform.policy.queue import JobRequest, RoleGroup
from cuberay.platform.policy.topology_admission import claim_domain
from cuberay.platform.spec.resources import WorkerRequest

_EPS = 1e-9


def hosts(ledger: Ledger, worker: WorkerRequest) -> list[tuple[NodeState, str, int]]:
    """Nodes that could host ``worker`` when empty, with their ids and how many (static per node set, so cached)."""
    key = ("hosts", worker)
    hit = ledger.cache.get(key)
    if hit is None:
        selector = worker.node_selector()
        capacity = FitCounter(worker, empty=True)
        hit = ledger.cache[key] = [(n, n.id, k) for n in ledger.nodes.values()
                                   if n.alive and (not selector or n.matches(selector)) and (k := capacity(n)) > 0]
    return hit


def worth_reserving(job: JobRequest) -> bool:
    """Only gangs and multi-card workers can be starved by backfill.

    A single worker of at most one card starts on the next slot that frees;
    holding capacity for it gains nothing, and a stream of such jobs would
    otherwise pass the reservation from one to the next while a big gang waits.
    """
    return job.workers > 1 or job.gpus > 1 or bool(job.max_workers and job.max_workers > 1) or bool(job.roles)


def spans_nodes(ledger: Ledger, job: JobRequest) -> bool:
    """Whether the gang needs more than one node: no node, even empty, could host all its workers (cached)."""
    key = ("spans", job.shape)
    hit = ledger.cache.get(key)
    if hit is None:
        policy = job.placement.resolve(job.worker)
        if job.roles:
            hit = True  # its roles go where they fit, by their own selectors: count it a multi-node gang
        elif policy is Placement.STRICT_SPREAD:
            hit = job.workers > 1
        elif policy is Placement.STRICT_PACK:
            hit = False
        else:
            hit = job.workers > max((k for _, _, k in hosts(ledger, job.worker)), default=0)
        ledger.cache[key] = hit
    return bool(hit)


def waited(job: JobRequest, now: float) -> float:
    """Seconds ``job`` has spent queued since submission, across preemptions.

    Its run time so far is its attained service per card, so the rest of its age is waiting
    (restart costs count as waiting: the job made no progress then).
    """
    ran = job.attained_gpu_s / job.gpus if job.gpus > 0 else 0.0
    return max(0.0, now - job.submit_time - ran)


def claim(ledger: Ledger, job: JobRequest,
          previous: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, dict[str, float]]:
    """Claim capacity for the reservation holder: its gang's share of the most-free nodes, as it frees.

    Nodes that could host workers are taken most-free first until they could
    host the whole gang; on each, the holder claims what is free now, up to its
    workers' needs there. Recomputed every cycle: without runtime estimates we
    cannot know which node drains first, but claimed capacity is never lost to
    backfill, so claims only grow and the holder starts once enough has freed.
    A gang with a locality claims inside one domain of its level (``previous``,
    the last claim, keeps it in the same one while that could hold the gang).
    """
    keys = score_key(job.worker)
    where = hosts(ledger, job.worker) if job.topology is None else claim_domain(ledger, job, hosts(ledger, job.worker),
                                                                                 previous)
    if len(keys) == 1:  # one accelerator resource: skip the generator in this per-cycle loop
        key = keys[0]
        candidates = [(-node.free.get(key, 0.0), node_id, k) for node, node_id, k in where]
    else:
        candidates = [(-sum(node.free.get(key, 0.0) for key in keys), node_id, k) for node, node_id, k in where]
    policy = job.placement.resolve(job.worker)
    if policy is Placement.STRICT_PACK:
        candidates = heapq.nsmallest(1, (c for c in candidates if c[2] >= job.workers))
    else:
        # Each node taken covers at least one worker, so at most ``workers`` of them are read: select
        # those instead of sorting every host (node ids are unique, so the order is total and the same).
        candidates = heapq.nsmallest(job.workers, candidates)
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
    for role in job.roles:
        _claim_role(ledger, role, held)
    return held


def _claim_role(ledger: Ledger, role: RoleGroup, held: dict[str, dict[str, float]]) -> None:
    """Add a role's claim to ``held`` (a gang with roles): its members' share of the most-free nodes that could host
    them, on top of what the gang's workers and earlier roles claimed there, at most what is free."""
    keys = score_key(role.worker)
    candidates = heapq.nsmallest(role.count, ((-sum(node.free.get(key, 0.0) for key in keys), node_id, k)
                                              for node, node_id, k in hosts(ledger, role.worker)))
    per_node_cap = 1 if Placement(role.placement).resolve(role.worker) is Placement.STRICT_SPREAD else None
    left = role.count
    for _, node_id, k in candidates:
        take = min(k, left, per_node_cap or k)
        free, mine = ledger.nodes[node_id].free, dict(held.get(node_id, {}))
        for name, amount in role.worker.resources.items():
            room = max(free.get(name, 0.0) - mine.get(name, 0.0), 0.0)
            if min(amount * take, room) > _EPS:
                mine[name] = mine.get(name, 0.0) + min(amount * take, room)
        if mine:
            held[node_id] = mine
        left -= take
        if left <= 0:
            break


def held_now(ledger: Ledger, reserved: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Free capacity that a reservation keeps from other jobs right now (at most what is free)."""
    out: dict[str, float] = {}
    for node_id, amounts in reserved.items():
        node = ledger.nodes.get(node_id)
        if node is None:
            continue
        for k, v in amounts.items():
            out[k] = out.get(k, 0.0) + min(v, max(node.free.get(k, 0.0), 0.0))
    return out


class Reserving:
    """The reservation half of the admission cycle; the cycle supplies state, placement and decisions."""

    # The cycle provides: s (ClusterState), p (Policy), now, decisions, reservation, and _place/_over_max.

    def _refresh_reservation(self, res: Reserve | None) -> Reserve | None:
        """Keep the holder; re-claim the capacity that is free now (see :func:`claim`)."""
        holder = self.s.queue.get(res.job_id) if res and res.job_id else None
        if holder is None:
            if res is not None:
                self.decisions.append(Reserve(None))
            return None
        nodes = claim(self.s.ledger, holder, res.nodes)
        if nodes != res.nodes:
            res = Reserve(holder.id, nodes, self.now)
            self.decisions.append(res)
        return res

    def _reserve_for_oldest(self) -> None:
        """Give the reservation to the oldest waiting job of the highest priority, if it cannot start now.

        Queue order (service band, tenant share) decides who backfills; the
        reservation goes by age, so whatever the order favours, the job that has
        waited longest is always accumulating capacity and cannot starve. It is
        sticky until the holder starts or leaves the queue.
        """
        queue = self.s.queue
        if self.p.overdue_after_s is None:
            heads = [(-b.priority, b.entries[0][0], b.entries[0][1], b.entries[0][2]) for b in queue.buckets()
                     if worth_reserving(queue.get(b.entries[0][2]))]  # type: ignore[arg-type]
            if not heads:
                return
            job = queue.get(min(heads)[3])
        else:
            job = self._most_overdue()
        if job is None or self._over_max(job) or self._place(job, honour_reservation=False):
            return
        self.reservation = Reserve(job.id, claim(self.s.ledger, job), self.now)
        self.decisions.append(self.reservation)

    def _overdue(self, job: JobRequest) -> bool:
        """Queued ``overdue_after_s`` in all (across preemptions), and a multi-node gang unless
        ``overdue_multi_node_only`` is off; without that limit every job may reserve."""
        limit = self.p.overdue_after_s
        if limit is None:
            return True
        return waited(job, self.now) >= limit and (not self.p.overdue_multi_node_only or spans_nodes(self.s.ledger, job))

    def _reserve_order(self, job: JobRequest) -> tuple:
        if self.p.overdue_after_s is None:
            return (-job.priority, job.submit_time, job.seq)
        return (-job.priority, -waited(job, self.now), job.seq)

    def _most_overdue(self) -> JobRequest | None:
        """The gang of the highest priority that has waited longest in all, if past ``overdue_after_s``.

        Only jobs submitted at least that long ago can qualify, and bucket entries
        are in submission order, so each bucket is read only as far as those. A bucket
        is one gang shape and one priority, so whether its jobs may reserve at all (and
        span nodes) is read from its first job: on a long replay most buckets are
        skipped whole instead of job by job.
        """
        limit = self.p.overdue_after_s
        assert limit is not None
        cutoff = self.now - limit
        best: tuple | None = None
        found: JobRequest | None = None
        queue = self.s.queue
        for b in queue.buckets():
            head = queue.get(b.entries[0][2])
            if b.entries[0][0] > cutoff or head is None or not worth_reserving(head):
                continue  # a 1-card single worker never reserves
            if self.p.overdue_multi_node_only and not spans_nodes(self.s.ledger, head):
                continue
            for submit, _, job_id in b.entries:
                if submit > cutoff:
                    break
                job = queue.get(job_id)
                if job is None or waited(job, self.now) < limit:
                    continue
                key = self._reserve_order(job)
                if best is None or key < best:
                    best, found = key, job
        return found
