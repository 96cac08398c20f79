"""Running jobs kept in preemption order across cycles, so an attempt costs what it reads, not the cluster.

A preemption attempt under least attained service (the default) orders its victims by group (priority,
service band, size beyond the need) and, within a group, most attained service first. Rebuilding that
from every running job each attempt made each cycle's cost grow with everything that runs (tens of
thousands of jobs on a full large cluster). This index keeps the running jobs bucketed by (tenant,
priority, GPUs) and, within a bucket, sorted by ``gpus * start - attained``: the job's attained service at
any time ``now`` after its start is ``gpus * now`` minus that, so the order within a bucket never changes
while the jobs run. Only the service band moves with time: first-band jobs wait in a heap by when they
leave it (``band_flip``), and jobs whose useful start lies ahead (a restart's cost) apart, since their
attained service stays flat until then; a cycle moves only the jobs that fell due.

The index only supplies candidates in an order close to the exact one; :mod:`.victim_order` merges them by
the exact keys the full scan uses (the same float arithmetic), so the order and the decisions are the same.
Pure bookkeeping: :class:`~cuberay.platform.policy.cluster_state.ClusterState` updates it on start,
finish and whenever a running job's start time or band changes (``set_band_flip``).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

# A cluster_state.RunningJob (that module keeps this index, so it is not imported back here).
RunningJob = Any

PENDING, FIRST, LATER = 0, 1, 2  # before its useful start; in the first service band; past it


@dataclass(slots=True)
class Member:
    run: RunningJob
    seq: int        # order of the start among all starts: a tenant's running jobs iterate in this order
    key: float      # gpus * start - attained: ascending is most attained first, at any time after start
    where: int = PENDING


@dataclass(slots=True)
class Bucket:
    """One tenant's running jobs of one priority and one size (GPUs)."""

    tenant: str
    priority: int
    gpus: float
    waiting: dict[int, Member] = field(default_factory=dict)  # PENDING members by seq
    first: list[tuple[float, int]] = field(default_factory=list)    # sorted (key, seq)
    later: list[tuple[float, int]] = field(default_factory=list)    # sorted (key, seq)
    scale: float = 0.0  # the largest |attained| + gpus * |start| among its members ever (the merge's margin)
    size: int = 0       # members; an empty bucket is dropped (attempts read every bucket)


class VictimIndex:
    """The running jobs by (tenant, priority, GPUs), each bucket in most-attained order (see the module)."""

    def __init__(self) -> None:
        self.members: dict[str, Member] = {}
        self.by_seq: dict[int, Member] = {}
        self.buckets: dict[tuple[str, int, float], Bucket] = {}
        self.priorities: Counter[int] = Counter()
        # When jobs' useful starts and band flips fall due, across buckets: a cycle moves only the jobs due.
        # An entry that no longer matches its member (finished, re-filed) is skipped when popped.
        self.pending: list[tuple[float, int]] = []  # heap (start, seq)
        self.flips: list[tuple[float, int]] = []    # heap (band_flip, seq) of FIRST members
        self.now = float("-inf")  # the latest time the bands were brought up to (time only moves forward)
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self.members)

    def add(self, run: RunningJob) -> None:
        m = Member(run, next(self._seq), 0.0)
        self.members[run.job.id] = m
        self.by_seq[m.seq] = m
        self.priorities[run.job.priority] += 1
        self._place(m)

    def remove(self, job_id: str) -> None:
        m = self.members.pop(job_id, None)
        if m is None:
            return
        del self.by_seq[m.seq]
        self.priorities[m.run.job.priority] -= 1
        if not self.priorities[m.run.job.priority]:
            del self.priorities[m.run.job.priority]
        self._unplace(m)

    def rekey(self, run: RunningJob) -> None:
        """The job's start time or band changed: re-sort it, keeping its place among its tenant's jobs."""
        m = self.members.get(run.job.id)
        if m is not None and m.run is run:
            self._unplace(m)
            self._place(m)

    def lowest_priority(self) -> int:
        return min(self.priorities, default=1 << 30)

    def bring_to(self, now: float) -> bool:
        """Move jobs whose start or band flip is due by ``now``; False when ``now`` is earlier than a time
        already reached (then the caller scans instead: bands are never moved back)."""
        if now < self.now:
            return False
        self.now = now
        by_seq, pending, flips = self.by_seq, self.pending, self.flips
        while pending and pending[0][0] <= now:
            m = by_seq.get(heapq.heappop(pending)[1])
            if m is not None and m.where == PENDING and m.run.start_time <= now:
                b = self._bucket(m.run)
                del b.waiting[m.seq]
                self._file(b, m)
        while flips and flips[0][0] <= now:
            m = by_seq.get(heapq.heappop(flips)[1])
            if m is not None and m.where == FIRST and m.run.band_flip <= now:
                b = self._bucket(m.run)
                _drop(b.first, (m.key, m.seq))
                m.where = LATER
                bisect.insort(b.later, (m.key, m.seq))
        return True

    def pending_members(self, b: Bucket) -> Iterator[Member]:
        """Members whose useful start is still ahead (few: those restarting)."""
        return iter(b.waiting.values())

    # -- filing --------------------------------------------------------------------------
    def _bucket(self, run: RunningJob) -> Bucket:
        k = (run.job.tenant, run.job.priority, run.job.gpus)
        b = self.buckets.get(k)
        if b is None:
            b = self.buckets[k] = Bucket(*k)
        return b

    def _place(self, m: Member) -> None:
        run, b = m.run, self._bucket(m.run)
        b.size += 1
        m.key = run.job.gpus * run.start_time - run.job.attained_gpu_s
        b.scale = max(b.scale, abs(run.job.attained_gpu_s) + abs(run.job.gpus * run.start_time))
        if run.start_time > self.now:  # attained service flat until the useful start: out of the order
            m.where = PENDING
            b.waiting[m.seq] = m
            heapq.heappush(self.pending, (run.start_time, m.seq))
        else:
            self._file(b, m)

    def _file(self, b: Bucket, m: Member) -> None:
        if m.run.band_flip <= self.now:
            m.where = LATER
            bisect.insort(b.later, (m.key, m.seq))
        else:
            m.where = FIRST
            bisect.insort(b.first, (m.key, m.seq))
            heapq.heappush(self.flips, (m.run.band_flip, m.seq))

    def _unplace(self, m: Member) -> None:
        b = self._bucket(m.run)
        if m.where == FIRST:
            _drop(b.first, (m.key, m.seq))
        elif m.where == LATER:
            _drop(b.later, (m.key, m.seq))
        else:
            b.waiting.pop(m.seq, None)
        m.where = PENDING  # its heap entries stay, stale: skipped when popped (re-filing pushes fresh ones)
        b.size -= 1
        if not b.size:
            del self.buckets[(b.tenant, b.priority, b.gpus)]


def _drop(xs: list[tuple[float, int]], entry: tuple[float, int]) -> None:
    i = bisect.bisect_left(xs, entry)
    assert i < len(xs) and xs[i] == entry, "victim index out of step with the running jobs"
    del xs[i]
