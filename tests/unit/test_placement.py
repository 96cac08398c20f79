"""Placement policies on small hand-made clusters, with the exact nodes each worker gets."""

from __future__ import annotations

from collections import Counter

import pytest

from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.placement import (
    LABEL_RDMA_DOMAIN,
    Placement,
    place,
)
from cuberay.platform.policy.unplaceable import why_not
from cuberay.platform.spec.resources import (
    GPU,
    LABEL_ACCELERATOR,
    LABEL_POOL,
    LABEL_RDMA,
)
from tests.unit.helpers import add, cluster, worker


def busy(ledger: Ledger, node_id: str, gpus: float = 0, cpus: float = 0) -> None:
    """Mark ``gpus`` whole GPUs (and ``cpus`` CPUs) of a node as used by some other job."""
    job_id = f"busy-{node_id}-{len(ledger.allocations)}"
    if gpus:
        ledger.allocate(job_id, worker(gpus=1), [node_id] * int(gpus))
    if cpus:
        ledger.allocate(job_id + "-cpu", worker(gpus=None, cpus=cpus), [node_id])


def nodes(ledger: Ledger):
    return ledger.nodes.values()


# -- pack ---------------------------------------------------------------------------

def test_pack_puts_the_whole_gang_on_the_busiest_node_that_fits():
    ledger = cluster(nodes=3, gpus=4)
    busy(ledger, "n1", gpus=1)
    busy(ledger, "n2", gpus=2)
    assert place(nodes(ledger), worker(gpus=1), 2, "pack") == ["n2", "n2"]
    assert place(nodes(ledger), worker(gpus=1), 3, "pack") == ["n1"] * 3  # n2 has only 2 free
    assert place(nodes(ledger), worker(gpus=1), 4, "pack") == ["n0"] * 4


def test_pack_uses_the_fewest_nodes_when_no_single_node_fits():
    ledger = cluster(nodes=4, gpus=4)
    busy(ledger, "n0", gpus=3)
    busy(ledger, "n2", gpus=1)
    placed = place(nodes(ledger), worker(gpus=1), 7, "pack")
    assert placed is not None and len(set(placed)) == 2
    assert Counter(placed)["n1"] + Counter(placed)["n3"] == 4  # one whole free node ...
    assert Counter(placed)["n2"] == 3  # ... and the busy node that holds the rest


def test_pack_finishes_on_a_busy_node_so_that_free_nodes_stay_whole():
    ledger = cluster(nodes=3, gpus=4)
    busy(ledger, "n1", gpus=2)
    # n0 and n2 are free, n1 half used: 4 on n0 and the last 2 on n1 keeps n2 whole for a big gang.
    assert sorted(place(nodes(ledger), worker(gpus=1), 6, "pack")) == ["n0"] * 4 + ["n1"] * 2


def test_pack_spans_as_many_nodes_as_needed_and_no_more():
    ledger = cluster(nodes=3, gpus=4)
    placed = place(nodes(ledger), worker(gpus=1), 10, "pack")
    assert sorted(Counter(placed).values()) == [2, 4, 4]
    assert place(nodes(ledger), worker(gpus=1), 13, "pack") is None


def test_pack_of_fractional_workers_shares_cards_on_one_node():
    ledger = cluster(nodes=2, gpus=2)
    busy(ledger, "n1", gpus=1)
    assert place(nodes(ledger), worker(gpus=0.5), 2, "pack") == ["n1", "n1"]
    assert place(nodes(ledger), worker(gpus=0.5), 3, "pack") == ["n0"] * 3


# -- spread ---------------------------------------------------------------------------

def test_spread_takes_the_least_allocated_node_and_rescores_after_each_worker():
    ledger = cluster(nodes=3, gpus=4)
    busy(ledger, "n0", gpus=2)
    # n1, n2 at 0%, n0 at 50%; after one worker each n1, n2 are at 25%, still below n0.
    assert place(nodes(ledger), worker(gpus=1), 4, "spread") == ["n1", "n2", "n1", "n2"]
    # the fifth worker: all three at 50%, first by id.
    assert place(nodes(ledger), worker(gpus=1), 5, "spread") == ["n1", "n2", "n1", "n2", "n0"]


def test_spread_of_three_cpu_workers_lands_on_three_nodes():
    ledger = cluster(nodes=3, gpus=0, cpus=16)
    assert place(nodes(ledger), worker(gpus=None, cpus=2), 3, "spread") == ["n0", "n1", "n2"]
    busy(ledger, "n0", cpus=8)
    # n0 at 50%: n1 and n2 fill to 12.5% each before it is chosen again.
    assert place(nodes(ledger), worker(gpus=None, cpus=2), 4, "spread") == ["n1", "n2", "n1", "n2"]


# -- strict -----------------------------------------------------------------------------

def test_strict_pack_needs_one_node_that_holds_every_worker():
    ledger = cluster(nodes=2, gpus=4)
    busy(ledger, "n0", gpus=1)
    busy(ledger, "n1", gpus=1)
    assert place(nodes(ledger), worker(gpus=1), 3, "strict_pack") == ["n0"] * 3
    assert place(nodes(ledger), worker(gpus=1), 4, "strict_pack") is None
    assert place(nodes(ledger), worker(gpus=1), 4, "pack") is not None  # pack would split it


def test_strict_spread_uses_distinct_nodes_or_none():
    ledger = cluster(nodes=3, gpus=4)
    busy(ledger, "n0", gpus=3)
    busy(ledger, "n2", gpus=1)
    assert place(nodes(ledger), worker(gpus=1), 3, "strict_spread") == ["n1", "n2", "n0"]
    assert place(nodes(ledger), worker(gpus=1), 4, "strict_spread") is None  # 3 nodes, 8 GPUs free
    busy(ledger, "n0", gpus=1)  # n0 full: two nodes left
    assert place(nodes(ledger), worker(gpus=1), 3, "strict_spread") is None
    assert place(nodes(ledger), worker(gpus=1), 2, "strict_spread") == ["n1", "n2"]


# -- auto -------------------------------------------------------------------------------

def test_auto_places_accelerator_jobs_by_fragmentation_and_spreads_cpu_jobs():
    ledger = cluster(nodes=3, gpus=4, cpus=16)
    assert Placement.AUTO.resolve(worker(gpus=1)) is Placement.FRAG
    assert Placement.AUTO.resolve(worker(gpus=None, cpus=1)) is Placement.SPREAD
    assert place(nodes(ledger), worker(gpus=1, cpus=1), 3, "auto") == ["n0"] * 3
    assert place(nodes(ledger), worker(gpus=None, cpus=1), 3, "auto") == ["n0", "n1", "n2"]


# -- constraints ----------------------------------------------------------------------------

def test_accelerator_type_only_on_nodes_with_that_label():
    ledger = Ledger()
    add(ledger, "a100", gpus=8, labels={LABEL_ACCELERATOR: "A100"})
    add(ledger, "v100", gpus=4, labels={LABEL_ACCELERATOR: "V100"})
    add(ledger, "plain", gpus=8)
    v100 = worker(gpus="2(V100)")
    assert v100.node_selector() == {LABEL_ACCELERATOR: "V100"}
    assert place(nodes(ledger), v100, 2, "pack") == ["v100", "v100"]
    assert place(nodes(ledger), v100, 3, "pack") is None  # 16 GPUs free elsewhere do not count
    assert place(nodes(ledger), worker(gpus=2), 3, "pack") == ["a100"] * 3  # no type: any node


def test_rdma_fabric_needs_the_label_and_the_resource():
    ledger = Ledger()
    add(ledger, "roce", gpus=4, rdma=2, labels={LABEL_RDMA: "roce"})
    add(ledger, "ib", gpus=4, rdma=2, labels={LABEL_RDMA: "ib"})
    add(ledger, "none", gpus=8)
    w = worker(gpus=1, rdma="1(roce)")
    assert w.node_selector() == {LABEL_RDMA: "roce"}
    assert place(nodes(ledger), w, 2, "pack") == ["roce", "roce"]
    assert place(nodes(ledger), w, 3, "pack") is None  # the roce node has 2 rdma devices


def test_rdma_pack_keeps_the_gang_inside_one_rdma_domain():
    ledger = Ledger()
    for node_id, domain in (("n0", "d1"), ("n1", "d2"), ("n2", "d1"), ("n3", "d2")):
        add(ledger, node_id, gpus=4, rdma=4, labels={LABEL_RDMA: "ib", LABEL_RDMA_DOMAIN: domain})
    placed = place(nodes(ledger), worker(gpus=1, rdma="1(ib)"), 6, "pack")
    assert placed is not None and len(placed) == 6
    assert {ledger.nodes[n].labels[LABEL_RDMA_DOMAIN] for n in placed} == {"d1"}
    assert Counter(placed) == {"n0": 4, "n2": 2}


def test_node_selector_with_in_matches_any_listed_value():
    ledger = Ledger()
    for pool in ("a", "b", "c"):
        add(ledger, f"pool-{pool}", gpus=0, cpus=8, labels={LABEL_POOL: pool})
    w = worker(gpus=None, cpus=1, labels={LABEL_POOL: "in(a, b)"})
    assert place(nodes(ledger), w, 2, "strict_spread") == ["pool-a", "pool-b"]
    assert place(nodes(ledger), w, 3, "strict_spread") is None
    assert set(place(nodes(ledger), w, 12, "spread")) == {"pool-a", "pool-b"}


def test_dead_nodes_are_never_chosen():
    ledger = cluster(nodes=2, gpus=4)
    ledger.nodes["n0"].alive = False
    assert place(nodes(ledger), worker(gpus=1), 4, "pack") == ["n1"] * 4
    assert place(nodes(ledger), worker(gpus=1), 5, "pack") is None


# -- reservations and the "could it ever fit" check -------------------------------------------

def test_reserved_amounts_are_not_available():
    ledger = cluster(nodes=2, gpus=4)
    busy(ledger, "n0", gpus=1)  # n0 is the busier node: pack would choose it
    assert place(nodes(ledger), worker(gpus=1), 3, "pack") == ["n0"] * 3
    assert place(nodes(ledger), worker(gpus=1), 3, "pack", reserved={"n0": {GPU: 4}}) == ["n1"] * 3
    assert place(nodes(ledger), worker(gpus=1), 2, "pack", reserved={"n0": {GPU: 1}}) == ["n0"] * 2
    assert place(nodes(ledger), worker(gpus=1), 4, "pack", reserved={"n0": {GPU: 4}, "n1": {GPU: 1}}) is None


def test_empty_places_on_the_capacity_not_the_free_amounts():
    ledger = cluster(nodes=2, gpus=4)
    busy(ledger, "n0", gpus=4)
    busy(ledger, "n1", gpus=4)
    assert place(nodes(ledger), worker(gpus=1), 1, "pack") is None
    assert sorted(place(nodes(ledger), worker(gpus=1), 8, "pack", empty=True)) == ["n0"] * 4 + ["n1"] * 4
    assert place(nodes(ledger), worker(gpus=1), 9, "pack", empty=True) is None
    assert place(nodes(ledger), worker(gpus=1), 5, "strict_pack", empty=True) is None
    assert place(nodes(ledger), worker(gpus="1(V100)"), 1, "pack", empty=True) is None


# -- why not -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("req", "count", "policy", "expected"), [
    (worker(gpus="2(V100)"), 1, "pack", ["ray.io/accelerator-type=V100", "remove the constraint"]),
    (worker(gpus=8), 1, "pack", ["GPU=8", "largest matching node", "lower the per-worker resources"]),
    (worker(gpus=1), 13, "pack", ["at most 12", "lower workers"]),
    (worker(gpus=1), 5, "strict_pack", ["at most 4", "lower workers to 4 or use placement pack"]),
    (worker(gpus=1), 4, "strict_spread", ["4 distinct nodes", "only 3", "use placement spread"]),
])
def test_why_not_names_the_problem_and_the_fix(req, count, policy, expected):
    ledger = cluster(nodes=3, gpus=4)
    assert place(nodes(ledger), req, count, policy, empty=True) is None
    reason = why_not(nodes(ledger), req, count, policy)
    for text in expected:
        assert text in reason
