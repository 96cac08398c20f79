"""Victims in preemption order read from the index (:mod:`.victim_index`) instead of every running job.

The same candidates, in the same order, as ``Preemption._victims``' scan under least attained service: the
same tests on each job, grouped by (priority, still in the first band, GPUs beyond the need), most attained
service first, then newest, then the scan's order (tenant, then start). Within a group the index's buckets
are merged lazily: each bucket is sorted by a key that orders its jobs the same way at any time, up to
float rounding, so a job is taken out of the merge only once no bucket can still hold one that goes before
it by the exact key (each bucket's next key, less a margin far above rounding, exceeds it). An attempt so
reads the victims it uses and the buckets, not every running job.

The scan refuses when the candidates together cannot free the need; here that is known once enough have
been read (the sums are of GPU counts, the same in any order when they are whole numbers).
"""

from __future__ import annotations

import heapq
from itertools import chain
from typing import Any, Iterable, Iterator

from cuberay.platform.policy.cluster_state import RunningJob
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.victim_index import Bucket, VictimIndex

# The admission cycle (admission.AdmissionCycle, through its Preemption half), which imports this module.
AdmissionCycle = Any

EPS = 1e-9
MARGIN = 1e-9  # relative: rounding of a key is ~1e-16 of its terms' size; a margin far above it is safe

# (rank of the tenant in the scan, same tenant as the job, must outrank, guarantee floor term or None)
_Terms = tuple[int, bool, bool, "tuple[str, float, float] | None"]


def indexed_victims(c: AdmissionCycle, job: JobRequest, contended: tuple[str, ...], own_only: bool,
                    within: bool, can_outrank: bool, las_first_band: bool) -> Iterable[RunningJob] | None:
    """``_victims``' answer for a job contending for one card resource, or None where the index cannot say
    (out of step with the running jobs, or asked about an earlier time than it has reached): then scan."""
    index = c.s.victims
    if len(contended) != 1 or len(index) != len(c.s.running) or not index.bring_to(c.now):
        return None
    terms = _tenant_terms(c, job, contended, own_only, within, can_outrank, las_first_band)
    pick = _Pick(c, job, las_first_band)
    groups: dict[tuple, tuple[list, list]] = {}
    for b in index.buckets.values():
        t = terms.get(b.tenant)
        if t is not None:
            _add_bucket(c, pick, groups, b, t)
    ordered = chain.from_iterable(_merge(index, pick, *groups[k]) for k in sorted(groups))
    # Enough freed (with what is idle) to cover the need, or none at all: the scan's test, read lazily.
    card = contended[0]
    free, need = c.s.ledger.total_free.get(card, 0.0), job.total.get(card, 0.0)
    read, freed = [], 0.0
    for run in ordered:
        read.append(run)
        freed += run.allocation.total.get(card, 0.0)
        if free + freed + EPS >= need:
            return chain(read, ordered)
    return []


def _tenant_terms(c: AdmissionCycle, job: JobRequest, contended: tuple[str, ...], own_only: bool,
                  within: bool, can_outrank: bool, las_first_band: bool) -> dict[str, _Terms]:
    """Per tenant whose jobs may be victims: the scan's per-tenant tests and terms, in the scan's order."""
    out: dict[str, _Terms] = {}
    for rank, tenant in enumerate(c.s.running_by_tenant):
        same = tenant == job.tenant
        if not same and (own_only or not c._borrowing(tenant, contended)):
            continue
        must_outrank = same or not within
        if must_outrank and (not can_outrank or (not las_first_band and job.priority <= c._lowest_running())):
            continue
        floor = () if same else c._guarantee_floor(tenant, contended)
        out[tenant] = (rank, same, must_outrank, floor[0] if floor else None)
    return out


class _Pick:
    """The scan's tests on one running job (the same ones, in the same order)."""

    def __init__(self, c: AdmissionCycle, job: JobRequest, las_first_band: bool) -> None:
        self.now, self.min_run, self.preempted = c.now, c.p.min_run_before_preempt_s, c.preempted
        self.prio, self.las_first_band, self.need = job.priority, las_first_band, job.gpus

    def __call__(self, r: RunningJob, t: _Terms) -> bool:
        _, same, must_outrank, one = t
        rj = r.job
        if must_outrank:
            rp = rj.priority
            if not (self.prio > rp or (self.prio == rp and self.las_first_band and self.now >= r.band_flip
                                       and not r.protected)):
                return False
            if self.now - r.start_time < self.min_run:
                return False
        if rj.id in self.preempted:
            return False
        if not same and not rj.gpus > 0:
            return False
        if one is not None:
            amount = r.allocation.total.get(one[0], 0.0)
            if amount > 0 and one[1] - amount < one[2]:
                return False
        return True

    def key(self, r: RunningJob, t: _Terms, seq: int) -> tuple:
        """The scan's heap key: most attained first, then newest, then the scan's order."""
        return (-r.attained_at(self.now), -r.start_time, t[0], seq, r)


def _add_bucket(c: AdmissionCycle, pick: _Pick, groups: dict[tuple, tuple[list, list]], b: Bucket,
                t: _Terms) -> None:
    """File a bucket's sorted lists as merge streams, and its pending jobs with exact keys, under their groups."""
    _, same, must_outrank, _ = t
    g, rp, prio = b.gpus, b.priority, pick.prio
    if not same and not g > 0:
        return
    first_band_too = not must_outrank or prio > rp
    if must_outrank and not first_band_too and not (prio == rp and pick.las_first_band):
        return  # nothing here outranked (the scan tests each job; none passes)
    excess = g - pick.need if g > pick.need else 0.0
    margin = MARGIN * (1.0 + b.scale + abs(g * pick.now))
    if first_band_too and b.first:
        groups.setdefault((rp, True, excess), ([], []))[0].append((b.first, g, margin, t))
    if b.later:
        groups.setdefault((rp, False, excess), ([], []))[0].append((b.later, g, margin, t))
    for m in c.s.victims.pending_members(b):
        if pick(m.run, t):
            group = groups.setdefault((rp, pick.now < m.run.band_flip, excess), ([], []))
            group[1].append(pick.key(m.run, t, m.seq))


def _merge(index: VictimIndex, pick: _Pick, streams: list, exact: list) -> Iterator[RunningJob]:
    """One group's candidates by the exact key, reading each sorted stream only as far as needed."""
    now, by_seq = pick.now, index.by_seq
    heap = list(exact)
    heapq.heapify(heap)
    fronts: list[tuple[float, int, int]] = []  # (lowest exact key a stream's unread jobs can have, stream, pos)
    for sid, (xs, g, margin, _) in enumerate(streams):
        fronts.append((xs[0][0] - g * now - margin, sid, 0))
    heapq.heapify(fronts)
    while True:
        while fronts and (not heap or fronts[0][0] <= heap[0][0]):
            _, sid, pos = heapq.heappop(fronts)
            xs, g, margin, t = streams[sid]
            seq = xs[pos][1]
            run = by_seq[seq].run
            if pick(run, t):
                heapq.heappush(heap, pick.key(run, t, seq))
            if pos + 1 < len(xs):
                heapq.heappush(fronts, (xs[pos + 1][0] - g * now - margin, sid, pos + 1))
        if not heap:
            return
        yield heapq.heappop(heap)[-1]
