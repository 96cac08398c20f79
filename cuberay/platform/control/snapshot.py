"""What the controller's reads are served from: a snapshot of the admission state, published after each tick.

The controller's event loop runs the admission cycle, which takes as long as the
queue is deep; a read that waited for it (``cuberay status``, ``queue``, ``tenants``,
metrics scrapes) would take as long. So the reads run on a thread of their own (the
actor's ``reads`` concurrency group) and never touch the live ``ClusterState``, which
the loop mutates: they read the last published :class:`Snapshot` (an immutable value,
replaced whole, so a reader sees one tick's state or the next one's, never a mix)
and the store (SQLAlchemy sessions per call; the store is the truth for each job's
record, the snapshot only adds positions and reasons).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from cuberay.platform.control.records import TenantUsage
from cuberay.platform.policy.admission import ClusterState, RunningJob
from cuberay.platform.policy.queue import JobRequest

READS = "reads"  # the actor's concurrency group for reads


@dataclass(frozen=True)
class Snapshot:
    """One tick's admission state, as the reads need it."""

    time: float = 0.0
    ticks: int = 0
    waits: Mapping[str, str] = field(default_factory=dict)        # waiting job -> why, from the last cycle
    order: tuple[JobRequest, ...] = ()                             # waiting jobs in admission order
    positions: Mapping[str, int] = field(default_factory=dict)    # waiting job -> 1-based position
    running: tuple[RunningJob, ...] = ()                           # jobs holding an allocation, oldest first
    allocations: Mapping[str, list[str]] = field(default_factory=dict)  # job -> node id per worker
    tenants: tuple[TenantUsage, ...] = ()
    nodes: tuple[dict[str, Any], ...] = ()
    build_ms: float = 0.0                                          # what publishing cost the loop


def take(state: ClusterState, waits: Mapping[str, str], order: list[JobRequest], tenants: list[TenantUsage],
         ticks: int) -> Snapshot:
    """A snapshot of ``state`` (call on the loop that owns it); copies what the loop will change."""
    started = time.perf_counter()
    running = tuple(sorted(state.running.values(), key=lambda r: r.start_time))
    nodes = tuple({"node_id": n.id, "capacity": dict(n.capacity), "free": dict(n.free), "labels": dict(n.labels)}
                  for n in state.ledger.nodes.values())
    return Snapshot(
        time=time.time(), ticks=ticks, waits=dict(waits), order=tuple(order),
        positions={job.id: i for i, job in enumerate(order, 1)}, running=running,
        allocations={r.job.id: list(r.allocation.node_ids) for r in running}, tenants=tuple(tenants),
        nodes=nodes, build_ms=1000 * (time.perf_counter() - started))
