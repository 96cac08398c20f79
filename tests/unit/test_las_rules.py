"""The least-attained-service rules and the starvation guard, one rule per test.

Threshold 100 GPU-s: a 4-GPU job leaves band 0 after 25 s of running, a 2-GPU job after 50 s.
Promotion: a band-1 job returns to band 0 after waiting ``las_promote`` times its run time per card.
The reservation goes to the gang that has waited longest in all, once past ``overdue_after_s``.
"""

from __future__ import annotations

from dataclasses import replace

from cuberay.platform.policy.order import queue_order
from cuberay.platform.policy.reservation import waited
from cuberay.platform.policy.scheduling import Policy
from tests.unit.helpers import CLASSIC, admitted, cluster, cycle, job, preempted, quota, reserves, state, submit

LAS = Policy(las_threshold_gpu_s=100.0, min_run_before_preempt_s=0.0, las_promote=4.0,
             las_promote_max_wait_s=None, las_victims_most_attained=True, reserve=False)


def test_a_job_drops_to_band_1_exactly_at_the_threshold_and_only_then_is_a_las_victim():
    st = state(cluster(nodes=1, gpus=4), policy=LAS)
    submit(st, job("hog", gpus=4, workers=1))
    cycle(st, 0)
    submit(st, job("new", gpus=4, workers=1, t=10))
    assert preempted(cycle(st, 24)) == {}  # 96 GPU-s: still band 0
    c = cycle(st, 25)  # 100 GPU-s: band 1
    assert set(preempted(c)) == {"hog"} and set(admitted(c)) == {"new"}
    assert st.queue.band("hog") == 1


def test_the_minimum_run_protects_a_fresh_band_1_job():
    st = state(cluster(nodes=1, gpus=4), policy=replace(LAS, min_run_before_preempt_s=60.0))
    submit(st, job("hog", gpus=4, workers=1))
    cycle(st, 0)
    submit(st, job("new", gpus=4, workers=1, t=10))
    assert preempted(cycle(st, 59)) == {}
    assert set(preempted(cycle(st, 60))) == {"hog"}


def vet_queue(policy: Policy, attained: float):
    """A 4-GPU node held by ``hog``; ``vet`` (band 1, ``attained`` GPU-s on 4 cards) and ``fresh`` queued."""
    st = state(cluster(nodes=1, gpus=4), policy=policy)
    submit(st, job("hog", gpus=4, workers=1))
    cycle(st, 0)
    vet = job("vet", gpus=4, workers=1, t=10)
    vet.attained_gpu_s = attained
    submit(st, vet, job("fresh", gpus=1, workers=4, t=20))
    return st


def test_promotion_after_waiting_four_times_the_run_time_per_card():
    st = vet_queue(LAS, attained=200.0)  # ran 50 s on 4 cards: promoted after 200 s queued (since t=10)
    assert [j.id for j in queue_order(st, 209)] == ["fresh", "vet"]
    assert [j.id for j in queue_order(st, 210)] == ["vet", "fresh"]  # band 0 again, and older


def test_promotion_is_uncapped_unless_a_cap_is_set():
    week = 4 * 7 * 24 * 3600.0  # ran a week on 4 cards
    st = vet_queue(LAS, attained=week)
    assert [j.id for j in queue_order(st, 10 + 6 * 3600)] == ["fresh", "vet"]
    st = vet_queue(replace(LAS, las_promote_max_wait_s=6 * 3600.0), attained=week)
    assert [j.id for j in queue_order(st, 10 + 6 * 3600)] == ["vet", "fresh"]


def test_las_victims_go_most_attained_first():
    # a started first with a long history; b started later with none. Both are in band 1 at t=60.
    # By least work lost, b (110 GPU-s since start) would go before a (120); by attained service a goes.
    def run(policy: Policy) -> set[str]:
        st = state(cluster(nodes=1, gpus=4), policy=policy)
        a = job("a", gpus=2, workers=1)
        a.attained_gpu_s = 1000.0
        submit(st, a)
        cycle(st, 0)
        submit(st, job("b", gpus=2, workers=1, t=5))
        cycle(st, 5)
        submit(st, job("new", gpus=2, workers=1, t=60))
        return set(preempted(cycle(st, 60)))

    assert run(LAS) == {"a"}
    assert run(replace(LAS, las_victims_most_attained=False)) == {"b"}


def test_waited_counts_all_time_queued_across_preemptions():
    j = job("j", gpus=1, workers=4, t=100)
    assert waited(j, 400) == 300
    j.attained_gpu_s = 4 * 50.0  # ran 50 s on 4 cards since submission
    assert waited(j, 400) == 250


GUARD = replace(CLASSIC, overdue_after_s=100.0, overdue_multi_node_only=False)  # these gangs fit one node


def blocked_gangs(policy: Policy):
    """One 4-GPU node held by ``hog``; ``old`` (submitted at 0, ran 100 s) and ``young`` (at 50) wait."""
    st = state(cluster(nodes=1, gpus=4), policy=policy)
    submit(st, job("hog", gpus=1, workers=4))
    cycle(st, 0)
    old = job("old", gpus=1, workers=4, t=0)
    old.attained_gpu_s = 4 * 100.0
    submit(st, old, job("young", gpus=1, workers=4, t=50))
    return st


def test_no_reservation_before_a_gang_has_waited_long_enough():
    st = blocked_gangs(GUARD)
    assert reserves(cycle(st, 149)) == [] and st.reservation is None  # young: 99 s, old: 49 s


def test_the_reservation_goes_to_the_gang_that_waited_longest_in_all():
    st = blocked_gangs(GUARD)
    cycle(st, 149)
    assert [r.job_id for r in reserves(cycle(st, 150))] == ["young"]  # 100 s queued; old only 50 s
    st.finish("hog")
    c = cycle(st, 151)
    assert [(d.job_id, d.protected) for d in c.admitted] == [("young", True)]


def test_without_the_wait_guard_the_oldest_submission_reserves_at_once():
    st = blocked_gangs(replace(GUARD, overdue_after_s=None))
    assert st.reservation is None
    assert [r.job_id for r in reserves(cycle(st, 1))] == ["old"]


def test_an_overdue_job_is_promoted_preempts_and_is_protected_once_started():
    st = state(cluster(nodes=1, gpus=4),
               policy=replace(LAS, las_promote=None, overdue_after_s=100.0, overdue_multi_node_only=False))
    submit(st, job("hog", gpus=4, workers=1))
    cycle(st, 0)
    vet = job("vet", gpus=4, workers=1, t=-1000)
    vet.attained_gpu_s, vet.queued_at = 4 * 1000.0, 0.0  # ran 1000 s of its 1000 s since submission
    submit(st, vet)
    assert preempted(cycle(st, 99)) == {}  # queued 99 s in all: band 1, as hog
    c = cycle(st, 100)
    assert set(preempted(c)) == {"hog"} and [(d.job_id, d.protected) for d in c.admitted] == [("vet", True)]
    submit(st, job("fresh", gpus=4, workers=1, t=200))
    assert preempted(cycle(st, 200)) == {} and "vet" in st.running  # band 1, but protected


def overdue_vet_preempts(policy: Policy, workers: int) -> bool:
    """Two 2-GPU nodes held by ``hog`` (band 1); ``vet``, 2 GPUs in ``workers`` workers, band 1 and queued 100 s
    in all, arrives. Does it preempt, protected?"""
    st = state(cluster(nodes=2, gpus=2), policy=policy)
    submit(st, job("hog", gpus=1, workers=4))
    cycle(st, 0)
    vet = job("vet", gpus=2 / workers, workers=workers, placement="strict_spread", t=-1000)
    vet.attained_gpu_s, vet.queued_at = 2 * 1000.0, 0.0
    submit(st, vet)
    c = cycle(st, 100)
    return set(preempted(c)) == {"hog"} and [(d.job_id, d.protected) for d in c.admitted] == [("vet", True)]


def test_only_multi_node_gangs_become_overdue():
    guard = replace(LAS, las_promote=None, overdue_after_s=100.0, overdue_multi_node_only=True)
    assert overdue_vet_preempts(guard, workers=2)  # one worker per node: a multi-node gang
    assert not overdue_vet_preempts(guard, workers=1)  # waited as long, but fits one node: stays band 1
    assert overdue_vet_preempts(replace(guard, overdue_multi_node_only=False), workers=1)


def reclaimers(policy: Policy) -> dict[str, str]:
    """Tenant a (guarantee 4) has nothing; borrower b holds the node with a band-0 job. Who preempts it?"""
    out = {}
    for name, attained in (("fresh", 0.0), ("vet", 1000.0)):  # band 0, band 1 (threshold 100 GPU-s)
        st = state(cluster(nodes=1, gpus=4), quota("a", 4), quota("b"), policy=policy)
        submit(st, job("b1", "b", gpus=4, workers=1))
        cycle(st, 0)
        a = job(name, "a", gpus=4, workers=1, t=5)
        a.attained_gpu_s = attained
        submit(st, a)
        out[name] = ",".join(sorted(preempted(cycle(st, 10))))  # b1 ran 40 GPU-s: band 0, no LAS victim
    return out


def test_under_las_only_first_band_jobs_reclaim():
    assert reclaimers(replace(LAS, reclaim_first_band_only=True)) == {"fresh": "b1", "vet": ""}
    assert reclaimers(replace(LAS, reclaim_first_band_only=False)) == {"fresh": "b1", "vet": "b1"}
