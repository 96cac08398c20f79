"""What the controller's reads are served from: a snapshot of the admission state, published after each tick.

The controller's event loop runs the admission cycle, which takes as long as the
queue is deep; a read that waited for it (``cuberay status``, ``queue``, ``tenants``,
metrics scrapes) would take as long. So the reads run on a thread of their own (the
actor's ``reads`` concurrency group) and never touch the live ``ClusterState``, which
the loop mutates: they read the last published :class:`Snapshot` (an immutable value,
replaced whole, so a reader sees one tick's state or the next one's, never a mix)
and the store (SQLAlchemy sessions per call; the store is the truth for each job's
record, the snapshot only adds positions and reasons).

The admission order of a deep queue is the costly part (about 0.6 s for 100,000 jobs
on 2 cores, while the rest of a snapshot costs milliseconds), and it is only shown, never
acted on. So a queue longer than ``ORDER_ALWAYS`` is re-ordered only once the last
ordering is ``1 / ORDER_SHARE`` times its own cost old: publishing spends at most that
share of the loop's time on it. Between orderings the snapshot keeps the last order
(jobs admitted since are dropped from it by their state in the store) and lists the jobs
queued since then after it, without a position yet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from cuberay.platform.api.records import JobRecord, QueueEntry, TenantUsage
from cuberay.platform.control.convert import short
from cuberay.platform.control.store_pages import QueueRow
from cuberay.platform.policy.admission import ClusterState, RunningJob
from cuberay.platform.policy.order import queue_order
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.states import JobState

ORDER_ALWAYS = 2_000  # queues up to this long are ordered at every publish (a few ms)
ORDER_SHARE = 0.1     # past that, ordering takes at most this share of the loop's time
NOT_ORDERED = "queued since the last ordering; its position comes with the next one"


@dataclass(frozen=True)
class Snapshot:
    """One tick's admission state, as the reads need it."""

    time: float = 0.0
    ticks: int = 0
    waits: Mapping[str, str] = field(default_factory=dict)        # waiting job -> why, from the last cycle
    order: tuple[JobRequest, ...] = ()                             # waiting jobs in admission order
    positions: Mapping[str, int] = field(default_factory=dict)    # waiting job -> 1-based position
    unordered: tuple[JobRequest, ...] = ()                         # queued since the order was computed
    ordered_at: float = 0.0                                        # when ``order`` was computed
    ordered_adds: int = 0                                          # the queue's ``adds`` then
    order_s: float = 0.0                                           # what computing it cost
    running: tuple[RunningJob, ...] = ()                           # jobs holding an allocation, oldest first
    allocations: Mapping[str, list[str]] = field(default_factory=dict)  # job -> node id per worker
    tenants: tuple[TenantUsage, ...] = ()
    nodes: tuple[dict[str, Any], ...] = ()
    build_ms: float = 0.0                                          # what publishing cost the loop

    def entry(self, rec: JobRecord, now: float | None = None) -> QueueEntry | None:
        """``rec``'s line in the queue while it waits (as :meth:`queue_page` lists it), else None."""
        if not rec.state.is_waiting or rec.id in self.allocations:
            return None
        now = time.time() if now is None else now
        position = self.positions.get(rec.id)
        if position is not None:
            return self._listed(rec, self.order[position - 1], position, None, now)
        job = next((j for j in self.unordered if j.id == rec.id), None)
        return None if job is None else self._listed(rec, job, None, None, now)

    def queue_page(self, records_of: Callable[[list[str]], Mapping[str, JobRecord | QueueRow]], tenant: str | None,
                   state: str | None, user: str | None, offset: int, limit: int,
                   visible: tuple[set[str], str] | None = None,
                   now: float | None = None) -> tuple[int, list[QueueEntry]]:
        """(how many entries match, one page of them): running jobs (oldest first, no position), then waiting
        ones in admission order, each with why it waits, then those queued since the last ordering.

        It walks the snapshot, not the store, and reads only the page's records (``records_of``): a page costs
        the same at any backlog. A job is listed by its stored state, so one admitted since the order was
        computed shows once, as running. ``state`` is "running", "waiting" or None;
        ``user``, if given, lists that user's jobs only, and only those ``visible`` (tenants, the viewer) may
        read (the viewer's tenants' jobs and the viewer's own). A job the order still holds but the store has
        since ended drops out of its page, so a page may be a row or two short until the next ordering.
        """
        now = time.time() if now is None else now
        rows = self._page_rows(tenant, state, user, visible)
        page = rows[offset:offset + limit]
        records = records_of([job.id for job, _, _ in page])
        entries = []
        for job, position, run in page:
            rec = records.get(job.id)
            if rec is None or rec.state.is_terminal or (run is None and not rec.state.is_waiting):
                continue
            entries.append(self._listed(rec, job, position, run, now))
        return len(rows), entries

    def _page_rows(self, tenant: str | None, state: str | None, user: str | None,
                   visible: tuple[set[str], str] | None) -> list[tuple[JobRequest, int | None, RunningJob | None]]:
        tenants, viewer = visible if visible is not None else (None, None)

        def kept(job: JobRequest) -> bool:
            if tenant and job.tenant != tenant:
                return False
            if not user:
                return True
            return job.user == user and (tenants is None or job.tenant in tenants or job.user == viewer)

        rows: list[tuple[JobRequest, int | None, RunningJob | None]] = []
        if state in (None, "running"):
            rows.extend((run.job, None, run) for run in self.running if kept(run.job))
        if state in (None, "waiting"):
            held = self.allocations  # admitted since the order was computed: listed as running, not here
            rows.extend((job, i, None) for i, job in enumerate(self.order, 1) if job.id not in held and kept(job))
            rows.extend((job, None, None) for job in self.unordered if job.id not in held and kept(job))
        return rows

    def _listed(self, rec: JobRecord | QueueRow, job: JobRequest, position: int | None, run: RunningJob | None,
                now: float) -> QueueEntry:
        """A queue line: a running job says where it runs, an ordered one why it waits, a newer one that it is."""
        if run is not None:
            return _entry(rec, run.job, None, _where(run, rec), now)
        if position is not None:
            return _entry(rec, job, position, self._reason(rec), now)
        return _entry(rec, job, None, self.waits.get(job.id) or NOT_ORDERED, now)

    def _reason(self, rec: JobRecord | QueueRow) -> str:
        return self.waits.get(rec.id) or (rec.reason if rec.reason else "waiting for the next admission cycle")


def take(state: ClusterState, waits: Mapping[str, str], tenants: list[TenantUsage], ticks: int,
         previous: Snapshot | None = None) -> Snapshot:
    """A snapshot of ``state`` (call on the loop that owns it); copies what the loop will change.

    With ``previous``, a deep queue keeps its order until re-ordering is due (see the module's note).
    """
    started = time.perf_counter()
    now = time.time()
    if _order_due(state, previous, now):
        order = tuple(queue_order(state))
        positions: Mapping[str, int] = {job.id: i for i, job in enumerate(order, 1)}
        unordered: tuple[JobRequest, ...] = ()
        ordered_at, order_s, ordered_adds = now, time.perf_counter() - started, state.queue.adds
    else:
        assert previous is not None
        order, positions, ordered_at, order_s, ordered_adds = (
            previous.order, previous.positions, previous.ordered_at, previous.order_s, previous.ordered_adds)
        # Only what was added since the ordering can be missing from it: the newest jobs, not the whole queue.
        since = state.queue.latest(state.queue.adds - ordered_adds)
        unordered = tuple(job for job in reversed(since) if job.id not in positions)
    running = tuple(sorted(state.running.values(), key=lambda r: r.start_time))
    nodes = tuple({"node_id": n.id, "capacity": dict(n.capacity), "free": dict(n.free), "labels": dict(n.labels)}
                  for n in state.ledger.nodes.values())
    return Snapshot(
        time=now, ticks=ticks, waits=dict(waits), order=order, positions=positions, unordered=unordered,
        ordered_at=ordered_at, ordered_adds=ordered_adds, order_s=order_s, running=running,
        allocations={r.job.id: list(r.allocation.node_ids) for r in running}, tenants=tuple(tenants),
        nodes=nodes, build_ms=1000 * (time.perf_counter() - started))


def _order_due(state: ClusterState, previous: Snapshot | None, now: float) -> bool:
    if previous is None or len(state.queue) <= ORDER_ALWAYS:
        return True
    return now - previous.ordered_at >= previous.order_s / ORDER_SHARE


def _where(run: RunningJob, rec: JobRecord | QueueRow) -> str:
    nodes = sorted({short(n) for n in run.allocation.node_ids})
    if rec.state == JobState.ADMITTED:
        return rec.reason or f"admitted on {', '.join(nodes)}; starting"
    return f"running on {len(run.allocation.slots)} worker(s), node(s) {', '.join(nodes)}"


def _entry(rec: JobRecord | QueueRow, job: JobRequest, position: int | None, reason: str, now: float) -> QueueEntry:
    return QueueEntry(job_id=rec.id, tenant=rec.tenant, name=rec.name, kind=rec.kind, state=rec.state,
                      position=position, reason=reason, gpus=job.gpus, workers=job.workers,
                      age_s=max(0.0, now - rec.submit_time))
