"""Bounded admission cycles: a time budget per cycle that resumes where it stopped.

A cycle cut short by ``Policy.cycle_budget_s`` decides a prefix of what a full cycle
decides, in the same order; the next cycle starts again from the top and reaches at
least one bucket beyond where the last one stopped, so every job gets its turn.
The clock is injected: each call advances it one tick, so the tests do not depend on
the machine's speed.
"""

from __future__ import annotations

from dataclasses import replace

from cuberay.platform.policy.admission import Admit, schedule
from cuberay.platform.policy.scheduling import POLICIES, Policy, TenantQuota
from tests.unit.helpers import cluster, job, state, submit

# No preemption or reservation: then a full cycle and a run of cut-short ones must admit the same jobs
# on the same nodes in the same order (each cycle may preempt once, so with preemption they could not).
POLICY_FIFO = POLICIES["fifo"]
PLAIN = Policy(preempt=False, reclaim=False, reserve=False, las_threshold_gpu_s=None, overdue_after_s=None)


class Ticks:
    """A clock that advances ``step`` on every read."""

    def __init__(self, step: float = 1.0) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def _mixed_queue(policy: Policy):
    # Four tenants x three shapes x two priorities: 24 buckets; more work than room.
    st = state(cluster(nodes=6, gpus=8, cpus=64), *(TenantQuota(t) for t in "abcd"), policy=policy)
    i = 0
    for tenant in "abcd":
        for gpus, workers in ((1, 1), (2, 2), (8, 1)):
            for prio in (0, 5):
                for k in range(3):
                    submit(st, job(f"j{i:03d}", tenant, gpus=gpus, workers=workers, priority=prio, t=i + k))
                    i += 1
    return st


def _admits_until_done(st, clock, limit: int = 500) -> tuple[list[tuple[str, tuple[str, ...]]], int, int]:
    """Run cycles (applying each) until one is complete; (admissions in order, cycles, cut-short cycles)."""
    out, cycles, cut = [], 0, 0
    while True:
        c = schedule(st, 0.0, clock=clock)
        cycles += 1
        cut += not c.complete
        out += [(d.job_id, d.node_ids) for d in c.decisions if isinstance(d, Admit)]
        st.apply(c.decisions, 0.0)
        if c.complete or cycles >= limit:
            return out, cycles, cut


def test_cut_short_cycles_admit_what_one_full_cycle_admits_in_the_same_order():
    full = _mixed_queue(PLAIN)
    c = schedule(full, 0.0)
    assert c.complete
    expected = [(d.job_id, d.node_ids) for d in c.decisions if isinstance(d, Admit)]
    assert len(expected) > 10  # enough buckets for the budget to cut several times

    bounded = _mixed_queue(replace(PLAIN, cycle_budget_s=3.0))
    got, cycles, cut = _admits_until_done(bounded, Ticks())
    assert cut >= 3 and cycles == cut + 1
    assert got == expected
    assert bounded.resume_after is None  # a complete cycle forgets where the last one stopped


def test_a_clock_always_past_the_budget_still_reaches_every_bucket():
    # Each cycle examines one bucket beyond where the last one stopped, then stops: the queue drains anyway,
    # in the order of a full cycle, even when the head of the order is blocked for good.
    full = _mixed_queue(PLAIN)
    expected = [(d.job_id, d.node_ids) for d in schedule(full, 0.0).decisions if isinstance(d, Admit)]
    bounded = _mixed_queue(replace(PLAIN, cycle_budget_s=0.0))
    got, cycles, cut = _admits_until_done(bounded, Ticks(step=1e6))
    assert cycles < 500, "no cycle ever reached the end of the queue"
    assert got == expected
    assert cut > len(expected)  # one bucket per cycle at most: many cycles, none stuck


def test_a_cut_short_cycle_says_so_and_explains_the_jobs_it_did_not_reach():
    st = _mixed_queue(replace(PLAIN, cycle_budget_s=2.0))
    c = schedule(st, 0.0, clock=Ticks())
    assert not c.complete and st.resume_after is not None
    examined = {d.job_id for d in c.decisions if isinstance(d, Admit)} | {
        j for j, why in c.waits.items() if "time budget" not in why}
    not_reached = {j for j, why in c.waits.items() if "time budget" in why}
    assert not_reached and not (examined & not_reached)
    # The jobs not reached are bucket heads only: one reason per bucket, not one per queued job.
    assert len(not_reached) < len(st.queue) / 2


def test_without_a_budget_the_loop_never_reads_the_clock():
    # The cycle notes the time once when it starts; without a budget nothing it decides depends on the clock.
    calls: list[int] = []
    c = schedule(_mixed_queue(PLAIN), 0.0, clock=lambda: calls.append(1) or 0.0)
    assert c.complete and len(calls) == 1
    assert c.decisions == schedule(_mixed_queue(PLAIN), 0.0).decisions


def test_the_simulator_runs_every_cycle_to_the_end_whatever_the_budget():
    from cuberay.platform.sim.cluster import uniform_cluster
    from cuberay.platform.sim.engine import simulate
    from cuberay.platform.sim.trace import TraceJob

    jobs = [TraceJob(f"t{i}", i * 10.0, 300.0 + 37 * (i % 7), gpus=1 + i % 4, workers=1 + i % 3, tenant="ab"[i % 2])
            for i in range(120)]
    plain = simulate(jobs, uniform_cluster(4, gpus_per_node=8), policy=Policy())
    budgeted = simulate(jobs, uniform_cluster(4, gpus_per_node=8), policy=Policy(cycle_budget_s=0.0))
    assert budgeted.jcts == plain.jcts and budgeted.preemptions == plain.preemptions


def _queue_order_by_every_key(st, now):
    """The reference: every bucket head in one heap, re-keyed lazily as tenant shares grow."""
    import heapq

    from cuberay.platform.policy.admission import AdmissionCycle
    from cuberay.platform.policy.cluster_state import add_amounts

    cycle = AdmissionCycle(st, now)
    heap = [(cycle.key(b, b.entries[0]), i, b, 0) for i, b in enumerate(st.queue.buckets())]
    heapq.heapify(heap)
    out = []
    while heap:
        key, i, b, pos = heapq.heappop(heap)
        fresh = cycle.key(b, b.entries[pos])
        if fresh > key:
            heapq.heappush(heap, (fresh, i, b, pos))
            continue
        job = st.queue.get(b.entries[pos][2])
        out.append(job.id)
        add_amounts(cycle.usage.setdefault(job.tenant, {}), job.total, 1.0)
        cycle._shares.pop(job.tenant, None)
        if pos + 1 < len(b.entries):
            heapq.heappush(heap, (cycle.key(b, b.entries[pos + 1]), i, b, pos + 1))
    return out


def test_queue_order_per_tenant_heaps_give_the_order_of_every_key():
    import random

    from cuberay.platform.policy.order import queue_order
    from cuberay.platform.spec.resources import GPU, Resources

    rng = random.Random(7)
    quotas = [TenantQuota(t, Resources({GPU: g})) for t, g in (("a", 8), ("b", 16), ("c", 2), ("d", 0))]
    for policy in (Policy(), Policy(fair_share=False), POLICY_FIFO, Policy(las_promote=None)):
        st = state(cluster(nodes=4, gpus=8), *quotas, policy=policy)
        for i in range(400):
            j = job(f"q{i:03d}", rng.choice("abcd"), gpus=rng.choice((1, 2, 4)), workers=rng.choice((1, 2)),
                    priority=rng.choice((0, 0, 5)), t=rng.random() * 100)
            j.attained_gpu_s = rng.choice((0.0, 0.0, 5000.0, 40000.0))  # some in the second service band
            submit(st, j)
        st.usage = {"a": {GPU: 6.0}, "b": {GPU: 1.0}}
        assert [j.id for j in queue_order(st, 3600.0)] == _queue_order_by_every_key(st, 3600.0)


def test_a_replay_with_a_tick_runs_fewer_cycles_and_still_admits_every_job():
    from cuberay.platform.sim.cluster import uniform_cluster
    from cuberay.platform.sim.engine import simulate
    from cuberay.platform.sim.trace import TraceJob

    jobs = [TraceJob(f"t{i}", i * 3.0, 200.0 + 13 * (i % 5), gpus=1 + i % 2, tenant="ab"[i % 2]) for i in range(90)]
    # The oldest blocked gang holds the reservation at once (no overdue wait): without it, greedy backfill
    # packs differently when decisions come at other times, and no per-job bound holds.
    policy = replace(Policy(), overdue_after_s=None)
    every = simulate(jobs, uniform_cluster(2, gpus_per_node=8), policy=policy)
    assert simulate(jobs, uniform_cluster(2, gpus_per_node=8), policy=policy, cycle_every_s=0.0).jcts == every.jcts
    ticked = simulate(jobs, uniform_cluster(2, gpus_per_node=8), policy=policy, cycle_every_s=30.0)
    assert ticked.finished == every.finished == 90 and ticked.queued_at_end == 0
    assert ticked.cycles < every.cycles / 2
    # A job waits at most one tick longer than it would with a cycle after every event.
    assert ticked.avg_jct_s <= every.avg_jct_s + 30.0 + 1e-6 and ticked.max_queued >= 1
