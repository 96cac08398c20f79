"""Ledger: allocate/release/restore round trips, per-card accelerator shares, node changes, invariants."""

from __future__ import annotations

import pytest

from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.nodes import pick_cards, workers_that_fit
from cuberay.platform.spec.resources import CPU, GPU
from tests.unit.helpers import (
    add,
    assert_consistent,
    cluster,
    gpus_used,
    snapshot,
    worker,
)

# -- round trips ------------------------------------------------------------------

def test_allocate_takes_resources_and_release_gives_them_back():
    ledger = cluster(nodes=2, gpus=4, cpus=16)
    before = snapshot(ledger)
    alloc = ledger.allocate("j1", worker(gpus=1, cpus=2), ["n0", "n0", "n1"])
    assert alloc.node_ids == ["n0", "n0", "n1"]
    assert alloc.total == {GPU: 3, CPU: 6}
    assert ledger.nodes["n0"].free == {GPU: 2, CPU: 12}
    assert ledger.nodes["n1"].free == {GPU: 3, CPU: 14}
    assert ledger.total_free == {GPU: 5, CPU: 26}
    assert_consistent(ledger)

    assert ledger.release("j1") == alloc
    assert snapshot(ledger) == before
    assert ledger.release("j1") is None  # releasing twice is harmless


def test_restore_undoes_a_release_on_the_same_cards():
    ledger = cluster(nodes=1, gpus=4)
    ledger.allocate("frac", worker(gpus=0.5), ["n0"])
    alloc = ledger.allocate("j1", worker(gpus=1), ["n0", "n0"])
    held = snapshot(ledger)
    ledger.release("j1")
    assert ledger.nodes["n0"].free[GPU] == 3.5
    ledger.restore(alloc)
    assert snapshot(ledger) == held
    assert ledger.allocations["j1"] is alloc
    assert_consistent(ledger)


def test_allocation_is_all_or_nothing():
    ledger = cluster(nodes=2, gpus=4)
    ledger.allocate("busy", worker(gpus=1), ["n1"] * 3)
    before = snapshot(ledger)
    with pytest.raises(ValueError, match="does not fit"):
        ledger.allocate("gang", worker(gpus=1), ["n0", "n0", "n1", "n1"])  # n1 has 1 free, not 2
    assert snapshot(ledger) == before
    assert "gang" not in ledger.allocations


def test_allocation_on_an_unknown_node_leaves_nothing_behind():
    ledger = cluster(nodes=2, gpus=4)
    before = snapshot(ledger)
    with pytest.raises(ValueError, match="does not have: gone"):
        ledger.allocate("gang", worker(gpus=1), ["n0", "n1", "gone"])  # was a KeyError after taking n0, n1
    assert snapshot(ledger) == before


def test_a_job_holds_at_most_one_allocation():
    ledger = cluster(nodes=1, gpus=4)
    ledger.allocate("j1", worker(gpus=1), ["n0"])
    with pytest.raises(ValueError, match="already holds"):
        ledger.allocate("j1", worker(gpus=1), ["n0"])
    assert ledger.nodes["n0"].free[GPU] == 3


def test_cpu_only_and_custom_resources_are_checked_per_node():
    ledger = Ledger()
    add(ledger, "n0", cpus=4, tpu_slice=2)
    ledger.allocate("j1", worker(gpus=None, cpus=2, custom={"tpu_slice": 1}), ["n0", "n0"])
    assert ledger.nodes["n0"].free == {CPU: 0, "tpu_slice": 0}
    with pytest.raises(ValueError):
        ledger.allocate("j2", worker(gpus=None, cpus=0.5), ["n0"])
    with pytest.raises(ValueError):  # a GPU worker never lands on a node without GPUs
        ledger.allocate("j3", worker(gpus=1), [add(ledger, "cpu-node", cpus=8).id])


# -- per-card accelerator shares ----------------------------------------------------

def test_two_half_gpu_workers_share_one_card():
    ledger = cluster(nodes=1, gpus=2)
    a = ledger.allocate("a", worker(gpus=0.5), ["n0"])
    b = ledger.allocate("b", worker(gpus=0.5), ["n0"])
    assert a.slots[0].cards == ((0, 0.5),)
    assert b.slots[0].cards == ((0, 0.5),)  # the fullest card that fits, not the empty one
    node = ledger.nodes["n0"]
    assert node.cards == [0.0, 1.0]
    assert node.full_cards == 1
    assert workers_that_fit(node, worker(gpus=1)) == 1
    assert_consistent(ledger)


def test_a_whole_gpu_worker_cannot_use_two_half_free_cards():
    ledger = cluster(nodes=1, gpus=2)
    ledger.allocate("a", worker(gpus=0.5), ["n0"])
    ledger.allocate("b", worker(gpus=0.5), ["n0"])  # card 0 full
    ledger.allocate("c", worker(gpus=0.5), ["n0"])  # card 1 half
    ledger.release("a")  # card 0 half again
    node = ledger.nodes["n0"]
    assert node.cards == [0.5, 0.5]
    assert node.free[GPU] == 1.0  # one GPU free in total ...
    assert workers_that_fit(node, worker(gpus=1)) == 0  # ... but not one free card
    assert workers_that_fit(node, worker(gpus=0.5)) == 2
    before = snapshot(ledger)
    with pytest.raises(ValueError):
        ledger.allocate("whole", worker(gpus=1), ["n0"])
    assert snapshot(ledger) == before


def test_four_quarter_gpu_workers_fill_one_card():
    ledger = cluster(nodes=1, gpus=2)
    alloc = ledger.allocate("q", worker(gpus=0.25), ["n0"] * 4)
    assert {s.cards for s in alloc.slots} == {((0, 0.25),)}
    assert ledger.nodes["n0"].cards == [0.0, 1.0]
    fifth = ledger.allocate("q5", worker(gpus=0.25), ["n0"])
    assert fifth.slots[0].cards == ((1, 0.25),)
    ledger.release("q")
    assert ledger.nodes["n0"].cards == [1.0, 0.75]
    assert_consistent(ledger)


def test_multi_gpu_worker_takes_whole_cards():
    ledger = cluster(nodes=1, gpus=4)
    ledger.allocate("frac", worker(gpus=0.5), ["n0"])
    alloc = ledger.allocate("two", worker(gpus=2), ["n0"])
    assert alloc.slots[0].cards == ((1, 1.0), (2, 1.0))
    assert ledger.nodes["n0"].full_cards == 1
    assert workers_that_fit(ledger.nodes["n0"], worker(gpus=2)) == 0
    with pytest.raises(ValueError):
        ledger.allocate("two-more", worker(gpus=2), ["n0"])


def test_pick_cards():
    assert pick_cards([1.0, 0.5, 0.25], 0.25) == ((2, 0.25),)  # fullest card that fits
    assert pick_cards([1.0, 0.5, 0.25], 0.5) == ((1, 0.5),)
    assert pick_cards([0.5, 0.5], 1.0) == ()
    assert pick_cards([1.0, 0.0, 1.0], 2.0) == ((0, 1.0), (2, 1.0))
    assert pick_cards([1.0, 0.0, 1.0], 3.0) == ()


# -- capacity questions ---------------------------------------------------------------

def test_workers_that_fit_counts_free_reserved_and_empty_capacity():
    ledger = cluster(nodes=1, gpus=4, cpus=16)
    node = ledger.nodes["n0"]
    w = worker(gpus=1, cpus=2)
    assert workers_that_fit(node, w) == 4
    ledger.allocate("j", w, ["n0"] * 3)
    assert workers_that_fit(node, w) == 1
    assert workers_that_fit(node, w, empty=True) == 4
    assert workers_that_fit(node, worker(gpus=None, cpus=2)) == 5  # CPU-bound: 10 free / 2
    assert workers_that_fit(node, w, reserved={GPU: 1}) == 0
    ledger.release("j")
    assert workers_that_fit(node, w, reserved={GPU: 2}) == 2
    assert workers_that_fit(node, worker(gpus=None, cpus=4), reserved={CPU: 8}) == 2
    assert workers_that_fit(node, worker(gpus=0.5), reserved={GPU: 1}) == 6


# -- node changes -----------------------------------------------------------------------

def test_remove_node_releases_the_jobs_that_had_workers_on_it():
    ledger = cluster(nodes=3, gpus=4)
    ledger.allocate("spans", worker(gpus=1), ["n0", "n1", "n1"])
    ledger.allocate("elsewhere", worker(gpus=2), ["n2"])
    version = ledger.version
    hit = ledger.remove_node("n1")
    assert hit == ["spans"]
    assert set(ledger.allocations) == {"elsewhere"}
    assert "n1" not in ledger.nodes
    assert ledger.nodes["n0"].free[GPU] == 4  # the job's other workers were released too
    assert ledger.total_capacity[GPU] == 8
    assert ledger.total_free[GPU] == 6
    assert ledger.version == version + 1
    assert ledger.remove_node("n1") == []  # unknown node: nothing happens
    assert ledger.version == version + 1
    assert_consistent(ledger)


def test_version_changes_with_the_node_set_only():
    ledger = Ledger()
    assert ledger.version == 0
    add(ledger, "n0", gpus=4)
    add(ledger, "n1", gpus=4)
    assert ledger.version == 2
    ledger.allocate("j", worker(gpus=1), ["n0"])
    ledger.release("j")
    assert ledger.version == 2
    ledger.remove_node("n0")
    assert ledger.version == 3


def test_re_adding_a_node_releases_its_jobs_and_resets_capacity():
    ledger = cluster(nodes=2, gpus=4)
    ledger.allocate("j", worker(gpus=1), ["n0", "n1"])
    add(ledger, "n0", gpus=8)
    assert "j" not in ledger.allocations
    assert ledger.total_capacity[GPU] == 12
    assert ledger.total_free[GPU] == 12
    assert gpus_used(ledger, "n1") == 0
    assert ledger.nodes["n0"].labels["ray.io/node-id"] == "n0"
    assert_consistent(ledger)


# -- invariants -------------------------------------------------------------------------

def test_check_invariants_passes_on_a_busy_ledger_and_catches_over_allocation():
    ledger = cluster(nodes=2, gpus=4)
    ledger.allocate("a", worker(gpus=1, cpus=4), ["n0"] * 4)
    ledger.allocate("b", worker(gpus=0.25), ["n1"] * 3)
    ledger.check_invariants()

    ledger.nodes["n0"].free[CPU] = -1.0
    with pytest.raises(AssertionError, match="n0 over-allocated on CPU"):
        ledger.check_invariants()
    ledger.nodes["n0"].free[CPU] = 0.0

    ledger.nodes["n1"].free[GPU] = 5.0
    with pytest.raises(AssertionError, match="frees more GPU"):
        ledger.check_invariants()
    ledger.nodes["n1"].free[GPU] = 3.25

    ledger.nodes["n1"].cards[0] = -0.5
    with pytest.raises(AssertionError, match="card 0"):
        ledger.check_invariants()
