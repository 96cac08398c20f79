"""The order a cycle would take queued jobs in, were each one to start (what ``cuberay queue`` shows)."""

from __future__ import annotations

import heapq

from cuberay.platform.policy.admission import AdmissionCycle
from cuberay.platform.policy.cluster_state import ClusterState, add_amounts
from cuberay.platform.policy.queue import Bucket, JobRequest


def queue_order(state: ClusterState, now: float = 0.0) -> list[JobRequest]:
    """Every queued job in the order a cycle at ``now`` would consider them if each one started.

    Like the cycle, a tenant's share grows with each of its jobs taken, so
    tenants interleave (``cuberay queue`` shows the positions from this).

    The order key is (priority, band, tenant share, age); the share is the same for every bucket of one
    tenant, so each tenant's buckets wait in a heap of their own keyed without it, and the tenants in a
    heap keyed by their first job's full key. Taking a job changes only its own tenant's share, whose
    entry is the one just taken: no key ever goes stale, and each job costs a few heap steps however
    many buckets there are (the result is the same as ordering every job by its key as the shares grow).
    """
    cycle = AdmissionCycle(state, now)
    fifo = cycle.p.fifo

    def within(b: Bucket, pos: int) -> tuple:
        key = cycle.key(b, b.entries[pos])
        return key if fifo else (key[0], key[1], key[3], key[4])  # the key without the tenant's share

    per: dict[str, list[tuple[tuple, int, Bucket, int]]] = {}
    for i, b in enumerate(state.queue.buckets()):
        per.setdefault(b.tenant, []).append((within(b, 0), i, b, 0))
    tenants: list[tuple[tuple, str]] = []
    for tenant, heap in per.items():
        heapq.heapify(heap)
        _, _, b, pos = heap[0]
        tenants.append((cycle.key(b, b.entries[pos]), tenant))
    heapq.heapify(tenants)
    out: list[JobRequest] = []
    while tenants:
        _, tenant = heapq.heappop(tenants)
        heap = per[tenant]
        _, i, b, pos = heapq.heappop(heap)
        job = state.queue.get(b.entries[pos][2])
        assert job is not None
        out.append(job)
        add_amounts(cycle.usage.setdefault(job.tenant, {}), job.total, 1.0)
        cycle._shares.pop(job.tenant, None)
        if pos + 1 < len(b.entries):
            heapq.heappush(heap, (within(b, pos + 1), i, b, pos + 1))
        if heap:
            _, _, b, pos = heap[0]
            heapq.heappush(tenants, (cycle.key(b, b.entries[pos]), tenant))
    return out
