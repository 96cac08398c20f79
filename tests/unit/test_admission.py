"""Admission: gangs, queue order, quotas, borrow/reclaim, priority and LAS preemption, reservation, backfill.

Each test drives the real ClusterState + schedule + apply on a small hand-made cluster.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

import pytest

from cuberay.platform.policy.admission import ClusterState, schedule
from cuberay.platform.policy.order import queue_order
from cuberay.platform.policy.scheduling import POLICIES, Policy, TenantQuota
from cuberay.platform.spec.resources import CPU, GPU, LABEL_ACCELERATOR, Resources
from tests.unit.helpers import (
    CLASSIC,
    add,
    admitted,
    cluster,
    cycle,
    job,
    preempted,
    quota,
    reserves,
    snapshot,
    state,
    submit,
)

NO_PREEMPTION = Policy(preempt=False, reclaim=False, overdue_after_s=None)


def usage_gpus(st: ClusterState, tenant: str) -> float:
    return st.usage.get(tenant, {}).get(GPU, 0.0)


# -- gangs ------------------------------------------------------------------------------

def test_a_gang_is_admitted_whole_or_not_at_all():
    st = state(cluster(nodes=3, gpus=4))
    submit(st, job("filler", gpus=1, workers=9))
    assert admitted(cycle(st)) == {"filler": ("n0",) * 4 + ("n1",) * 4 + ("n2",)}
    submit(st, job("gang", gpus=1, workers=4, t=1))
    before = snapshot(st.ledger)
    c = cycle(st, 1)
    assert admitted(c) == {}
    assert snapshot(st.ledger) == before  # no partial allocation for the 3 GPUs that are free
    assert "gang of 4 needs 4 GPU; free now 3 GPU" in c.waits["gang"]
    st.finish("filler")
    assert admitted(cycle(st, 2)) == {"gang": ("n0",) * 4}


def test_seed_deadlock_case_admits_three_gangs_then_the_fourth():
    # CubeStudio's seed: 3 nodes x 4 GPUs, 4 jobs x 4 workers x 1 GPU. Without gang admission each job
    # grabs 3 workers and none can start; with it exactly three run and the fourth waits.
    st = state(cluster(nodes=3, gpus=4))
    submit(st, *(job(f"j{i}", gpus=1, workers=4, t=i) for i in range(4)))
    c = cycle(st, 0)
    assert admitted(c) == {"j0": ("n0",) * 4, "j1": ("n1",) * 4, "j2": ("n2",) * 4}
    assert set(c.waits) == {"j3"}
    assert st.reservation is not None and st.reservation.job_id == "j3"
    st.finish("j1")
    c = cycle(st, 10)
    assert admitted(c) == {"j3": ("n1",) * 4}
    assert st.reservation is None and len(st.queue) == 0


def test_schedule_leaves_the_state_unchanged_until_apply():
    st = state(cluster(nodes=2, gpus=4), quota("a", 4, 8), quota("b", 4, 8))
    submit(st, job("a1", "a", gpus=1, workers=4))
    cycle(st, 0)
    submit(st, job("a2", "a", gpus=1, workers=4, t=1))
    cycle(st, 1)
    submit(st, job("b1", "b", gpus=1, workers=4, t=2), job("b2", "b", gpus=1, workers=2, t=3))
    before = snapshot(st.ledger)
    usage = {t: dict(u) for t, u in st.usage.items()}
    queued, running = {j.id for j in st.queue}, set(st.running)

    c = schedule(st, 5)
    assert set(admitted(c)) == {"b1"} and set(preempted(c)) == {"a2"}  # tentatively: a2 started last
    # b1, the oldest queued job, cannot start now: it holds the reservation from the start of the cycle,
    # starts (protected) by reclaiming a2, and the blocked b2 holds the reservation from the next cycle.
    assert [r.job_id for r in reserves(c)] == ["b1", None, "b2"]
    assert [(d.job_id, d.protected) for d in c.admitted] == [("b1", True)]
    assert snapshot(st.ledger) == before
    assert st.usage == usage
    assert {j.id for j in st.queue} == queued and set(st.running) == running
    assert schedule(st, 5).decisions == c.decisions  # same input, same answer

    st.apply(c.decisions, 5)
    assert snapshot(st.ledger) != before
    assert "b1" in st.running and "a2" in st.queue


# -- queue order --------------------------------------------------------------------------

def test_queue_order_is_priority_then_tenant_share_then_age():
    # No reservation here: a held reservation lets its holder go first, whatever the order says.
    st = state(cluster(nodes=2, gpus=4), quota("a", 4), quota("b", 4), policy=replace(NO_PREEMPTION, reserve=False))
    submit(st, job("a-run", "a", gpus=1, workers=4))
    cycle(st, 0)  # tenant a now uses all of its guarantee, b nothing
    submit(st,
           job("a-old", "a", gpus=1, workers=4, t=1),
           job("b-new", "b", gpus=1, workers=4, t=5),
           job("b-newer", "b", gpus=1, workers=4, t=6),
           job("a-urgent", "a", gpus=1, workers=4, priority=5, t=10))
    order = [j.id for j in queue_order(st)]
    assert order == ["a-urgent", "b-new", "b-newer", "a-old"]

    # One free node: each cycle admits exactly one job, in that order.
    started = []
    for now in range(1, 5):
        started += admitted(cycle(st, now))
        st.finish(started[-1])
    assert started == order


def test_fair_share_counts_usage_against_the_guarantee():
    st = state(cluster(nodes=4, gpus=4), quota("big", 12), quota("small", 2), policy=NO_PREEMPTION)
    submit(st, job("big-run", "big", gpus=1, workers=4), job("small-run", "small", gpus=1, workers=2))
    cycle(st, 0)
    # big uses 4/12 of its guarantee, small 2/2: big goes first although its job is younger.
    submit(st, job("small-next", "small", gpus=1, workers=1, t=1), job("big-next", "big", gpus=1, workers=1, t=2))
    assert [j.id for j in queue_order(st)] == ["big-next", "small-next"]


def test_queue_order_matches_the_admission_order_within_one_cycle():
    st = state(cluster(nodes=4, gpus=4), quota("a", 4), quota("b", 4))
    submit(st, *(job(f"a{i}", "a", gpus=1, workers=2, t=i) for i in range(3)))
    submit(st, *(job(f"b{i}", "b", gpus=1, workers=2, t=10 + i) for i in range(3)))
    shown = [j.id for j in queue_order(st)]
    # Each admission grows its tenant's share, so the tenants interleave although a's jobs are all older.
    assert shown == ["a0", "b0", "a1", "b1", "a2", "b2"]
    assert [d.job_id for d in schedule(st, 0).admitted] == shown


# -- quotas: max, borrowing ------------------------------------------------------------------

def test_submit_rejects_a_job_larger_than_the_tenant_max():
    st = ClusterState(cluster(nodes=4, gpus=8), {"vision": quota("vision", 8, 16)})
    rejected = st.submit(job("big", "vision", gpus=8, workers=4))
    assert rejected is not None and rejected.job_id == "big"
    assert rejected.reason == ("tenant 'vision' max gpu is 16 and the job asks 4 x 8 = 32. A job starts only when "
                               "its whole gang fits within its tenant's max: lower workers or each worker's gpu, or "
                               "ask an admin to raise tenants.vision.quota.max.gpu")
    assert "big" not in st.queue


def test_tenant_max_blocks_and_the_wait_reason_names_it():
    st = state(cluster(nodes=4, gpus=4), quota("a", 4, 8))
    submit(st, job("a1", "a", gpus=4, workers=1), job("a2", "a", gpus=4, workers=1, t=1),
           job("a3", "a", gpus=4, workers=1, t=2))
    c = cycle(st)
    assert set(admitted(c)) == {"a1", "a2"}  # 8 GPUs: the max, with 8 more idle
    assert "max GPU: 8 in use + 4 asked > max 8" in c.waits["a3"]
    assert usage_gpus(st, "a") == 8
    st.finish("a1")
    assert set(admitted(cycle(st, 1))) == {"a3"}


def test_a_tenant_borrows_idle_capacity_beyond_its_guarantee_up_to_its_max():
    st = state(cluster(nodes=3, gpus=4), quota("a", 4, 8), quota("b", 8, 12))
    submit(st, *(job(f"a{i}", "a", gpus=1, workers=4, t=i) for i in range(3)))
    c = cycle(st)
    assert set(admitted(c)) == {"a0", "a1"}  # guarantee 4 + 4 borrowed from b
    assert "max" in c.waits["a2"]
    assert usage_gpus(st, "a") == 8 and st.ledger.total_free[GPU] == 4


def test_a_tenant_under_its_guarantee_reclaims_from_the_newest_borrower():
    st = state(cluster(nodes=3, gpus=4), quota("a", 4, 8), quota("b", 8, 12))
    submit(st, job("a-old", "a", gpus=1, workers=4))
    cycle(st, 0)
    submit(st, job("a-new", "a", gpus=1, workers=4, t=10), job("b1", "b", gpus=1, workers=4, t=10))
    c = cycle(st, 10)
    assert set(admitted(c)) == {"a-new", "b1"}  # a borrows 4 of b's idle GPUs
    assert usage_gpus(st, "a") == 8

    submit(st, job("b2", "b", gpus=1, workers=4, t=20))  # b within its guarantee: 4 + 4 <= 8
    c = cycle(st, 20)
    victims = preempted(c)
    assert set(victims) == {"a-new"}
    assert victims["a-new"].by == "b2"
    assert victims["a-new"].reason.startswith("reclaimed")
    node = st.ledger.allocations.get("b2")
    assert admitted(c) == {"b2": tuple(node.node_ids)}
    assert "a-new" in st.queue and "a-new" not in st.running
    assert usage_gpus(st, "a") == 4 and usage_gpus(st, "b") == 8


def test_reclaim_never_takes_a_borrower_below_its_guarantee():
    st = state(cluster(nodes=2, gpus=4), quota("a", 4, 8), quota("b", 4, 8))
    submit(st, job("a-wide", "a", gpus=4, workers=2))  # 8 GPUs in ONE job: preempting it leaves a at 0 < 4
    cycle(st, 0)
    submit(st, job("b1", "b", gpus=1, workers=4, t=1))
    c = cycle(st, 1)
    assert preempted(c) == {} and admitted(c) == {}
    assert "a-wide" in st.running
    assert "waiting for capacity" in c.waits["b1"]


def test_reclaim_never_takes_a_borrower_below_its_guarantee_with_several_victims():
    st = state(cluster(nodes=2, gpus=4), quota("a", 4, 8), quota("b", 4, 8))
    for name, gpus, node, t in (("a1", 1, "n0", 0), ("a2", 1, "n0", 1), ("a3", 3, "n1", 2)):
        submit(st, job(name, "a", gpus=gpus, workers=1, t=t))
        st.start(name, [node], t)
    assert usage_gpus(st, "a") == 5  # borrows 1
    # b (guarantee 4, using nothing) needs a whole node: only preempting a1 AND a2 frees one.
    submit(st, job("b1", "b", gpus=1, workers=4, placement="strict_pack", t=5))
    c = cycle(st, 10)
    # Freeing n0 takes a1 and a2 (a would drop to 3), freeing n1 takes a3 (a would drop to 2): b waits.
    assert preempted(c) == {} and admitted(c) == {}, f"a taken below its guarantee by {sorted(preempted(c))}"
    assert usage_gpus(st, "a") == 5
    assert c.waits["b1"] == "waiting for capacity: gang of 4 needs 4 GPU; free now 3 GPU"


def test_reclaim_only_for_work_within_the_guarantee():
    st = state(cluster(nodes=2, gpus=4), quota("a", 4, 8), quota("b", 4, 8))
    submit(st, job("a1", "a", gpus=1, workers=4), job("a2", "a", gpus=1, workers=4, t=1))
    cycle(st, 0)
    submit(st, job("b-big", "b", gpus=1, workers=8, t=2))  # 8 > b's guarantee of 4: may not reclaim
    c = cycle(st, 2)
    assert preempted(c) == {} and admitted(c) == {}


def test_no_reclaim_under_the_fifo_baselines():
    st = state(cluster(nodes=2, gpus=4), quota("a", 4, 8), quota("b", 4, 8), policy=POLICIES["fifo-backfill"])
    submit(st, job("a1", "a", gpus=1, workers=4), job("a2", "a", gpus=1, workers=4, t=1))
    cycle(st, 0)
    submit(st, job("b1", "b", gpus=1, workers=4, t=2))
    assert preempted(cycle(st, 2)) == {}


# -- priority preemption ----------------------------------------------------------------------

def test_priority_preemption_takes_the_lowest_priority_newest_job_first():
    st = state(cluster(nodes=1, gpus=4))
    submit(st, job("mid", gpus=1, workers=2, priority=1))
    cycle(st, 0)
    submit(st, job("low-old", gpus=1, workers=1, t=1))
    cycle(st, 1)
    submit(st, job("low-new", gpus=1, workers=1, t=5))
    cycle(st, 5)
    assert st.ledger.total_free[GPU] == 0

    submit(st, job("urgent", gpus=1, workers=1, priority=9, t=10))
    c = cycle(st, 10)
    assert set(preempted(c)) == {"low-new"}
    assert "higher-priority job urgent (priority 9 > 0)" in preempted(c)["low-new"].reason
    assert set(admitted(c)) == {"urgent"}


def test_priority_preemption_frees_the_lowest_priority_jobs_before_higher_ones():
    st = state(cluster(nodes=1, gpus=4))
    for i, (name, prio) in enumerate((("mid", 1), ("low-a", 0), ("low-b", 0))):
        submit(st, job(name, gpus=1, workers=2 if name == "mid" else 1, priority=prio, t=i))
        cycle(st, i)
    submit(st, job("urgent", gpus=1, workers=2, priority=9, t=10))
    c = cycle(st, 10)
    assert set(preempted(c)) == {"low-a", "low-b"}  # two priority-0 jobs, not the priority-1 one
    assert set(admitted(c)) == {"urgent"} and "mid" in st.running


def test_priority_preemption_gives_back_victims_it_did_not_need():
    st = state(cluster(nodes=1, gpus=4))
    for i, (name, workers, prio) in enumerate((("mid", 2, 1), ("low", 1, 0), ("top", 1, 9))):
        submit(st, job(name, gpus=1, workers=workers, priority=prio, t=i))
        cycle(st, i)
    submit(st, job("urgent", gpus=1, workers=2, priority=9, t=10))
    c = cycle(st, 10)
    # "low" is tried first but does not free enough; "mid" alone does, so "low" keeps running.
    assert set(preempted(c)) == {"mid"}
    assert set(admitted(c)) == {"urgent"} and "low" in st.running


def test_equal_priority_never_preempts():
    st = state(cluster(nodes=1, gpus=4))
    submit(st, job("first", gpus=1, workers=4))
    cycle(st, 0)
    submit(st, job("second", gpus=1, workers=4, t=1))
    c = cycle(st, 100)
    assert preempted(c) == {} and admitted(c) == {}


def test_priority_preemption_within_a_tenant_at_its_max():
    # 4 GPUs idle, but a is at its max of 4: only its own lower-priority job can make room.
    st = state(cluster(nodes=2, gpus=4), quota("a", 4, 4), quota("b", 4))
    submit(st, job("low", "a", gpus=1, workers=4))
    cycle(st, 0)
    submit(st, job("b-run", "b", gpus=1, workers=2, t=1), job("urgent", "a", gpus=1, workers=4, priority=9, t=1))
    c = cycle(st, 5)
    assert set(preempted(c)) == {"low"} and set(admitted(c)) == {"urgent", "b-run"}
    assert "higher-priority job urgent" in preempted(c)["low"].reason
    assert usage_gpus(st, "a") == 4 and "low" in st.queue


def test_a_tenant_at_its_max_preempts_neither_its_equal_priority_jobs_nor_other_tenants():
    # Preempting b's lower-priority job would free the capacity, but would take a over its max.
    st = state(cluster(nodes=2, gpus=4), quota("a", 4, 4), quota("b", 0))
    submit(st, job("a-run", "a", gpus=1, workers=4, priority=9), job("b-run", "b", gpus=1, workers=4, t=1))
    cycle(st, 0)
    submit(st, job("a-urgent", "a", gpus=1, workers=4, priority=9, t=3))
    c = cycle(st, 5)
    assert preempted(c) == {} and admitted(c) == {}
    assert "is at its max GPU" in c.waits["a-urgent"]


def test_priority_preemption_frees_only_what_the_job_needs():
    st = state(cluster(nodes=2, gpus=4))
    submit(st, *(job(f"low{i}", gpus=1, workers=2, t=i) for i in range(4)))
    cycle(st, 0)
    submit(st, job("hi", gpus=1, workers=2, priority=1, t=10))
    c = cycle(st, 10)
    assert len(preempted(c)) == 1
    assert set(admitted(c)) == {"hi"}
    assert len(st.running) == 4


# -- least attained service (LAS) --------------------------------------------------------------------
# Threshold 100 GPU-s: a 4-GPU job leaves band 0 after 25 s of running, a 2-GPU job after 50 s.

# These tests pin the earlier LAS rules (promotion after waiting as long as it ran, least-work-lost
# victims, reservation at once); tests/unit/test_las_rules.py covers the default rules.
LAS = Policy(las_threshold_gpu_s=100.0, min_run_before_preempt_s=0.0, las_promote=1.0,
             las_promote_max_wait_s=6 * 3600.0, las_victims_most_attained=False, overdue_after_s=None)


def test_a_band_0_job_preempts_a_band_1_job_of_its_tenant_once_it_has_run_long_enough():
    st = state(cluster(nodes=1, gpus=4), policy=replace(LAS, min_run_before_preempt_s=40.0))
    submit(st, job("hog", gpus=4, workers=1))
    cycle(st, 0)
    submit(st, job("new", gpus=4, workers=1, t=10))
    assert preempted(cycle(st, 20)) == {}  # hog is still in band 0 (80 GPU-s)
    assert preempted(cycle(st, 39)) == {}  # band 1 (156 GPU-s), but has run only 39 s < 40
    c = cycle(st, 40)
    assert set(preempted(c)) == {"hog"} and set(admitted(c)) == {"new"}
    assert "less service (least-attained-service order)" in preempted(c)["hog"].reason
    assert st.queue.get("hog").attained_gpu_s == 160 and st.queue.band("hog") == 1


def test_a_protected_job_is_not_a_las_victim():
    st = state(cluster(nodes=1, gpus=4), policy=LAS)
    submit(st, job("u", gpus=2, workers=1), job("x", gpus=2, workers=1))
    cycle(st, 0)
    submit(st, job("h", gpus=2, workers=1, t=1))
    cycle(st, 1)  # h is the oldest queued job and cannot start: it holds the reservation
    st.finish("x")
    c = cycle(st, 2)
    assert [(d.job_id, d.protected) for d in c.admitted] == [("h", True)] and not st.running["u"].protected
    submit(st, job("new", gpus=2, workers=1, t=60))
    c = cycle(st, 60)  # both in band 1; h started last and lost less work: it would be the first victim
    assert set(preempted(c)) == {"u"} and "h" in st.running


def test_a_band_1_job_is_promoted_to_band_0_after_waiting_as_long_as_it_ran():
    st = state(cluster(nodes=1, gpus=4), policy=LAS)
    submit(st, job("hog", gpus=4, workers=1))
    cycle(st, 0)
    vet = job("vet", gpus=4, workers=1, t=10)
    vet.attained_gpu_s = 200.0  # ran 50 s on 4 GPUs before it was preempted: band 1
    submit(st, vet)
    submit(st, job("fresh", gpus=1, workers=4, t=20))
    assert [j.id for j in queue_order(st, 30)] == ["fresh", "vet"]  # band 0 first
    assert [j.id for j in queue_order(st, 60)] == ["vet", "fresh"]  # waited 50 s: band 0, and older
    st.cancel("fresh")
    assert preempted(cycle(st, 59)) == {}  # band 1 does not preempt band 1
    c = cycle(st, 60)
    assert set(preempted(c)) == {"hog"} and set(admitted(c)) == {"vet"}


def test_without_las_promotion_a_band_1_job_stays_behind():
    st = state(cluster(nodes=1, gpus=4), policy=replace(LAS, las_promote=None))
    submit(st, job("hog", gpus=4, workers=1))
    cycle(st, 0)
    vet = job("vet", gpus=4, workers=1, t=10)
    vet.attained_gpu_s = 200.0
    submit(st, vet, job("fresh", gpus=1, workers=4, t=20))
    assert [j.id for j in queue_order(st, 1000)] == ["fresh", "vet"]
    st.cancel("fresh")
    assert preempted(cycle(st, 1000)) == {}


# -- reservation and backfill ---------------------------------------------------------------------

def test_the_oldest_waiting_job_gets_a_sticky_reservation_that_backfill_may_not_use():
    st = state(cluster(nodes=3, gpus=4))
    for i, node in enumerate(("n0", "n1", "n2")):  # every node partly used: no node is whole
        submit(st, job(f"x{i}", gpus=1, workers=1, t=0))
        st.start(f"x{i}", [node], 0)
    submit(st, job("big", gpus=4, workers=2, t=2), job("small", gpus=1, workers=1, t=3))
    c = cycle(st, 2)
    res = reserves(c)
    assert [r.job_id for r in res] == ["big"] and st.reservation == res[0] and res[0].at == 2
    # The holder claims what is free now (3 of 4 GPUs on each of the two most-free nodes, one
    # 4-GPU worker each); backfill may not use claimed capacity, in this very cycle already.
    assert res[0].nodes == {"n0": {GPU: 3}, "n1": {GPU: 3}}
    assert admitted(c) == {"small": ("n2",)}  # backfilled, but only outside the reservation
    assert "capacity is held for" not in c.waits["big"]

    submit(st, job("small2", gpus=1, workers=3, t=4))
    c = cycle(st, 4)
    assert reserves(c) == [] and st.reservation.job_id == "big"  # sticky; same claim: no new decision
    assert admitted(c) == {} and "capacity is held for big" in c.waits["small2"]
    assert st.ledger.total_free[GPU] == 8  # 8 free GPUs, 3 asked: only the reservation stops it

    st.finish("x0")
    c = cycle(st, 5)  # the claim grows as its node frees, and a Reserve decision says so
    assert [(r.job_id, r.nodes, r.at) for r in reserves(c)] == [("big", {"n0": {GPU: 4}, "n1": {GPU: 3}}, 5)]
    assert admitted(c) == {} and st.reservation.nodes == {"n0": {GPU: 4}, "n1": {GPU: 3}}

    st.finish("x1")
    c = cycle(st, 6)
    assert admitted(c) == {"big": ("n0", "n1")} and c.admitted[0].protected
    assert st.running["big"].protected and not st.running["small"].protected
    # The holder is admitted, its reservation cleared, and the job blocked in this cycle reserves in turn:
    # on n2 only (3 one-GPU workers fit there), claiming the 2 GPUs free there now.
    assert [(r.job_id, r.nodes) for r in reserves(c)] == [
        ("big", {"n0": {GPU: 4}, "n1": {GPU: 4}}), (None, {}), ("small2", {"n2": {GPU: 2}})]
    assert st.reservation.job_id == "small2"


def test_reservation_holds_capacity_where_pack_would_backfill():
    st = state(cluster(nodes=3, gpus=4))
    for i, node in enumerate(("n0", "n1", "n2")):
        submit(st, job(f"x{i}", gpus=1, workers=1, t=0))
        st.start(f"x{i}", [node], 0)
    submit(st, job("big", gpus=4, workers=2, t=1), job("small", gpus=1, workers=1, t=2))
    c = cycle(st, 1)
    assert st.reservation.nodes == {"n0": {GPU: 3}, "n1": {GPU: 3}}  # equally free: by id
    assert admitted(c) == {"small": ("n2",)}  # pack alone would pick n0 (first of the equally busy)


def _four_nodes_used(gpus_used: tuple[int, ...] = (4, 1, 2, 3)) -> ClusterState:
    st = state(cluster(nodes=len(gpus_used), gpus=4), policy=NO_PREEMPTION)
    for i, used in enumerate(gpus_used):
        submit(st, job(f"x{i}", gpus=1, workers=used))
        st.start(f"x{i}", [f"n{i}"] * used, 0)
    return st


def test_the_claim_takes_the_most_free_nodes_until_they_cover_the_gang():
    st = _four_nodes_used()  # free: n0 0, n1 3, n2 2, n3 1
    submit(st, job("gang7", gpus=1, workers=7, placement="spread", t=1), job("one", gpus=1, workers=1, t=2),
           job("two", gpus=1, workers=1, t=3))
    c = cycle(st, 1)
    # 4 workers fit on n1 (claims its 3 free GPUs), the other 3 on n2 (claims its 2): the gang is
    # covered, so n3 stays out of the claim.
    assert st.reservation.job_id == "gang7" and st.reservation.nodes == {"n1": {GPU: 3}, "n2": {GPU: 2}}
    assert admitted(c) == {"one": ("n3",)}
    assert "capacity is held for gang7" in c.waits["two"]


def test_the_claim_omits_nodes_with_nothing_free_and_grows_as_nodes_free():
    st = _four_nodes_used()
    submit(st, job("gang14", gpus=1, workers=14, placement="spread", t=1))
    cycle(st, 1)
    # n1, n2, n3 host 12 workers; n0 would host the last 2 but has nothing free to claim yet.
    assert st.reservation.nodes == {"n1": {GPU: 3}, "n2": {GPU: 2}, "n3": {GPU: 1}}
    st.finish("x0")
    c = cycle(st, 2)  # n0 is now the most free node: it comes first and is claimed whole
    assert [(r.job_id, r.nodes) for r in reserves(c)] == [
        ("gang14", {"n0": {GPU: 4}, "n1": {GPU: 3}, "n2": {GPU: 2}, "n3": {GPU: 1}})]
    assert admitted(c) == {}


def test_without_reservation_backfill_takes_any_free_capacity():
    st = state(cluster(nodes=3, gpus=4), policy=replace(CLASSIC, reserve=False))
    for i, node in enumerate(("n0", "n1", "n2")):
        submit(st, job(f"x{i}", gpus=1, workers=1, t=0))
        st.start(f"x{i}", [node], 0)
    submit(st, job("big", gpus=4, workers=2, t=1), job("small", gpus=1, workers=1, t=2))
    c = cycle(st, 1)
    assert reserves(c) == [] and admitted(c) == {"small": ("n0",)}


@pytest.mark.parametrize(("policy", "small_starts"), [("fifo", False), ("fifo-backfill", True)])
def test_fifo_stops_at_the_first_blocked_job_fifo_backfill_does_not(policy, small_starts):
    st = state(cluster(nodes=2, gpus=4), policy=POLICIES[policy])
    submit(st, job("x", gpus=1, workers=2))
    cycle(st, 0)
    submit(st, job("big", gpus=4, workers=2, t=1), job("small", gpus=1, workers=1, priority=9, t=2))
    c = cycle(st, 2)
    assert ("small" in admitted(c)) is small_starts
    assert "big" not in admitted(c) and reserves(c) == []


def test_fifo_ignores_priority_and_tenant_share():
    st = state(cluster(nodes=1, gpus=4), policy=POLICIES["fifo"])
    submit(st, job("old", gpus=1, workers=4, t=0), job("urgent", gpus=1, workers=4, priority=9, t=1))
    assert [j.id for j in queue_order(st)] == ["old", "urgent"]
    assert set(admitted(cycle(st, 1))) == {"old"}


# -- rejections at submit ---------------------------------------------------------------------------

def test_submit_rejects_what_can_never_run_with_the_reason():
    ledger = cluster(nodes=2, gpus=4)
    add(ledger, "v100", gpus=2, labels={LABEL_ACCELERATOR: "V100"})
    st = state(ledger, quota("a"))
    unknown = st.submit(job("u", "nobody", gpus=1, workers=1))
    assert "unknown tenant 'nobody'" in unknown.reason and "known tenants: a" in unknown.reason
    huge = st.submit(job("h", "a", gpus=1, workers=11))
    assert "larger than the cluster" in huge.reason and "at most 10" in huge.reason
    too_wide = st.submit(job("w", "a", gpus=8, workers=1))
    assert "largest matching node" in too_wide.reason
    no_label = st.submit(job("l", "a", gpus="1(A100)", workers=1))
    assert "ray.io/accelerator-type=A100" in no_label.reason
    v100 = st.submit(job("v", "a", gpus="1(V100)", workers=3))
    assert "at most 2" in v100.reason  # only the V100 node counts
    assert len(st.queue) == 0
    assert st.submit(job("ok", "a", gpus="1(V100)", workers=2)) is None


def test_submit_checks_could_ever_fit_against_the_current_nodes():
    ledger = cluster(nodes=1, gpus=4)
    st = state(ledger)
    assert st.submit(job("j8", gpus=1, workers=8)) is not None
    add(ledger, "n1", gpus=4)  # a node joins: the cached answer must not stick
    assert st.submit(job("j8", gpus=1, workers=8)) is None


# -- elastic gangs ----------------------------------------------------------------------------------

def test_max_workers_takes_more_workers_when_they_fit():
    st = state(cluster(nodes=2, gpus=4))
    submit(st, job("elastic", gpus=1, workers=2, max_workers=6))
    c = cycle(st)
    assert len(admitted(c)["elastic"]) == 6
    submit(st, job("elastic2", gpus=1, workers=2, max_workers=6, t=1))
    assert len(admitted(cycle(st, 1))["elastic2"]) == 2  # only 2 left: the minimum


def test_max_workers_never_takes_a_tenant_over_its_max():
    st = state(cluster(nodes=2, gpus=4), quota("a", 0, 4))
    submit(st, job("elastic", "a", gpus=1, workers=2, max_workers=6))
    c = cycle(st)
    # 6 workers would pass a's max of 4 GPUs, so the gang starts with its minimum: admission tries
    # max_workers, then the minimum, not the largest count in between.
    assert admitted(c) == {"elastic": ("n0", "n0")}
    assert usage_gpus(st, "a") == 2
    submit(st, job("elastic2", "a", gpus=1, workers=1, max_workers=3, t=1))
    assert admitted(cycle(st, 1)) == {"elastic2": ("n0",)}  # 3 more would make 5 > 4: its minimum, 1
    assert usage_gpus(st, "a") == 3


# -- cancel and the reservation -------------------------------------------------------------------

def test_a_cancelled_reservation_holder_releases_its_reservation():
    st = state(cluster(nodes=2, gpus=4))
    submit(st, job("x", gpus=1, workers=1))
    st.start("x", ["n0"], 0)
    submit(st, job("big", gpus=4, workers=2, t=1), job("small", gpus=1, workers=1, t=2))
    c = cycle(st, 1)
    assert st.reservation.job_id == "big" and admitted(c) == {}
    st.cancel("big")
    c = cycle(st, 2)
    assert [r.job_id for r in reserves(c)] == [None] and st.reservation is None
    assert set(admitted(c)) == {"small"}


def test_the_reservation_goes_to_the_oldest_waiting_gang_not_the_first_in_queue_order():
    st = state(cluster(nodes=1, gpus=4))
    for i in range(4):
        submit(st, job(f"x{i}", "a", gpus=1, workers=1, t=i))
        st.start(f"x{i}", ["n0"], i)
    submit(st, job("s1", "a", gpus=1, workers=2, t=4))
    c = cycle(st, 4)
    assert [(r.job_id, r.nodes) for r in reserves(c)] == [("s1", {})]  # nothing free to claim yet
    # b uses nothing, so its gang comes first in queue order; s1 is older and keeps the reservation.
    submit(st, job("big", "b", gpus=1, workers=2, t=5))
    assert [j.id for j in queue_order(st)][0] == "big"
    st.finish("x0")
    c = cycle(st, 6)
    assert admitted(c) == {} and st.reservation.job_id == "s1" and st.reservation.nodes == {"n0": {GPU: 1}}
    st.finish("x1")
    c = cycle(st, 7)
    assert [(d.job_id, d.protected) for d in c.admitted] == [("s1", True)]


def test_a_single_one_gpu_worker_never_holds_the_reservation():
    # It starts on the next GPU that frees anyway; holding capacity for it gains nothing and would
    # pass the reservation along a stream of such jobs while a gang waits.
    st = state(cluster(nodes=1, gpus=2))
    for i in range(2):
        submit(st, job(f"x{i}", "a", gpus=1, workers=1, t=i))
        st.start(f"x{i}", ["n0"], i)
    submit(st, job("s1", "a", gpus=1, workers=1, t=2))
    c = cycle(st, 2)
    assert reserves(c) == [] and st.reservation is None and "s1" in c.waits


def test_the_reservation_goes_to_the_highest_priority_before_the_oldest():
    st = state(cluster(nodes=1, gpus=2), policy=NO_PREEMPTION)
    submit(st, job("x", gpus=1, workers=1))
    st.start("x", ["n0"], 0)
    submit(st, job("old", gpus=1, workers=2, t=1), job("urgent", gpus=2, workers=1, priority=5, t=2))
    cycle(st, 2)
    assert st.reservation.job_id == "urgent"


def test_a_holder_found_at_the_start_of_a_cycle_is_honoured_in_that_cycle():
    st = state(cluster(nodes=1, gpus=4))
    submit(st, job("x", gpus=1, workers=1))
    st.start("x", ["n0"], 0)
    submit(st, job("big", "a", gpus=4, workers=1, t=1), job("small", "b", gpus=1, workers=1, t=2))
    c = cycle(st, 2)  # small comes first in queue order (b uses nothing) but may not take big's claim
    assert [(r.job_id, r.nodes) for r in reserves(c)] == [("big", {"n0": {GPU: 3}})]
    assert admitted(c) == {} and "capacity is held for big" in c.waits["small"]


def test_a_holder_found_at_the_end_of_a_cycle_is_honoured_from_the_next_one():
    st = state(cluster(nodes=1, gpus=4))
    # old can start, so no holder at the start; big (tenant share 0) is tried next and blocks;
    # small backfills in the same cycle, before big holds anything.
    submit(st, job("old", "a", gpus=2, workers=1, t=0), job("big", "b", gpus=4, workers=1, t=1),
           job("small", "a", gpus=1, workers=1, t=2))
    c = cycle(st, 0)
    assert set(admitted(c)) == {"old", "small"}
    assert [(r.job_id, r.nodes) for r in reserves(c)] == [("big", {"n0": {GPU: 1}})]
    submit(st, job("small2", "a", gpus=1, workers=1, t=3))
    st.finish("old")
    c = cycle(st, 1)
    assert admitted(c) == {} and st.reservation.nodes == {"n0": {GPU: 3}}
    assert "capacity is held for big" in c.waits["small2"]
    st.finish("small")
    assert set(admitted(cycle(st, 2))) == {"big"}


def test_a_job_blocked_by_its_tenant_max_does_not_hold_the_reservation():
    st = state(cluster(nodes=2, gpus=4), quota("a", 0, 4), quota("b", 0))
    submit(st, job("a-run", "a", gpus=4, workers=1), job("x", "b", gpus=1, workers=1, t=0.5))
    cycle(st, 0)
    submit(st, job("a-old", "a", gpus=4, workers=1, t=1), job("b-big", "b", gpus=4, workers=1, t=2))
    c = cycle(st, 2)
    assert "is at its max GPU" in c.waits["a-old"]
    assert [r.job_id for r in reserves(c)] == ["b-big"]  # the oldest capacity-blocked job, at the end
    st.finish("a-run")
    c = cycle(st, 3)  # a-old is tried first (a now uses nothing) but n0 is claimed by b-big
    assert admitted(c) == {"b-big": ("n0",)} and st.reservation.job_id == "a-old"


def test_tenant_quota_in_cpus():
    st = ClusterState(cluster(nodes=2, gpus=0, cpus=8),
                      {"cpu": TenantQuota("cpu", Resources({CPU: 4}), Resources({CPU: 6}))})
    submit(st, job("c1", "cpu", gpus=None, cpus=2, workers=2), job("c2", "cpu", gpus=None, cpus=2, workers=2, t=1))
    c = cycle(st)
    assert set(admitted(c)) == {"c1"} and "max CPU: 4 in use + 4 asked > max 6" in c.waits["c2"]


# -- starvation ------------------------------------------------------------------------------------
# Starvation: a 64-GPU gang behind an endless stream of 1-GPU jobs starts within a bounded delay.
#
# An 8-node x 8-GPU cluster is kept full by 1-GPU jobs of duration D that arrive faster than they
# finish (one a second against 64 / D a second). At time T a 64-GPU gang arrives. Under the cuberay
# policy the reservation goes to the oldest waiting gang (a single 1-GPU job never holds one): the
# gang holds it at once, claims every GPU that frees and starts within D. Under the baselines without a reservation every GPU that frees is backfilled by
# a small job at once, so the gang never sees 64 free GPUs: the same loop shows it still waiting after 15 D.

D = 100          # seconds each small job runs
ARRIVE_EVERY = 1  # one small job a second: 100 per D, against 64 per D the cluster can serve
T_BIG = 3 * D     # the gang arrives once the stream is in its steady state (staggered finishes)


def run_stream(policy: Policy, horizon: float, big_tenant: str = "research",
               big_shape: tuple[int, int] = (64, 1)) -> tuple[float | None, int, ClusterState]:
    """Drive ClusterState + schedule with a one-second clock.

    ``big_shape`` is the gang's (workers, GPUs per worker). Returns when the big gang started
    (None: not within ``horizon``), how many small jobs were queued when it arrived, and the final state.
    """
    st = ClusterState(cluster(nodes=8, gpus=8, cpus=64),
                      {"stream": TenantQuota("stream"), "research": TenantQuota("research")}, policy)
    finishes: list[tuple[float, str]] = []
    backlog = n = now = 0
    while now <= horizon:
        while finishes and finishes[0][0] <= now:
            st.finish(heapq.heappop(finishes)[1])
        if now % ARRIVE_EVERY == 0:
            n += 1
            assert st.submit(job(f"s{n}", "stream", gpus=1, workers=1, t=now)) is None
        if now == T_BIG:
            backlog = len(st.queue)
            workers, gpus = big_shape
            assert st.submit(job("big", big_tenant, gpus=gpus, workers=workers, t=now)) is None
        c = schedule(st, now)
        st.apply(c.decisions, now)
        for d in c.admitted:
            if d.job_id == "big":
                return now, backlog, st
            heapq.heappush(finishes, (now + D, d.job_id))
        now += 1
    return None, backlog, st


@pytest.mark.parametrize("big_tenant", ["stream", "research"])
@pytest.mark.parametrize("big_shape", [(64, 1), (8, 8)], ids=["64x1gpu", "8x8gpu"])
def test_a_64_gpu_gang_behind_a_stream_of_1_gpu_jobs_starts_within_a_bounded_delay(big_shape, big_tenant):
    # Whatever its tenant and shape, the gang takes the reservation at once (a single 1-GPU job never
    # holds one, however old), claims the cluster as it frees and starts when the wave running at T_BIG
    # ends. The first 64 small jobs started one a second at 0..63 s, so every wave starts at k*D..k*D+63:
    # the one running at T_BIG = 3 D ends at 3 D + 63. 8 x 8 GPUs: each worker needs a whole node,
    # which the stream keeps fragmented.
    started, backlog, st = run_stream(CLASSIC, horizon=T_BIG + 10 * D, big_tenant=big_tenant, big_shape=big_shape)
    assert backlog == (T_BIG + 1) - 3 * 64  # 301 arrived, 3 waves of 64 started: the stream outran the cluster
    assert started is not None, "the 64-GPU gang never started"
    assert started - T_BIG == 63
    assert len(st.queue) == (started + 1) - 3 * 64  # the stream queued behind it, no 4th wave started


def test_a_64_gpu_gang_behind_a_stream_of_1_gpu_jobs_starts_within_about_d():
    # The gang's tenant uses nothing, so it comes first in queue order: it should reserve the cluster
    # at once and start when the jobs running at T_BIG have finished.
    started, _, st = run_stream(CLASSIC, horizon=T_BIG + 5 * D)
    assert started is not None, "the 64-GPU gang never started"
    assert started - T_BIG == 63  # the last job of the wave running at T_BIG started at 2 D + 63


@pytest.mark.parametrize("big_tenant", ["stream", "research"])
@pytest.mark.parametrize("policy", [POLICIES["fifo-backfill"], replace(CLASSIC, reserve=False)],
                         ids=["fifo-backfill", "cuberay-without-reservation"])
def test_without_a_reservation_the_gang_starves(policy, big_tenant):
    started, _, st = run_stream(policy, horizon=T_BIG + 15 * D, big_tenant=big_tenant)
    assert started is None, f"started after {started - T_BIG}s"
    assert "big" in st.queue
    assert st.ledger.total_free["GPU"] == 0  # small jobs kept every GPU busy all along


def test_a_service_stays_in_band_0_and_is_never_a_las_victim():
    st = state(cluster(nodes=1, gpus=4), policy=LAS)
    submit(st, job("train", gpus=2, workers=1))
    cycle(st, 0)
    svc = job("svc", gpus=2, workers=1, t=1)
    svc.service = True
    submit(st, svc)
    cycle(st, 1)
    submit(st, job("new", gpus=2, workers=1, t=100))
    # Both ran ~100 s on 2 GPUs (> 100 GPU-s). Were svc a job, it would be the first victim: it
    # started last and loses less work. As a service it stays in band 0 and the training job goes.
    c = cycle(st, 100)
    assert set(preempted(c)) == {"train"} and "svc" in st.running
    assert st.band_of(svc) == 0 and st.queue.band("train") == 1
