"""The job queue, bucketed by what makes jobs interchangeable for admission.

Jobs of one tenant, one priority, one service band and one gang shape form a
bucket, ordered by age. Within a cycle, if a bucket's oldest job cannot start
then none of the others can either (same tenant, same shape, and a cycle only
ever takes resources away), so a cycle visits each bucket once instead of
every job: its cost grows with the number of distinct shapes, not queue length.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterator

from cuberay.platform.policy.placement import Placement
from cuberay.platform.policy.topology import Locality
from cuberay.platform.spec.resources import CARD_RESOURCES, Resources, WorkerRequest


@dataclass(frozen=True, slots=True)
class RoleGroup:
    """Members of a gang besides its workers, all alike (a parameter-server job's chief, its parameter servers)."""

    name: str
    worker: WorkerRequest
    count: int
    placement: Placement = Placement.SPREAD


@dataclass(slots=True, eq=False)
class JobRequest:
    """The scheduler's view of one job: who, what gang, how urgent, how much service so far."""

    id: str
    tenant: str
    worker: WorkerRequest
    workers: int
    placement: Placement = Placement.AUTO
    priority: int = 0
    submit_time: float = 0.0
    max_workers: int | None = None
    attained_gpu_s: float = 0.0
    max_runtime_s: float | None = None
    seq: int = 0
    queued_at: float | None = None  # when it last entered the queue (submit, or preemption)
    # A service (ServeApp) runs indefinitely: attained service never demotes it, so it stays in
    # band 0 and is never a least-attained-service victim (priority and reclaim still apply).
    service: bool = False
    # Its allocation may grow toward max_workers and shrink back to workers while it runs
    # (elastic function-mode training, serving); see policy/resize.py.
    resizable: bool = False
    # How close its workers must (required) or should (preferred) be: one domain of a topology level.
    topology: Locality | None = None
    user: str = ""  # who submitted it: the queue's pages filter by it without a read of the store
    # Members besides the workers, admitted with them as one gang and placed after them, each role by its own
    # placement; they follow the workers in the allocation's slots. A gang with roles never resizes.
    roles: tuple[RoleGroup, ...] = ()
    total: Resources = field(init=False)
    gpus: float = field(init=False)
    shape: int = field(init=False)  # interned (worker, workers, max_workers, placement, roles, topology)

    def __post_init__(self) -> None:
        self.placement = Placement(self.placement)
        self.total = self.total_for(self.workers)
        self.gpus = sum(self.total.get(name, 0.0) for name in CARD_RESOURCES)
        shape = (self.worker, self.workers, self.max_workers, self.placement, *self.roles)
        self.shape = _intern(shape if self.topology is None else (*shape, self.topology))
        if self.queued_at is None:
            self.queued_at = self.submit_time

    def total_for(self, workers: int) -> Resources:
        """What the gang holds with ``workers`` workers: theirs and every role's."""
        total = self.worker.resources * workers
        for role in self.roles:
            total = total + role.worker.resources * role.count
        return total

    def member_requests(self, workers: int) -> list[WorkerRequest]:
        """What each slot of an allocation with ``workers`` workers needs, in slot order (workers, then roles)."""
        out = [self.worker] * workers
        for role in self.roles:
            out += [role.worker] * role.count
        return out

    @property
    def role_members(self) -> int:
        return sum(role.count for role in self.roles)


_SHAPES: dict[tuple, int] = {}


def _intern(shape: tuple) -> int:
    """A small int per distinct gang shape: hashing the request once per job, not on every lookup."""
    return _SHAPES.setdefault(shape, len(_SHAPES))


BucketKey = tuple  # (tenant, priority, band, shape)


@dataclass(slots=True, eq=False)
class Bucket:
    key: BucketKey
    tenant: str
    priority: int
    band: int
    entries: list[tuple[float, int, str]] = field(default_factory=list)  # (submit_time, seq, job id), sorted


class JobQueue:
    """Waiting jobs. ``band_of`` maps a job to its service band (0 = least attained service)."""

    def __init__(self, band_of: Callable[[JobRequest], int] = lambda job: 0) -> None:
        self._band_of = band_of
        self._buckets: dict[BucketKey, Bucket] = {}
        self._jobs: dict[str, tuple[JobRequest, BucketKey]] = {}
        self._seq = 0
        self._per_tenant: Counter[str] = Counter()
        self.adds = 0  # jobs added so far (re-queued ones too): with latest(), what came since a moment

    def add(self, job: JobRequest) -> None:
        if job.id in self._jobs:
            raise ValueError(f"job {job.id} is already queued")
        if not job.seq:
            self._seq += 1
            job.seq = self._seq
        band = self._band_of(job)
        key = (job.tenant, job.priority, band, job.shape)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket(key, job.tenant, job.priority, band)
        bisect.insort(bucket.entries, (job.submit_time, job.seq, job.id))
        self._jobs[job.id] = (job, key)
        self._per_tenant[job.tenant] += 1
        self.adds += 1

    def remove(self, job_id: str) -> JobRequest:
        job, key = self._jobs.pop(job_id)
        self._per_tenant[job.tenant] -= 1
        bucket = self._buckets[key]
        idx = bisect.bisect_left(bucket.entries, (job.submit_time, job.seq, job.id))
        del bucket.entries[idx]
        if not bucket.entries:
            del self._buckets[key]
        return job

    def get(self, job_id: str) -> JobRequest | None:
        hit = self._jobs.get(job_id)
        return hit[0] if hit else None

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[JobRequest]:
        return (job for job, _ in self._jobs.values())

    def count(self, tenant: str) -> int:
        """How many of ``tenant``'s jobs wait (kept as jobs come and go: reads of it cost nothing)."""
        return self._per_tenant[tenant]

    def latest(self, n: int) -> list[JobRequest]:
        """The ``n`` most recently added jobs still queued, newest first (dicts keep insertion order): every job
        added since ``adds`` was ``a`` is among ``latest(adds - a)``."""
        return [job for job, _ in itertools.islice(reversed(self._jobs.values()), n)] if n > 0 else []

    def buckets(self) -> list[Bucket]:
        return list(self._buckets.values())

    def is_head(self, job_id: str) -> bool:
        """Whether the job is the oldest of its bucket (the one a cycle looks at first)."""
        hit = self._jobs.get(job_id)
        return hit is not None and self._buckets[hit[1]].entries[0][2] == job_id

    def band(self, job_id: str) -> int:
        return self._buckets[self._jobs[job_id][1]].band
