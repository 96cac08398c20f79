"""Resizing running allocations: elastic jobs grow into idle capacity and shrink back before preemption.

The real ClusterState + schedule + apply on small clusters (policy/resize.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from cuberay.platform.policy.decisions import Resize
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.spec.resources import GPU
from tests.unit.helpers import (
    CLASSIC,
    admitted,
    assert_consistent,
    cluster,
    cycle,
    job,
    preempted,
    quota,
    state,
    submit,
)


def elastic(id: str, tenant: str = "a", *, workers: int = 2, max_workers: int = 4, t: float = 0.0,
            priority: int = 0, gpus: float = 1, placement: str = "pack"):
    return replace(job(id, tenant, gpus=gpus, workers=workers, max_workers=max_workers, t=t,
                       priority=priority, placement=placement), resizable=True)


def resized(c) -> dict[str, tuple[str, ...]]:
    return {d.job_id: d.node_ids for d in c.decisions if isinstance(d, Resize)}


def workers(st, job_id: str) -> int:
    return len(st.running[job_id].allocation.slots)


# -- grow -----------------------------------------------------------------------------------

def test_an_elastic_job_starts_with_min_and_grows_to_max_when_capacity_frees():
    st = state(cluster(nodes=2, gpus=2))
    submit(st, job("filler", gpus=1, workers=2))
    cycle(st, 0)
    submit(st, elastic("el", t=1))
    c = cycle(st, 1)
    assert len(admitted(c)["el"]) == 2 and resized(c) == {}  # only 2 fit: it starts with its min
    st.finish("filler")
    c = cycle(st, 2)
    assert len(resized(c)["el"]) == 4 and workers(st, "el") == 4
    assert "grew into idle capacity: 2 -> 4 workers" in c.resized[0].reason
    assert st.usage["a"][GPU] == pytest.approx(4)
    assert_consistent(st.ledger)
    assert resized(cycle(st, 3)) == {}  # at its max: nothing more


def test_growth_keeps_the_workers_it_has_and_never_passes_the_tenant_max():
    st = state(cluster(nodes=2, gpus=4), quota("a", 0, 3), quota("b"))
    submit(st, job("filler", "b", gpus=1, workers=8))
    cycle(st, 0)
    submit(st, elastic("el", max_workers=6, t=1))
    st.finish("filler")
    c = cycle(st, 1)
    start = admitted(c)["el"]
    cycle(st, 2)
    nodes = st.running["el"].allocation.node_ids
    assert workers(st, "el") == 3  # tenant a's max is 3 GPUs
    assert nodes[:2] == list(start)  # the first workers stay where they run


def test_no_growth_while_a_job_waits_for_the_capacity():
    st = state(cluster(nodes=2, gpus=2))
    submit(st, job("filler", "b", gpus=1, workers=3))
    cycle(st, 0)
    submit(st, elastic("el", t=1, max_workers=3), job("big", "b", gpus=1, workers=4, t=2))
    c = cycle(st, 2)
    assert "el" not in admitted(c)  # 1 free GPU: el's min of 2 does not fit either
    st.finish("filler")
    c = cycle(st, 3)
    assert set(admitted(c)) == {"el"}  # big (4) cannot start, el (2) can ...
    assert resized(c) == {}  # ... but the GPUs el could grow into are what big waits for


def test_no_growth_while_the_tenant_has_a_waiting_job():
    st = state(cluster(nodes=2, gpus=2), quota("a", 0, 3), quota("b"))
    submit(st, elastic("el"), job("mine", "a", gpus=1, workers=2, t=1))
    cycle(st, 0)
    c = cycle(st, 1)
    assert workers(st, "el") == 2 and resized(c) == {}  # mine waits for a's max: el must not take it


def test_a_job_that_is_not_resizable_never_grows():
    st = state(cluster(nodes=2, gpus=2))
    submit(st, job("filler", gpus=1, workers=2), job("fixed", gpus=1, workers=2, max_workers=4, t=1))
    cycle(st, 0)
    c = cycle(st, 1)
    st.finish("filler")
    assert resized(cycle(st, 2)) == {} and len(st.running["fixed"].allocation.slots) == 2, c


# -- shrink ---------------------------------------------------------------------------------

def test_a_waiting_job_of_the_same_tenant_takes_extras_back_instead_of_waiting():
    st = state(cluster(nodes=2, gpus=2))
    submit(st, elastic("el"))
    cycle(st, 0)
    assert workers(st, "el") == 4  # granted its max at start: nothing else waited
    submit(st, job("next", gpus=1, workers=2, t=1))
    c = cycle(st, 1)
    assert len(resized(c)["el"]) == 2 and workers(st, "el") == 2  # shrunk to its min, not below
    assert len(admitted(c)["next"]) == 2 and preempted(c) == {}
    assert "shrunk for next of the same tenant" in c.resized[0].reason
    assert_consistent(st.ledger)


def test_shrinks_only_as_many_extras_as_needed():
    st = state(cluster(nodes=2, gpus=2))
    submit(st, elastic("el"))
    cycle(st, 0)
    submit(st, job("small", gpus=1, workers=1, t=1))
    c = cycle(st, 1)
    assert len(resized(c)["el"]) == 3 and "small" in admitted(c)


def test_reclaim_shrinks_a_borrowers_extras_before_preempting_anyone():
    st = state(cluster(nodes=2, gpus=4), quota("a", 4), quota("b", 4))
    submit(st, elastic("el", "a", workers=4, max_workers=8))
    cycle(st, 0)
    assert workers(st, "el") == 8  # a borrows b's idle 4 GPUs
    submit(st, job("bjob", "b", gpus=1, workers=4, t=1))
    c = cycle(st, 1)
    assert preempted(c) == {}
    assert len(resized(c)["el"]) == 4 and len(admitted(c)["bjob"]) == 4
    assert c.resized[0].reason.startswith("reclaimed: tenant 'b' needs its guaranteed capacity back")
    assert st.usage["a"][GPU] == pytest.approx(4) and st.usage["b"][GPU] == pytest.approx(4)
    assert_consistent(st.ledger)


def test_reclaim_never_takes_a_borrower_below_its_guarantee():
    # a holds 6 of its guaranteed 6 via el (min 4 + 2 extras): b, borrowing, cannot take them back.
    st = state(cluster(nodes=2, gpus=4), quota("a", 6), quota("b", 2))
    submit(st, elastic("el", "a", workers=4, max_workers=6), job("bfill", "b", gpus=1, workers=2, t=1))
    cycle(st, 0)
    assert workers(st, "el") == 6
    submit(st, job("bmore", "b", gpus=1, workers=2, t=2))
    c = cycle(st, 2)
    assert resized(c) == {} and admitted(c) == {} and preempted(c) == {}


def test_a_lower_priority_job_never_shrinks_a_higher_priority_one():
    st = state(cluster(nodes=2, gpus=2))
    submit(st, elastic("el", priority=5))
    cycle(st, 0)
    submit(st, job("low", gpus=1, workers=2, t=1, priority=1))
    c = cycle(st, 1)
    assert resized(c) == {} and admitted(c) == {}


def test_a_higher_priority_job_of_another_tenant_shrinks_extras_instead_of_preempting():
    st = state(cluster(nodes=2, gpus=2), policy=CLASSIC)
    submit(st, elastic("el", "a"))
    cycle(st, 0)
    submit(st, job("urgent", "b", gpus=1, workers=2, t=1, priority=9))
    c = cycle(st, 1)
    assert preempted(c) == {} and len(resized(c)["el"]) == 2 and "urgent" in admitted(c)
    assert "higher-priority job urgent" in c.resized[0].reason


def test_only_extras_on_nodes_the_waiting_job_can_use_are_taken():
    ledger = Ledger()
    for name, labels in (("a100-0", {"gpu": "a100"}), ("v100-0", {"gpu": "v100"})):
        ledger.add_node(name, {GPU: 2, "CPU": 16}, labels)
    st = state(ledger)
    submit(st, elastic("el"))
    cycle(st, 0)
    assert workers(st, "el") == 4
    submit(st, replace(job("picky", gpus=1, workers=1, t=1, labels={"gpu": "v100"})))
    c = cycle(st, 1)
    assert resized(c)["el"].count("v100-0") == 1 and resized(c)["el"].count("a100-0") == 2
    assert admitted(c)["picky"] == ("v100-0",)


def test_a_failed_shrink_leaves_everything_as_it_was():
    st = state(cluster(nodes=2, gpus=2))
    submit(st, elastic("el"))
    cycle(st, 0)
    submit(st, job("huge", gpus=1, workers=4, t=1))  # needs el's min as well: shrinking cannot make room
    before = dict(st.ledger.allocations)
    c = cycle(st, 1)
    assert resized(c) == {} and admitted(c) == {}
    assert st.ledger.allocations == before and st.usage["a"][GPU] == pytest.approx(4)


def test_shrunk_then_grown_again_when_the_other_job_ends():
    st = state(cluster(nodes=2, gpus=2))
    submit(st, elastic("el"))
    cycle(st, 0)
    submit(st, job("next", gpus=1, workers=2, t=1))
    cycle(st, 1)
    st.finish("next")
    c = cycle(st, 2)
    assert len(resized(c)["el"]) == 4
    assert_consistent(st.ledger)


# -- ledger -----------------------------------------------------------------------------------

def test_ledger_resize_keeps_staying_slots_and_is_all_or_nothing():
    ledger = cluster(nodes=2, gpus=2)
    req = job("x", gpus=1).worker
    alloc = ledger.allocate("x", req, ["n0", "n1"])
    grown = ledger.resize("x", ["n0", "n1", "n1"])
    assert grown.slots[:2] == alloc.slots and ledger.nodes["n1"].free[GPU] == 0
    with pytest.raises(ValueError):
        ledger.resize("x", ["n0", "n0", "n0"])  # n0 has 2 cards
    assert ledger.allocations["x"] == grown
    ledger.resize("x", ["n1"])
    assert ledger.nodes["n0"].free[GPU] == 2 and ledger.nodes["n1"].free[GPU] == 1
    assert_consistent(ledger)


# -- serving ----------------------------------------------------------------------------------

def _service(id: str, tenant: str, *, workers: int, max_workers: int, t: float = 0.0):
    return replace(job(id, tenant, gpus=None, cpus=1, workers=workers, max_workers=max_workers, t=t,
                       placement="spread"), resizable=True, service=True)


def test_serve_replicas_above_min_grow_while_idle_and_are_reclaimed_first():
    # b's app holds its min of 2 replica slots (b's guarantee of 2 CPUs), borrows 4 more while a is idle,
    # and gives back exactly what a's guaranteed jobs need; its min is never touched.
    st = state(cluster(nodes=2, gpus=0, cpus=4), quota("a", guaranteed_cpus=6), quota("b", guaranteed_cpus=2))
    submit(st, _service("app", "b", workers=2, max_workers=6))
    cycle(st, 0)
    assert workers(st, "app") == 6
    submit(st, job("train", "a", gpus=None, cpus=1, workers=3, t=1, placement="spread"))
    c = cycle(st, 1)
    assert preempted(c) == {} and len(resized(c)["app"]) == 5 and "train" in admitted(c)  # 2 were free
    assert c.resized[0].reason.startswith("reclaimed: tenant 'a'")
    submit(st, job("more", "a", gpus=None, cpus=1, workers=3, t=2, placement="spread"))
    c = cycle(st, 2)
    assert workers(st, "app") == 2 and len(resized(c)["app"]) == 2  # down to its min, never below
    st.finish("train")
    st.finish("more")
    assert len(resized(cycle(st, 3))["app"]) == 6  # idle again: grown back to its max
    assert_consistent(st.ledger)
