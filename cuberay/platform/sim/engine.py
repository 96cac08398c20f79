"""Discrete-event simulator: replay a job trace through the real admission code.

The same ``ClusterState`` / ``schedule`` the live controller uses decide who runs
where; the simulator only advances time. Preemption model: a preempted job
keeps the progress of its last checkpoint (one every ``checkpoint_interval_s``
of run time), loses the rest, and pays ``restart_cost_s`` of allocated,
useless time when it starts again.

Python API (the trace readers are in :mod:`cuberay.platform.sim.trace`, the nodes in
:mod:`cuberay.platform.sim.cluster`; the package exports all three)::

    from cuberay.platform.sim import simulate, load_philly, uniform_cluster
    report = simulate(load_philly(path, start="2017-10-01", end="2017-11-30"),
                      uniform_cluster(64, gpus_per_node=8), policy="cuberay")
"""

from __future__ import annotations

import heapq
import math
import time as _time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Mapping, Sequence

from cuberay.platform.policy.admission import Admit, ClusterState, Preempt, Resize, schedule
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.scheduling import Policy, TenantQuota, confine_to_pools, policy_named
from cuberay.platform.policy.topology import CUBERAY, Locality, Topology
from cuberay.platform.sim.cluster import NodeSpec
from cuberay.platform.sim.distance import DistanceCost
from cuberay.platform.sim.spread import Spread
from cuberay.platform.sim.trace import TraceJob, proportional_quotas
from cuberay.platform.spec.resources import CPU, GPU, MEMORY, Resources, WorkerRequest

LARGE_JOB_GPUS = 16


# -- output --------------------------------------------------------------------------

@dataclass
class Report:
    """What a replay measured. ``-o json`` prints ``asdict(report)`` minus the timeline."""

    policy: str
    jobs: int
    finished: int
    avg_jct_s: float
    p50_jct_s: float
    p99_jct_s: float
    avg_wait_s: float
    max_wait_s_large: float              # worst total wait (all time queued) of a >=16-GPU job
    max_first_wait_s_large: float        # worst wait of a >=16-GPU job until its first start
    makespan_s: float
    gpu_utilization: float               # allocated GPU-time / capacity GPU-time, first submission to makespan end
    gpu_utilization_while_queued: float  # the same, counted only while some job waits (how well it packs)
    goodput: float
    gpu_allocated_fraction: float
    preemptions: int
    rejected: int
    wall_s: float
    decisions_per_s: float
    cycles: int
    decisions: int
    queued_at_end: int
    running_at_end: int
    allocated_at_end: dict[str, float]
    tenants: dict[str, dict[str, float]]
    nodes: int
    gpus: float
    arrived_gpu_demand: float = 0.0      # GPUs asked for by the jobs submitted so far / capacity
    cycle_p50_s: float = 0.0            # wall time of one admission cycle: median ...
    cycle_p99_s: float = 0.0            # ... and 99th percentile
    max_queued: int = 0                 # most jobs waiting at once
    placement: str = "trace"             # the placement every job used, or "trace" (each job's own)
    # Placements of gangs that need more than one host: how many, the share inside one domain of each level,
    # and the mean run-time multiplier of the distance cost over every start (sim/spread.py).
    near: dict[str, float] = field(default_factory=dict)
    timeline: list[tuple[float, float, int]] = field(default_factory=list, repr=False)
    jcts: list[float] = field(default_factory=list, repr=False)

    def to_dict(self, timeline: bool = False) -> dict:
        out = asdict(self)
        if not timeline:
            out.pop("timeline")
            out.pop("jcts")
        return out


# -- the engine ----------------------------------------------------------------------

@dataclass(slots=True)
class _Progress:
    trace: TraceJob
    done: float = 0.0            # useful seconds kept (checkpointed or finished)
    attempts: int = 0
    run_start: float = 0.0       # when the current attempt got its allocation
    work_start: float = 0.0      # when it began useful work (after the restart cost)
    queued_since: float = 0.0
    waited: float = 0.0
    generation: int = 0
    first_start: float | None = None
    workers: int = 0             # workers held now (an elastic job's count changes with each resize)
    slowdown: float = 1.0        # run-time multiplier of the current placement (the distance cost)


_FINISH, _ARRIVE, _TICK = 0, 1, 2


class _Sim:
    def __init__(self, jobs: Sequence[TraceJob], cluster: Sequence[NodeSpec], tenants: Mapping[str, TenantQuota],
                 policy: Policy, checkpoint_interval_s: float, restart_cost_s: float,
                 placement: str | None = None, cycle_every_s: float = 0.0, topology: Topology | None = None,
                 distance: DistanceCost | None = None, near_algorithm: str = CUBERAY) -> None:
        ledger = Ledger()
        if topology is not None:
            ledger.topology = topology
        for n in cluster:
            ledger.add_node(n.id, n.capacity, n.labels)
        self.state = ClusterState(ledger, tenants, policy)
        self.jobs = jobs
        self.ckpt = checkpoint_interval_s
        self.restart = restart_cost_s
        self.capacity_gpus = ledger.total_capacity.get(GPU, 0.0)
        self.progress: dict[str, _Progress] = {}
        self.events: list[tuple[float, int, int, str]] = []
        self.jct: dict[str, float] = {}
        self.rejected = self.preemptions = self.cycles = self.decisions = 0
        self.sched_time = 0.0
        self.allocated_gpu_s = self.lost_gpu_s = 0.0
        self.busy_gpu_s = self.busy_cap_s = 0.0
        self.used_gpu_s = 0.0        # allocated GPU-seconds over the whole replay
        self.stopped_early = False   # ended at ``until`` rather than after the last event
        self.placement = placement   # overrides every job's placement when set
        self.arrived_gpus = 0.0      # GPU demand submitted so far (per worker x workers)
        self.timeline: list[tuple[float, float, int]] = []
        self.now = 0.0
        # 0: a cycle after every event time (the replays); > 0: at most one cycle per this many simulated
        # seconds, like a live controller's tick (an overload replay's arrivals would otherwise each cost one).
        self.cycle_every_s = cycle_every_s
        self.last_cycle = float("-inf")
        self.tick_at: float | None = None
        self.cycle_s: list[float] = []
        self.max_queued = 0
        self.near_algorithm = near_algorithm  # who places gangs with a topology request: cuberay or kueue
        self.spread = Spread(ledger, distance)

    def run(self, until: float | None, until_demand: float | None = None) -> None:
        for i, job in enumerate(self.jobs):
            self.progress[job.id] = _Progress(job)
            self.events.append((job.submit_time, _ARRIVE, i, job.id))
        heapq.heapify(self.events)
        self.now = self.events[0][0] if self.events else 0.0
        while self.events:
            t = self.events[0][0]
            if until is not None and t > until:
                self._advance(until)
                self.stopped_early = True
                return
            self._advance(t)
            while self.events and self.events[0][0] == t:
                _, kind, gen, job_id = heapq.heappop(self.events)
                if kind == _ARRIVE:
                    self._arrive(job_id)
                elif kind == _FINISH:
                    self._finish(job_id, gen)
                else:
                    self.tick_at = None
            if len(self.state.queue) or self.state.elastic:  # elastic jobs may grow into what an event freed
                if t >= self.last_cycle + self.cycle_every_s:
                    self.last_cycle = t
                    self._cycle()
                elif self.tick_at is None:  # a cycle at the next tick, whatever happens before it
                    self.tick_at = self.last_cycle + self.cycle_every_s
                    heapq.heappush(self.events, (self.tick_at, _TICK, 0, ""))
            if until_demand is not None and self.arrived_gpus >= until_demand * self.capacity_gpus - 1e-9:
                self.stopped_early = True
                return

    def _advance(self, t: float) -> None:
        dt = t - self.now
        if dt > 0:
            used = self.capacity_gpus - self.state.ledger.total_free.get(GPU, 0.0)
            self.used_gpu_s += used * dt
            if len(self.state.queue):
                self.busy_gpu_s += used * dt
                self.busy_cap_s += self.capacity_gpus * dt
            self.timeline.append((self.now, used, len(self.state.queue)))
        self.now = t

    def _arrive(self, job_id: str) -> None:
        p = self.progress[job_id]
        tj = p.trace
        worker = WorkerRequest(Resources({GPU: tj.gpus, CPU: tj.cpus, MEMORY: tj.memory}))
        quota = self.state.tenants.get(tj.tenant)
        worker = confine_to_pools(worker, quota.pools if quota else None)
        elastic = tj.max_workers is not None and tj.max_workers > tj.workers
        near = Locality(tj.near[0], tj.near[1], self.near_algorithm) if tj.near else None
        req = JobRequest(tj.id, tj.tenant, worker, tj.workers, self.placement or tj.placement, tj.priority,
                         tj.submit_time, max_workers=tj.max_workers if elastic else None, resizable=elastic,
                         topology=near)
        self.arrived_gpus += tj.total_gpus
        if self.state.submit(req) is not None:
            self.rejected += 1
        p.queued_since = self.now

    def _finish(self, job_id: str, gen: int) -> None:
        p = self.progress[job_id]
        if gen != p.generation or job_id not in self.state.running:
            return  # a stale event from an attempt that was preempted
        self._account_attempt(p, keep_all=True)
        self.state.finish(job_id)
        self.jct[job_id] = self.now - p.trace.submit_time

    def _cycle(self) -> None:
        t0 = _time.perf_counter()
        self.max_queued = max(self.max_queued, len(self.state.queue))
        cycle = schedule(self.state, self.now, explain=False)
        took = _time.perf_counter() - t0
        self.sched_time += took
        self.cycle_s.append(took)
        self.cycles += 1
        self.decisions += len(cycle.decisions)
        for d in cycle.decisions:
            if isinstance(d, Preempt):
                self._preempt(d.job_id)
        for d in cycle.decisions:  # in order: a shrink comes before the admission it makes room for
            if isinstance(d, Admit):
                self._start(d)
            elif isinstance(d, Resize):
                self._resize(d)
        self.state.apply([d for d in cycle.decisions if not isinstance(d, (Admit, Preempt, Resize))], self.now)

    def _start(self, d: Admit) -> None:
        p = self.progress[d.job_id]
        run = self.state.start(d.job_id, d.node_ids, self.now, protected=d.protected)
        run.checkpoint_every_s = self.ckpt
        p.waited += self.now - p.queued_since
        p.first_start = self.now if p.first_start is None else p.first_start
        p.run_start = self.now
        p.work_start = self.now + (self.restart if p.attempts else 0.0)
        run.start_time = p.work_start  # lost work and attained service count from useful start
        self.state.set_band_flip(run)
        p.attempts += 1
        p.workers = len(d.node_ids)
        p.slowdown = self.spread.started(run.job, p.trace, d.node_ids)
        self._schedule_finish(p)

    def _schedule_finish(self, p: _Progress) -> None:
        """Linear speed-up: ``duration`` is the run time with ``workers``; more workers finish sooner."""
        p.generation += 1
        speed = p.workers / p.trace.workers / p.slowdown
        finish = p.work_start + max(p.trace.duration - p.done, 0.0) / speed
        heapq.heappush(self.events, (finish, _FINISH, p.generation, p.trace.id))

    def _resize(self, d: Resize) -> None:
        """An elastic job restarts its workers at a checkpoint with the new count: it keeps its work and pays
        the restart cost, like a preemption that loses nothing."""
        p = self.progress[d.job_id]
        self._account_attempt(p, keep_all=True)
        self.state.resize(d.job_id, d.node_ids, self.now)
        p.run_start = self.now
        p.work_start = self.now + self.restart
        p.workers = len(d.node_ids)
        p.slowdown = self.spread.resized(self.state.running[d.job_id].job, p.trace, d.node_ids)
        self._schedule_finish(p)

    def _preempt(self, job_id: str) -> None:
        p = self.progress[job_id]
        self._account_attempt(p, keep_all=False)
        self.state.preempt(job_id, self.now)
        p.generation += 1
        p.queued_since = self.now
        self.preemptions += 1

    def _account_attempt(self, p: _Progress, keep_all: bool) -> None:
        gpus = p.trace.gpus * (p.workers or p.trace.workers)
        speed = (p.workers or p.trace.workers) / p.trace.workers / p.slowdown
        held = max(0.0, self.now - p.run_start)
        worked = max(0.0, self.now - p.work_start)
        kept = worked if keep_all else (math.floor(worked / self.ckpt) * self.ckpt if self.ckpt > 0 else 0.0)
        kept = min(kept, max(p.trace.duration - p.done, 0.0) / speed)
        p.done += kept * speed
        self.allocated_gpu_s += held * gpus
        self.lost_gpu_s += (held - kept) * gpus

    def report(self, policy: Policy, wall: float) -> Report:
        jcts = sorted(self.jct.values())
        waits = [p.waited for p in self.progress.values() if p.trace.id in self.jct]
        large = [p.waited + (self.now - p.queued_since if p.trace.id in self.state.queue else 0.0)
                 for p in self.progress.values() if p.trace.total_gpus >= LARGE_JOB_GPUS]
        first_waits = [(p.first_start if p.first_start is not None else self.now) - p.trace.submit_time
                       for p in self.progress.values() if p.trace.total_gpus >= LARGE_JOB_GPUS]
        finished_at = [p.trace.submit_time + self.jct[p.trace.id] for p in self.progress.values()
                       if p.trace.id in self.jct]
        first = self.jobs[0].submit_time if self.jobs else 0.0
        used = self.capacity_gpus - self.state.ledger.total_free.get(GPU, 0.0)
        makespan = (max(finished_at) - first) if finished_at else 0.0
        # Over the makespan; stopped at ``until``, over the time simulated (jobs may still hold GPUs then).
        span = self.now - first if self.stopped_early else makespan
        return Report(
            policy=policy.name, jobs=len(self.jobs), finished=len(jcts),
            avg_jct_s=_mean(jcts), p50_jct_s=_pct(jcts, 50), p99_jct_s=_pct(jcts, 99),
            avg_wait_s=_mean(waits), max_wait_s_large=max(large, default=0.0),
            max_first_wait_s_large=max(first_waits, default=0.0),
            makespan_s=makespan,
            gpu_utilization=self.used_gpu_s / (self.capacity_gpus * span) if self.capacity_gpus and span > 0 else 0.0,
            gpu_utilization_while_queued=self.busy_gpu_s / self.busy_cap_s if self.busy_cap_s else 0.0,
            goodput=1.0 - self.lost_gpu_s / self.allocated_gpu_s if self.allocated_gpu_s else 1.0,
            gpu_allocated_fraction=used / self.capacity_gpus if self.capacity_gpus else 0.0,
            preemptions=self.preemptions, rejected=self.rejected, wall_s=wall,
            decisions_per_s=self.decisions / self.sched_time if self.sched_time else 0.0,
            cycles=self.cycles, decisions=self.decisions,
            queued_at_end=len(self.state.queue), running_at_end=len(self.state.running),
            allocated_at_end={k: self.state.ledger.total_capacity.get(k, 0.0) - v
                              for k, v in self.state.ledger.total_free.items()},
            tenants=self._tenant_report(), nodes=len(self.state.ledger.nodes), gpus=self.capacity_gpus,
            arrived_gpu_demand=self.arrived_gpus / self.capacity_gpus if self.capacity_gpus else 0.0,
            placement=self.placement or "trace",
            cycle_p50_s=_pct(sorted(self.cycle_s), 50), cycle_p99_s=_pct(sorted(self.cycle_s), 99),
            max_queued=self.max_queued, near=self.spread.report(),
            timeline=self.timeline, jcts=jcts)

    def _tenant_report(self) -> dict[str, dict[str, float]]:
        per: dict[str, list[float]] = {}
        gpu_time: dict[str, float] = {}
        for p in self.progress.values():
            t = p.trace.tenant
            gpu_time[t] = gpu_time.get(t, 0.0) + p.done * p.trace.total_gpus
            if p.trace.id in self.jct:
                per.setdefault(t, []).append(self.jct[p.trace.id])
        total = sum(gpu_time.values()) or 1.0
        return {t: {"jobs_finished": len(per.get(t, [])), "avg_jct_s": _mean(per.get(t, [])),
                    "gpu_time_share": gpu_time[t] / total} for t in sorted(gpu_time)}


def simulate(jobs: Sequence[TraceJob], cluster: Sequence[NodeSpec],
             tenants: Mapping[str, TenantQuota] | None = None, policy: Policy | str = "cuberay", *,
             checkpoint_interval_s: float = 1800.0, restart_cost_s: float = 60.0,
             until: float | None = None, until_demand: float | None = None,
             placement: str | None = None, cycle_every_s: float = 0.0, topology: Topology | None = None,
             distance: DistanceCost | None = None, near_algorithm: str = CUBERAY,
             at_end: Callable[[ClusterState, float], None] | None = None) -> Report:
    """Replay ``jobs`` on ``cluster`` under ``policy`` and measure it.

    Args:
        jobs: the trace, any order (it is sorted by submit time).
        cluster: the nodes (see :func:`uniform_cluster`).
        tenants: quotas; None gives guarantees proportional to each tenant's GPU-time, no cap.
        policy: a :class:`Policy` or a name: ``cuberay``, ``fifo``, ``fifo-backfill``.
        checkpoint_interval_s: a preempted job keeps progress up to its last checkpoint.
        restart_cost_s: allocated, useless time when a preempted job starts again.
        until: stop at this simulated time (seconds from the first submission) and report the state then.
        until_demand: stop once the GPUs asked for by the jobs submitted so far reach this fraction of the
            cluster's GPUs (1.0: arrived demand equals capacity), after placing what arrived, and report then.
        placement: a placement policy for every job (``frag``, ``best_fit``, ``pack``, ...), in place of
            the trace's.
        cycle_every_s: 0 runs a cycle after every event; more runs at most one per this many simulated
            seconds (a live controller's tick; for overload replays with an arrival every few seconds).
        topology: the cluster's levels of closeness (node labels); None: the RDMA domain only.
        distance: the distance cost (sim/distance.py): gangs placed wider than their size needs run slower;
            None: no cost.
        near_algorithm: who places jobs with a topology request: ``cuberay`` or ``kueue`` (the baseline).
        at_end: called with the replay's state and time once it stops and is reported (a benchmark times
            live cycles on the state a replay reached).
    Returns:
        A :class:`Report`.
    """
    pol = policy_named(policy) if isinstance(policy, str) else policy
    # Every cycle runs to the end of the queue: a replay's decisions must not depend on the machine's speed.
    pol = replace(pol, cycle_budget_s=None) if pol.cycle_budget_s is not None else pol
    ordered = sorted(jobs, key=lambda j: (j.submit_time, j.id))
    quotas = dict(tenants) if tenants is not None else proportional_quotas(ordered, cluster)
    t0 = _time.perf_counter()
    sim = _Sim(ordered, cluster, quotas, pol, checkpoint_interval_s, restart_cost_s, placement, cycle_every_s,
               topology, distance, near_algorithm)
    start = ordered[0].submit_time if ordered else 0.0
    sim.run(None if until is None else start + until, until_demand)
    report = sim.report(pol, _time.perf_counter() - t0)
    if at_end is not None:
        at_end(sim.state, sim.now)
    return report


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _pct(sorted_xs: Sequence[float], q: float) -> float:
    if not sorted_xs:
        return 0.0
    idx = min(len(sorted_xs) - 1, max(0, math.ceil(q / 100 * len(sorted_xs)) - 1))
    return sorted_xs[idx]
