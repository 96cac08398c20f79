"""Topology-aware gangs: domains from node labels, required and preferred placement, Kueue's baseline, and
what admission does with a locality (refusal at submit, waiting reasons, reservation, preemption, growth)."""

from __future__ import annotations

from types import SimpleNamespace

from cuberay.platform.policy.admission import Admit, Preempt, Reserve, schedule
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.placement import place
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.reservation import claim
from cuberay.platform.policy.topology import KUEUE, Locality, Topology
from cuberay.platform.spec.resources import CPU, GPU
from tests.unit.helpers import CLASSIC, add, quota, state, worker

BLOCK, RACK = "cuberay.io/block", "cuberay.io/rack"
TOPO = Topology((("block", BLOCK), ("rack", RACK)))


def racks(layout: dict[str, dict[str, int]], gpus: int = 8, topo: Topology = TOPO) -> Ledger:
    """block -> rack -> hosts; nodes ``<block>-<rack>-h<i>``."""
    ledger = Ledger()
    ledger.topology = topo
    for block, rs in layout.items():
        for rack, hosts in rs.items():
            for i in range(hosts):
                add(ledger, f"{block}-{rack}-h{i}", gpus=gpus, cpus=64, labels={BLOCK: block, RACK: rack})
    return ledger


def gang(id: str, workers: int, near: Locality | None, *, gpus: float = 1, tenant: str = "a", priority: int = 0,
         t: float = 0.0, max_workers: int | None = None, resizable: bool = False) -> JobRequest:
    return JobRequest(id, tenant, worker(gpus), workers, "pack", priority, t, max_workers=max_workers,
                      resizable=resizable, topology=near)


def rack_of(ledger: Ledger, node_ids) -> set[tuple[str, str]]:
    return {(ledger.nodes[n].labels[BLOCK], ledger.nodes[n].labels[RACK]) for n in node_ids}


def fill(ledger: Ledger, node_id: str, gpus: int, job_id: str | None = None) -> None:
    ledger.allocate(job_id or f"fill-{node_id}", worker(1), [node_id] * gpus)


# ---------------------------------------------------------------- domains


def test_a_domain_is_the_path_of_labels_and_a_node_without_them_is_in_none():
    ledger = racks({"b0": {"r1": 1}, "b1": {"r1": 1}})
    add(ledger, "loose", gpus=8, labels={BLOCK: "b0"})
    a, b, loose = ledger.nodes["b0-r1-h0"], ledger.nodes["b1-r1-h0"], ledger.nodes["loose"]
    assert TOPO.key(a, 1) == ("b0", "r1") != TOPO.key(b, 1) == ("b1", "r1")  # same rack name, other block
    assert TOPO.key(loose, 0) == ("b0",) and TOPO.key(loose, 1) is None
    assert TOPO.span([a, b]) == -1 and TOPO.span([a, loose]) == 0 and TOPO.span([a]) == TOPO.host_depth
    assert TOPO.names == ("block", "rack", "host") and TOPO.depth("rack") == 1 and TOPO.depth("zone") is None


# ---------------------------------------------------------------- placement


def test_required_rack_places_the_gang_inside_one_rack_even_when_pack_alone_would_cross_racks():
    ledger = racks({"b0": {"r0": 2, "r1": 2}})
    fill(ledger, "b0-r0-h0", 2)  # r0 has 6 + 8 free, r1 has 8 + 8 free (one half-empty node on r0)
    fill(ledger, "b0-r1-h0", 4)
    fill(ledger, "b0-r1-h1", 4)  # r1: 4 + 4 free
    blind = place(ledger, worker(1), 12, "pack")
    assert len(rack_of(ledger, blind)) == 2  # fewest nodes first: the 8 and the 6 ... then r1
    near = place(ledger, worker(1), 12, "pack", near=Locality("required", "rack"))
    assert rack_of(ledger, near) == {("b0", "r0")} and len(near) == 12


def test_required_waits_where_preferred_spreads_over_the_fewest_racks_of_one_block():
    ledger = racks({"b0": {"r0": 1, "r1": 1, "r2": 1}, "b1": {"r0": 1, "r1": 1}})
    assert place(ledger, worker(1), 12, "pack", near=Locality("required", "rack")) is None
    placed = place(ledger, worker(1), 12, "pack", near=Locality("preferred", "rack"))
    assert len(placed) == 12 and len(rack_of(ledger, placed)) == 2
    assert {b for b, _ in rack_of(ledger, placed)} in ({"b0"}, {"b1"})  # one block, two racks


def test_preferred_takes_the_fullest_rack_that_holds_the_gang_and_then_the_fewest_hosts():
    ledger = racks({"b0": {"r0": 2, "r1": 2, "r2": 2}})
    fill(ledger, "b0-r1-h0", 4)  # r1: 4 + 8 free; r0 and r2: 16 free
    fill(ledger, "b0-r2-h0", 6)
    fill(ledger, "b0-r2-h1", 6)  # r2: 2 + 2 free
    placed = place(ledger, worker(1), 8, "pack", near=Locality("preferred", "rack"))
    assert set(placed) == {"b0-r1-h1"}  # one host, in the fuller of the racks with a whole free host


def test_kueue_baseline_is_kep_2724s_bestfit_example():
    """A rack of four nodes holding 3, 3, 2 and 1 pods, a PodSet of 7: the two 3s, then the exact 1 (the KEP)."""
    ledger = racks({"b0": {"r0": 4}}, gpus=4)
    for node, used in (("b0-r0-h0", 1), ("b0-r0-h1", 1), ("b0-r0-h2", 2), ("b0-r0-h3", 3)):
        fill(ledger, node, used)
    placed = place(ledger, worker(1), 7, "pack", near=Locality("required", "rack", KUEUE))
    assert sorted(placed) == sorted(["b0-r0-h0"] * 3 + ["b0-r0-h1"] * 3 + ["b0-r0-h3"])


def test_kueue_baseline_takes_the_tightest_domain_of_the_lowest_level_that_fits():
    ledger = racks({"b0": {"r0": 2, "r1": 2}})
    fill(ledger, "b0-r1-h0", 5)  # r1: 3 + 8 free, tighter than r0 (16) and still holds 10
    placed = place(ledger, worker(1), 10, "pack", near=Locality("preferred", "rack", KUEUE))
    assert rack_of(ledger, placed) == {("b0", "r1")}
    cuberay = place(ledger, worker(1), 10, "pack", near=Locality("preferred", "rack"))
    assert rack_of(ledger, cuberay) == {("b0", "r1")}


def test_fill_puts_jobs_without_a_locality_in_the_fullest_rack_and_without_it_pack_is_unchanged():
    ledger = racks({"b0": {"r0": 2, "r1": 2}})
    fill(ledger, "b0-r0-h0", 6)  # r0 busier per node, r1 busier as a rack
    fill(ledger, "b0-r1-h0", 4)
    fill(ledger, "b0-r1-h1", 4)
    assert place(ledger, worker(1), 1, "pack") == ["b0-r0-h0"]  # the busiest node
    ledger.topology = Topology(TOPO.levels, fill=True)
    assert rack_of(ledger, place(ledger, worker(1), 1, "pack")) == {("b0", "r1")}


# ---------------------------------------------------------------- admission


def test_a_required_gang_no_rack_could_hold_is_refused_at_submit_naming_the_largest_rack():
    ledger = racks({"b0": {"r0": 2, "r1": 1}})
    s = state(ledger, policy=CLASSIC)
    reject = s.submit(gang("big", 20, Locality("required", "rack")))
    assert reject is not None
    assert "the largest rack, b0/r0, holds at most 16" in reject.reason and "preferred: rack" in reject.reason
    assert s.submit(gang("ok", 20, Locality("required", "block"))) is None
    unknown = s.submit(gang("typo", 2, Locality("required", "rak")))
    assert unknown is not None and "block, rack, host" in unknown.reason


def test_a_waiting_required_gang_says_which_rack_comes_closest():
    ledger = racks({"b0": {"r0": 1, "r1": 1}})
    fill(ledger, "b0-r0-h0", 2)
    fill(ledger, "b0-r1-h0", 4)
    s = state(ledger, policy=CLASSIC)
    s.submit(gang("g", 8, Locality("required", "rack")))
    cycle = schedule(s, 0.0)
    assert not cycle.admitted
    assert "no rack has 8 free GPUs for it (required: rack); the most free is rack b0/r0 with 6" in cycle.waits["g"]


def test_the_reservation_of_a_gang_with_a_locality_claims_inside_one_rack_and_keeps_to_it():
    ledger = racks({"b0": {"r0": 2, "r1": 2}})
    for node, used in (("b0-r0-h0", 5), ("b0-r0-h1", 7), ("b0-r1-h0", 5), ("b0-r1-h1", 7)):
        fill(ledger, node, used, f"busy-{node}")  # the two most free nodes are in different racks
    held = claim(ledger, gang("g", 12, Locality("required", "rack")))
    assert len(rack_of(ledger, held)) == 1 and sum(a[GPU] for a in held.values()) == 4
    assert len(rack_of(ledger, claim(ledger, gang("blind", 12, None)))) == 2
    first = rack_of(ledger, held)
    ledger.release("busy-b0-r1-h0")  # the other rack frees more: the claim stays where it was
    again = claim(ledger, gang("g", 12, Locality("required", "rack")), held)
    assert rack_of(ledger, again) == first


def test_a_reserved_required_gang_starts_inside_one_rack():
    ledger = racks({"b0": {"r0": 2, "r1": 2}})
    s = state(ledger, policy=CLASSIC)
    for node in ledger.nodes:
        s.submit(gang(f"small-{node}", 6, None, t=-1.0))
    for d in schedule(s, 0.0).admitted:
        s.start(d.job_id, d.node_ids, 0.0)
    s.submit(gang("g", 12, Locality("required", "rack"), t=1.0))
    out = schedule(s, 1.0)
    s.apply(out.decisions, 1.0)
    assert isinstance(s.reservation, Reserve) and s.reservation.job_id == "g"
    # Three nodes empty, one of them in r0: two whole nodes hold the gang, and blind they may be in two racks.
    for node in ("b0-r0-h0", "b0-r1-h0", "b0-r1-h1"):
        s.finish(f"small-{node}")
    out = schedule(s, 2.0)
    admit = next(d for d in out.decisions if isinstance(d, Admit))
    assert admit.job_id == "g" and rack_of(ledger, admit.node_ids) == {("b0", "r1")}


def test_preemption_for_a_preferred_gang_frees_one_rack_where_the_cheapest_victims_would_split_it():
    ledger = racks({"b0": {"r0": 1, "r1": 1}})
    s = state(ledger, quota("a"), quota("b"), policy=CLASSIC)
    # least work lost first: a (r0), b (r1), c (r1), d (r0); a and b alone would free 8 GPUs over two racks
    for job_id, node, t in (("a", "b0-r0-h0", 9.0), ("b", "b0-r1-h0", 8.0), ("c", "b0-r1-h0", 7.0),
                            ("d", "b0-r0-h0", 6.0)):
        s.submit(gang(job_id, 4, None, tenant="b", t=t))
        s.start(job_id, [node] * 4, t)
    s.submit(gang("hi", 8, Locality("preferred", "rack"), tenant="a", priority=5, t=10.0))
    out = schedule(s, 10.0)
    victims = {d.job_id for d in out.decisions if isinstance(d, Preempt)}
    admit = next(d for d in out.decisions if isinstance(d, Admit))
    assert victims == {"b", "c"} and rack_of(ledger, admit.node_ids) == {("b0", "r1")}


def test_an_elastic_required_gang_grows_only_inside_its_rack():
    ledger = racks({"b0": {"r0": 1, "r1": 1}}, gpus=4)
    s = state(ledger, policy=CLASSIC)
    s.submit(gang("e", 2, Locality("required", "rack"), max_workers=8, resizable=True))
    for _ in range(3):
        out = schedule(s, 0.0)
        s.apply(out.decisions, 0.0)
    alloc = ledger.allocations["e"]
    assert len(alloc.slots) == 4 and len(rack_of(ledger, alloc.node_ids)) == 1


def test_topology_never_reaches_jobs_that_ask_for_none_without_fill():
    ledger = racks({"b0": {"r0": 2, "r1": 2}})
    plain = Ledger()
    for node in ledger.nodes.values():
        plain.add_node(node.id, node.capacity, node.labels)
    for node, used in (("b0-r0-h0", 6), ("b0-r1-h0", 4), ("b0-r1-h1", 4)):  # as in the fill test above
        fill(ledger, node, used)
        fill(plain, node, used)
    for count in (1, 5, 12):
        assert place(ledger, worker(1), count, "pack") == place(plain, worker(1), count, "pack")
    assert ledger.nodes["b0-r0-h0"].capacity[CPU] == 64


# ---------------------------------------------------------------- found in review


def test_a_cpu_gang_required_in_one_rack_uses_that_racks_gpu_nodes_when_no_racks_plain_nodes_hold_it():
    # Each rack: 2 CPU-only nodes and 2 GPU nodes. 3 workers x 16 CPUs: no rack's plain nodes hold it (2 x 16
    # each), but every rack does with its GPU nodes; across the cluster the plain nodes alone would.
    ledger = Ledger()
    ledger.topology = Topology((("rack", RACK),))
    for rack in ("r0", "r1"):
        for i in range(2):
            add(ledger, f"{rack}-cpu{i}", cpus=16, labels={RACK: rack})
            add(ledger, f"{rack}-gpu{i}", gpus=8, cpus=64, labels={RACK: rack})
    req = worker(None, 16)
    placed = place(ledger, req, 3, "auto", near=Locality("required", "rack"))
    assert placed is not None and len({ledger.nodes[n].labels[RACK] for n in placed}) == 1
    assert place(ledger, req, 3, "auto") is not None  # and blind, the plain nodes first, as before


def test_a_one_worker_required_job_on_a_large_cluster_finds_the_labelled_nodes_beyond_the_index_candidates():
    from cuberay.platform.policy.node_index import INDEX_MIN_NODES

    ledger = Ledger()
    ledger.topology = Topology((("rack", RACK),))
    for i in range(INDEX_MIN_NODES + 48):
        add(ledger, f"loose-{i:04d}", gpus=2)  # tight and unlabelled: the index offers these first
    for i in range(40):
        add(ledger, f"racked-{i:02d}", gpus=8, labels={RACK: f"r{i // 8}"})
    for policy in ("pack", "best_fit"):
        placed = place(ledger, worker(1), 1, policy, near=Locality("required", "rack"))
        assert placed is not None and placed[0].startswith("racked-"), (policy, placed)


def test_a_required_gang_its_policy_cannot_place_in_any_rack_is_refused_for_the_policy_not_the_size():
    from cuberay.platform.policy.unplaceable import why_not

    ledger = racks({"b0": {"r0": 2, "r1": 2}})
    text = why_not(ledger.nodes.values(), worker(1), 3, "strict_spread", near=Locality("required", "rack"),
                   topology=TOPO)
    assert "placed strict_spread, which no rack allows" in text and "holds at most" not in text, text


def test_an_elastic_preferred_gang_starts_inside_one_rack_at_its_min_rather_than_spread_at_its_max():
    ledger = racks({"b0": {"r0": 1, "r1": 1}})
    s = state(ledger, policy=CLASSIC)
    s.submit(gang("e", 8, Locality("preferred", "rack"), max_workers=12, resizable=True))
    admit = next(d for d in schedule(s, 0.0).decisions if isinstance(d, Admit))
    assert len(admit.node_ids) == 8 and len(rack_of(ledger, admit.node_ids)) == 1


def test_crossing_a_level_no_node_is_labelled_with_costs_nothing_in_the_simulator():
    from cuberay.platform.policy.topology import DEFAULT_TOPOLOGY
    from cuberay.platform.sim.distance import HOST_SLOWDOWN, DistanceCost
    from cuberay.platform.sim.spread import Spread

    ledger = Ledger()
    ledger.topology = DEFAULT_TOPOLOGY  # the RDMA domain, which these nodes do not carry
    for i in range(4):
        add(ledger, f"h{i}", gpus=8)
    spread, trace = Spread(ledger, DistanceCost()), SimpleNamespace(slowdown=None)  # the job's own factors: none
    small = gang("small", 4, None)  # one host holds it: on two it crosses the host, and only that
    assert spread.factor(small, trace, ["h0", "h0", "h1", "h1"])[0] == HOST_SLOWDOWN  # type: ignore[arg-type]
    big = gang("big", 16, None)  # its size needs two hosts: no cost
    assert spread.factor(big, trace, ["h0"] * 8 + ["h1"] * 8)[0] == 1.0  # type: ignore[arg-type]
