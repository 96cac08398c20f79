"""The cuberay controller: a detached, named, restartable Ray actor that owns the queue and the ledger.

Like Ray Serve's controller it lives in namespace ``cuberay`` on the head node
with 0 CPUs, and Ray restarts it if its process dies; every decision is in the
store first, so ``__init__`` rebuilds the queue and the allocations from it
(and adopts the Ray Jobs that are still running).

One loop (``_tick``) runs on every event (submit, finish, cancel, node joined
or lost) and on a short timer. Each tick: follow Ray's nodes into the ledger,
follow the drivers' Ray Job states, hold capacity Ray uses outside cuberay,
run the pure admission cycle (``admission.schedule``) and apply its decisions:
Admit -> ADMITTED (allocation stored) -> a Ray Job ``python -m cuberay.run
<job-id>`` -> RUNNING; Preempt -> stop the driver -> PREEMPTED -> QUEUED.

External drivers (``ray job submit -- cuberay run job.yaml``) register with
``driver="external"``, poll ``admission()`` until ADMITTED, read
``job_context()`` and report ``finished()``. Their polls are heartbeats: a
driver silent for ``EXTERNAL_TIMEOUT_S`` (:mod:`.following`), or whose Ray Job ended, has died.

The Ray Jobs client is synchronous, so its calls run in threads
(``asyncio.to_thread``); every mutation happens on the actor's event loop.
A tick holds ``_lock`` across its awaits (Ray's state, launching drivers), and
so do the calls that end or change running jobs. A submit only adds a waiting
job in one synchronous step, so it takes ``_submit_lock`` instead (which keeps
ids and request ids of concurrent submits apart) and never waits for a tick.
Cancel takes no lock at all: its changes up to the driver's stop are
synchronous, so they land between a tick's awaits, and the tick re-checks a
job after each await that a cancel may have ended meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from cuberay import kinds
from cuberay.errors import CuberayError
from cuberay.platform.api.records import JobRecord
from cuberay.platform.control import convert as conv
from cuberay.platform.control import ids
from cuberay.platform.control import snapshot as snap
from cuberay.platform.control.claims import Claims
from cuberay.platform.control.cluster import Cluster, RayCluster
from cuberay.platform.control.driver_api import DriverAPI
from cuberay.platform.control.drivers import Drivers
from cuberay.platform.control.endpoint import delegate, endpoint, share_the_interpreter
from cuberay.platform.control.following import Following
from cuberay.platform.control.guard import Guard, Principal
from cuberay.platform.control.heap import HeapKeeper
from cuberay.platform.control.metrics import PlatformMetrics, TenantStats
from cuberay.platform.control.nodes import ForeignUsage, is_foreign, live_nodes
from cuberay.platform.control.pipeline_service import PipelineService
from cuberay.platform.control.planner_stats import StatisticsKeeper
from cuberay.platform.control.reloading import Reload, persisted
from cuberay.platform.control.scaling import ScaleRequests
from cuberay.platform.control.serving import Serving
from cuberay.platform.control.store import Store
from cuberay.platform.control.submitting import Submitting
from cuberay.platform.control.views import Views
from cuberay.platform.policy.admission import (
    Admit,
    ClusterState,
    Preempt,
    Reserve,
    Resize,
    RunningJob,
    schedule,
)
from cuberay.platform.policy.autoscale import ENV_WORKER_GROUPS, parse_groups
from cuberay.platform.policy.fit import platform_policy, platform_topology, tenant_quotas
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_platform, load_spec

log = logging.getLogger("cuberay.controller")

RUNTIME_GRACE_S = 30.0         # the runner enforces max_runtime itself; the controller is the backstop
NODES_FRESH_S = 0.25           # a tick reads Ray's nodes before deciding when its last read is older
_ACTIVE = (JobState.QUEUED, JobState.PREEMPTED, JobState.ADMITTED, JobState.RUNNING)


class Controller(Submitting, Following, Views, DriverAPI, Reload):
    """The actor's body (Ray runs it behind :class:`~.actor.ControllerActor`): admission, the jobs API and the store.

    Read-only views and the drivers' calls come from the :class:`Views` and :class:`DriverAPI` mixins, which share
    the admission state. Pipelines and serving are components it owns (``self.pipelines``, ``self.serving``):
    their endpoints are attached below the class, each admitting the caller here and handing the call over.
    """

    async def __init__(self, platform: Mapping[str, Any], installer: str | None = None,
                       cluster: Cluster | None = None, small_runner: Callable[[str], Any] | None = None) -> None:
        self.cluster = cluster or RayCluster()  # every call that reaches the cluster goes through it
        if cluster is None:  # the Ray actor, in a process of its own (an in-process one runs in its caller's)
            share_the_interpreter()
        # After a live reload Ray restarts this actor with its install-time file: the reloaded one wins.
        self.platform = load_platform(persisted(self.cluster) or dict(platform))
        kinds.load(self.platform.spec.kinds)  # plugin kinds, before any stored job of theirs is read
        self.interval_s = self.platform.spec.scheduler.cycle_interval_s
        self.platform.storage_path().mkdir(parents=True, exist_ok=True)
        self.store = Store(self.platform.database_url())
        self.store.upsert_tenants({t.name: t.model_dump(mode="json") for t in self.platform.tenants})
        self.guard = Guard(lambda: self.platform, self.store, installer)  # every public method's rule
        # Job ids stay unique on this cluster across database resets.
        self.seq_floor = ids.SeqFloor(self.cluster.kv_get, self.cluster.kv_put)
        self.ledger = Ledger()
        self.ledger.topology = platform_topology(self.platform)  # the levels jobs' topology names
        self.state = ClusterState(self.ledger, tenant_quotas(self.platform), platform_policy(self.platform))
        self.foreign = ForeignUsage(self.ledger)
        # On KubeRay: worker groups that may grow to maxReplicas (empty elsewhere).
        self.groups = parse_groups(os.environ.get(ENV_WORKER_GROUPS))
        self.scaling = ScaleRequests(self.cluster, self.groups)
        self._wake = asyncio.Event()
        self.serving = Serving(self.store, self.cluster.serve_rest(), self._tenant_storage)  # Serve's one writer
        self.claims = Claims()  # unique names (Serve routes, ...) of the active jobs, rebuilt by _recover
        self.small_runner = small_runner  # creates the small jobs' runner (a reload may turn them on)
        self.drivers = Drivers(self.cluster.launcher(self.platform.spec.scheduler.max_drivers),
                               console=lambda: self.cluster.kv_get(ids.CONSOLE_URL_KEY),
                               driver_resource=self.platform.spec.scheduler.driver_resource)
        self._switch_small_jobs(self.platform.spec.scheduler.small_jobs)  # as a reload does: one way to turn them on
        self.metrics = PlatformMetrics()
        self.waits: dict[str, str] = {}  # last cycle's reason per waiting job
        self._last_external_check = 0.0
        self._stopping = False              # `cuberay down` is stopping the platform: admit nothing more
        self._lock = asyncio.Lock()         # ticks, and calls that end or change running jobs
        self._submit_lock = asyncio.Lock()  # submits: queue a job without waiting for a tick
        self._ticks = 0
        self.heap = HeapKeeper()  # keeps the cycle collector off a deep queue (control/heap.py)
        self.statistics = StatisticsKeeper(self.store)  # keeps the pages' query plans good (planner_stats.py)
        self.snapshot = snap.Snapshot()  # what reads are served from (replaced whole after each tick)
        self._nodes_seen = time.monotonic()  # when Ray's node list was last read
        self._apply_nodes(live_nodes(self.cluster.nodes()), time.time(), announce=False)
        self._recover(time.time())
        self._publish()
        self._task = asyncio.get_running_loop().create_task(self._loop())
        self.pipelines = PipelineService(self.store, lambda: self.platform, self.guard, jobs=self,
                                         interval_s=lambda: self.interval_s)
        self.pipelines.start()  # pipeline runs continue from their recorded step states

    # ------------------------------------------------------------------ recovery

    def _recover(self, now: float) -> None:
        """Rebuild queue and allocations from the store; adopt the drivers that are still running."""
        for rec in self.store.list_jobs(states=_ACTIVE):
            try:
                job = load_spec(rec.spec)
                tenant = self.platform.tenant(rec.tenant)
            except CuberayError as err:
                self._store_end(rec.id, JobState.FAILED, f"cannot resume after a controller restart: {err}", now)
                continue
            req = conv.job_request(rec.id, job, tenant, rec.submit_time, rec.user, rec.attained_gpu_s)
            self.state.queue.add(req)
            self.claims.hold(rec.id, job.claims())
            if rec.state.is_waiting:
                if rec.state == JobState.PREEMPTED:
                    self.store.update_job(rec.id, state=JobState.QUEUED)
                if rec.driver == "external":
                    self.drivers.contact[rec.id] = now
                continue
            nodes = conv.node_ids_of(rec.allocation)
            if nodes and all(n in self.ledger.nodes for n in nodes):
                try:
                    self.state.start(rec.id, nodes, rec.start_time or now)
                    self.state.running[rec.id].checkpoint_time = rec.checkpoint_time
                except ValueError:
                    nodes = []
            else:
                nodes = []
            if not nodes:  # its nodes are gone (or over-full): back to the queue
                if rec.submission_id and rec.driver == "launcher":
                    self.drivers.stop(rec.submission_id, preempted=True)
                self.store.update_job(rec.id, state=JobState.QUEUED, allocation=None,
                                      reason="requeued: its nodes were lost while the controller was down",
                                      event=("requeued", "nodes lost while the controller was down"))
                continue
            if rec.driver == "external":
                self.drivers.contact[rec.id] = now
            elif rec.state == JobState.RUNNING and rec.submission_id:
                self.drivers.adopt(rec.submission_id, rec)
            else:
                self.drivers.awaiting[rec.id] = rec.start_time or now
        self.store.add_event("controller_started",
                             f"controller up: {len(self.state.running)} running, {len(self.state.queue)} queued")

    # ------------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        while True:
            try:
                await self._tick()
            except Exception:  # noqa: BLE001 - one bad tick must not stop the platform
                log.exception("cuberay controller tick failed")
            # Until woken, the interval ends, or a node a waiting gang asked for joins (never asyncio.wait_for: it
            # can swallow the loop's cancel, control/aio.py).
            await self.scaling.idle_wait(self._wake, self.interval_s, lambda: self.ledger.nodes)
            self._wake.clear()

    async def _tick(self) -> None:
        async with self._lock:
            # Act on what woke us (a submit, a finish) before the slower refreshes of Ray's state: they take tens
            # of milliseconds and the admission decision does not need them first. The nodes it does, when the
            # last look is old (after an idle wait): a node Ray's autoscaler removed meanwhile would get a gang.
            if time.monotonic() - self._nodes_seen > NODES_FRESH_S:
                await self._refresh_nodes()
            self._cycle(time.time())
            # Ask at once to keep the nodes just admitted on: Ray's autoscaler may remove an idle node before the
            # gang's workers reach it, unless the request holds it (the drivers take seconds to start).
            await self.scaling.update(self.state, time.time())
            await self._start_drivers(time.time())
            await self._refresh_nodes()
            await self._follow_drivers(time.time())
            await self._check_external(time.time())
            self._enforce_runtime(time.time())
            available = await asyncio.to_thread(self.cluster.available)
            self.foreign.update(available)
            self._cycle(time.time())
            await self.scaling.update(self.state, time.time())
            self.scaling.explain(self.waits)
            await self.drivers.stop_pending()
            await self._start_drivers(time.time())
            self._observe()
            self._ticks += 1
            self._publish()
            self.heap.tend(self.state.queue)
            self.statistics.tend()

    def _publish(self) -> None:
        """Replace the snapshot the reads serve (see control/snapshot.py)."""
        self.snapshot = snap.take(self.state, self.waits, conv.tenant_usages(self.platform, self.state),
                                  self._ticks, previous=self.snapshot)

    # ------------------------------------------------------------------ nodes

    async def _refresh_nodes(self) -> None:
        nodes = await asyncio.to_thread(self.cluster.nodes)
        self._nodes_seen = time.monotonic()
        self._apply_nodes(live_nodes(nodes), time.time())

    def _apply_nodes(self, live: Mapping[str, Any], now: float, announce: bool = True) -> None:
        for node_id in [n for n in self.ledger.nodes if n not in live]:
            hit = [a.job_id for a in self.ledger.allocations.values()
                   if not is_foreign(a.job_id) and node_id in a.node_ids]
            for job_id in hit:
                self._requeue(job_id, f"node {conv.short(node_id)} was lost", now, preempted=True)
            self.ledger.remove_node(node_id)
            self.store.add_event("node_lost", f"node {node_id} left the cluster; requeued {len(hit)} job(s)")
            self._wake.set()
        for node_id, node in live.items():
            if node_id not in self.ledger.nodes:
                self.ledger.add_node(node_id, node.capacity, node.labels)
                if announce:
                    self.store.add_event("node_joined", f"node {node_id} joined with {node.capacity}")
                    self._wake.set()
            if self.ledger.set_alive(node_id, not node.draining) and node.draining:
                self.store.add_event("node_draining", f"node {node_id} is being drained: no new work goes there")

    # ------------------------------------------------------------------ admission

    def _cycle(self, now: float) -> None:
        if self._stopping:
            return
        cycle = schedule(self.state, now)
        self.waits = dict(cycle.waits)
        self.scaling.explain(self.waits)
        if not cycle.complete:  # stopped at its time budget: the next tick continues without waiting
            self._wake.set()
        for d in cycle.decisions:
            if isinstance(d, Preempt):
                self._requeue(d.job_id, d.reason, now, preempted=True)
                self.metrics.preempted(self.store.get_job(d.job_id).tenant)
        for d in cycle.decisions:
            if isinstance(d, Admit):
                self._admit(d, now)
            elif isinstance(d, Resize):
                self._resize(d, now)
            elif isinstance(d, Reserve):
                self.state.reservation = d if d.job_id else None

    def _admit(self, d: Admit, now: float) -> None:
        run = self.state.start(d.job_id, d.node_ids, now, protected=d.protected)
        rec = self.store.get_job(d.job_id)
        attempt = rec.attempts + 1
        nodes = ", ".join(sorted({conv.short(n) for n in d.node_ids}))
        reason = f"{d.reason} on node(s) {nodes}"
        self.store.update_job(d.job_id, state=JobState.ADMITTED, allocation=conv.allocation_of(d.node_ids),
                              attempts=attempt, reason=reason, message=None, start_time=now, end_time=None,
                              checkpoint_time=None,
                              submission_id=None if rec.driver == "launcher" else rec.submission_id,
                              event=("admitted", f"attempt {attempt}: {len(run.allocation.slots)} worker(s) {reason}"))
        self.metrics.admitted(rec.tenant, now - rec.submit_time)
        self.waits.pop(d.job_id, None)
        if rec.driver == "launcher":
            self.drivers.awaiting[d.job_id] = now

    def _resize(self, d: Resize, now: float) -> None:
        """A running job's allocation grew or shrank: stored and recorded; its driver applies it (the runner
        restarts a Train worker group at a checkpoint, a ServeApp re-pins its replicas)."""
        before = len(self.state.running[d.job_id].allocation.slots)
        self.state.resize(d.job_id, d.node_ids, now)
        nodes = ", ".join(sorted({conv.short(n) for n in d.node_ids}))
        self.store.update_job(d.job_id, allocation=conv.allocation_of(d.node_ids),
                              event=("resized", f"{before} -> {len(d.node_ids)} worker(s) on node(s) {nodes}: "
                                                f"{d.reason}"))

    def _requeue(self, job_id: str, reason: str, now: float, *, preempted: bool) -> None:
        """Back to the queue with its service so far; a preempted job's running driver is stopped."""
        rec = self.store.get_job(job_id)
        run = self.state.preempt(job_id, now)
        attained = run.job.attained_gpu_s if run is not None else rec.attained_gpu_s
        self.drivers.awaiting.pop(job_id, None)
        if preempted and rec.driver == "launcher" and rec.submission_id and rec.state == JobState.RUNNING:
            self.drivers.stop(rec.submission_id, preempted=True)
        if preempted:
            self.store.update_job(job_id, state=JobState.PREEMPTED, allocation=None, end_time=now,
                                  attained_gpu_s=attained, reason=reason, event=("preempted", reason))
        self.store.update_job(job_id, state=JobState.QUEUED, allocation=None, end_time=now,
                              attained_gpu_s=attained, reason=f"requeued: {reason}", event=("requeued", reason))
        if rec.driver == "external":
            self.drivers.contact[job_id] = now  # its driver sees QUEUED at its next poll and stops its run
        self._wake.set()

    def _enforce_runtime(self, now: float) -> None:
        for run in list(self.state.running.values()):
            limit = run.job.max_runtime_s
            if limit and now - run.start_time > limit + RUNTIME_GRACE_S:
                rec = self.store.get_job(run.job.id)
                self._stop_for_end(rec)
                self._end(run.job.id, JobState.FAILED, f"ran longer than its max_runtime of {limit:g}s", now)

    def _stop_for_end(self, rec: JobRecord) -> None:
        if rec.submission_id and (rec.driver == "launcher" or rec.state.holds_resources):
            self.drivers.stop(rec.submission_id, preempted=False)

    # ------------------------------------------------------------------ ends

    def _end(self, job_id: str, state: JobState, message: str, now: float) -> JobRecord:
        """A terminal state: free the allocation (or leave the queue) and record why."""
        gone = self.state.cancel(job_id)
        self.drivers.forget(job_id)
        self.waits.pop(job_id, None)
        attained = gone.attained_at(now) if isinstance(gone, RunningJob) else None
        self._wake.set()
        return self._store_end(job_id, state, message, now, attained)

    def _store_end(self, job_id: str, state: JobState, message: str, now: float,
                   attained: float | None = None) -> JobRecord:
        # The reason said why it waited or where it ran; an ended job's story is its state and message.
        fields: dict[str, Any] = {"state": state, "end_time": now, "message": message, "allocation": None,
                                  "reason": ""}
        if attained is not None:
            fields["attained_gpu_s"] = attained
        return self.store.update_job(job_id, event=(state.value.lower(), message), **fields)

    def _tenant_storage(self, tenant: str) -> Path:
        """A tenant's storage folder: checkpoints, Tune results and small jobs' logs."""
        return self.platform.tenant_storage(tenant)

    def _observe(self) -> None:
        stats = {}
        for name, quota in self.state.tenants.items():
            stats[name] = TenantStats(
                queued=self.state.queue.count(name),
                running=sum(1 for r in self.state.running.values() if r.job.tenant == name),
                allocated={k: v for k, v in self.state.usage.get(name, {}).items() if v > 1e-9},
                guaranteed=quota.guaranteed.as_dict())
        self.metrics.observe_snapshot(stats)

    # ------------------------------------------------------------------ API: jobs

    @endpoint
    async def cancel(self, who: Principal, ref: str, why: str | None = None) -> JobRecord:
        """Cancel the job ``ref`` names; ``why`` (a platform component's reason) replaces "by <user>".

        Without the admission lock: everything up to the driver's stop is synchronous (the store has CANCELLED,
        the allocation is free), so it cannot interleave with a tick halfway; the stop, a Ray call, is awaited
        here, and a driver a tick was starting at that moment is stopped by that tick.
        """
        rec = self.store.get_job(who.target.id)
        if rec.state.is_terminal:
            return rec
        self._stop_for_end(rec)
        by = why if who.is_platform and why else f"by {who.user}"  # a component's reason, else who asked
        ended = self._end(rec.id, JobState.CANCELLED, f"cancelled {by}", time.time())
        await self.drivers.stop_pending()
        return ended

    @endpoint
    async def shutdown(self, who: Principal) -> list[str]:
        """The platform is about to stop (``cuberay down``): admit nothing more, stop every driver and put each
        job that held resources back in the queue, so none is left RUNNING; the next start runs them again."""
        async with self._lock:
            self._stopping = True
            now = time.time()
            requeued = [job_id for job_id in list(self.state.running)]
            for job_id in requeued:
                self._requeue(job_id, f"the platform was stopped by {who.user}", now, preempted=True)
            await self.drivers.stop_pending()
            self.store.add_event("platform_stopped", f"by {who.user}: {len(requeued)} job(s) back in the queue")
            self._publish()
            return requeued


# The components' endpoints, as the controller's own (the actor's front, control/actor.py, forwards to them).
delegate(Controller, "pipelines", PipelineService)
delegate(Controller, "serving", Serving)
