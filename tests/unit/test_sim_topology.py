"""The simulator with a topology: racked layouts, the distance cost, where gangs landed, the Kueue baseline,
topology and slowdown columns of a generic trace, and `cuberay sim --distance-cost` on the shipped example."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuberay.cli import main
from cuberay.errors import SpecError
from cuberay.platform.policy.topology import Topology
from cuberay.platform.sim.cluster import BLOCK_LABEL, RACK_LABEL, racked_cluster
from cuberay.platform.sim.distance import HOST_SLOWDOWN, LEVEL_SLOWDOWN, DistanceCost
from cuberay.platform.sim.engine import simulate
from cuberay.platform.sim.inputs import load_trace
from cuberay.platform.sim.trace import TraceJob

REPO = Path(__file__).resolve().parents[2]
TOPO = Topology((("block", BLOCK_LABEL), ("rack", RACK_LABEL)))


def test_racked_cluster_labels_blocks_and_racks():
    nodes = racked_cluster(2, 4, 8)
    assert len(nodes) == 64 and nodes[0].id == "b0-r0-h0" and nodes[-1].id == "b1-r3-h7"
    assert nodes[9].labels == {BLOCK_LABEL: "b0", RACK_LABEL: "r1"} and nodes[9].capacity["GPU"] == 8


def test_the_slowdown_multiplies_every_level_crossed_beyond_the_ideal_one():
    cost = DistanceCost()
    host, rack, block = TOPO.host_depth, 1, 0
    assert cost.slowdown(TOPO, span=host, ideal=host) == 1.0
    assert cost.slowdown(TOPO, span=rack, ideal=host) == HOST_SLOWDOWN  # two hosts of one rack
    assert cost.slowdown(TOPO, span=block, ideal=host) == pytest.approx(HOST_SLOWDOWN * LEVEL_SLOWDOWN)
    assert cost.slowdown(TOPO, span=block, ideal=rack) == LEVEL_SLOWDOWN  # a rack-sized gang over two racks
    assert cost.slowdown(TOPO, span=-1, ideal=rack) == pytest.approx(LEVEL_SLOWDOWN ** 2)
    assert cost.slowdown(TOPO, span=block, ideal=host, own={"host": 1.1, "rack": 1.0}) == pytest.approx(1.1)
    assert cost.scaled(0).slowdown(TOPO, span=-1, ideal=host) == 1.0
    assert cost.scaled(2).host == pytest.approx(1 + 2 * (HOST_SLOWDOWN - 1))


def _crowded() -> list[TraceJob]:
    # Two racks of one 8-GPU host: two 6-GPU jobs leave 2 GPUs on each, so a 4-GPU gang splits over the racks.
    return [TraceJob("a", 0.0, 1000.0, 1.0, 6), TraceJob("b", 0.0, 1000.0, 1.0, 6), TraceJob("c", 1.0, 100.0, 1.0, 4)]


def test_a_gang_split_over_racks_runs_slower_by_the_distance_cost_and_is_counted():
    cluster = racked_cluster(1, 2, 1)
    free = simulate(_crowded(), cluster, policy="fifo-backfill", topology=TOPO)
    slow = simulate(_crowded(), cluster, policy="fifo-backfill", topology=TOPO, distance=DistanceCost())
    assert sorted(free.jcts)[0] == pytest.approx(100.0)  # c, the 100 s gang, finishes first
    assert sorted(slow.jcts)[0] == pytest.approx(100.0 * HOST_SLOWDOWN * LEVEL_SLOWDOWN)
    assert slow.near["multi_host_starts"] == 0  # a 4-GPU gang fits one empty host: it is no multi-host gang
    assert slow.near["mean_slowdown"] == pytest.approx((2 + HOST_SLOWDOWN * LEVEL_SLOWDOWN) / 3)


def test_multi_host_gangs_are_counted_inside_one_rack_and_one_block():
    jobs = [TraceJob(f"g{i}", float(i), 100.0, 1.0, 16, near=("preferred", "rack")) for i in range(3)]
    report = simulate(jobs, racked_cluster(2, 2, 2), policy="fifo-backfill", topology=TOPO)
    assert report.near["multi_host_starts"] == 3
    assert report.near["in_one_rack"] == 1.0 and report.near["in_one_block"] == 1.0


def test_the_kueue_baseline_and_cuberay_both_run_a_required_trace():
    jobs = [TraceJob(f"g{i}", float(i), 100.0 + i, 1.0, 8 + 4 * (i % 3), near=("required", "rack")) for i in range(12)]
    for algorithm in ("cuberay", "kueue"):
        report = simulate(jobs, racked_cluster(1, 2, 2), policy="cuberay", topology=TOPO, distance=DistanceCost(),
                          near_algorithm=algorithm)
        assert report.finished == 12 and report.near["in_one_rack"] == 1.0, algorithm


def test_a_generic_trace_carries_topology_and_slowdown_columns(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("submit_time,duration,gpus,workers,topology,slowdown_rack\n0,10,1,4,required:rack,1.5\n"
                     "1,10,1,2,,\n")
    first, second = load_trace(trace)
    assert first.near == ("required", "rack") and first.slowdown == (("rack", 1.5),)
    assert second.near is None and second.slowdown == ()
    bad = tmp_path / "bad.csv"
    bad.write_text("submit_time,duration,gpus,topology\n0,10,1,near:rack\n")
    with pytest.raises(SpecError, match="required:LEVEL"):
        load_trace(bad)
    fast = tmp_path / "fast.csv"
    fast.write_text("submit_time,duration,gpus,slowdown_rack\n0,10,1,0.5\n")
    with pytest.raises(SpecError, match="multiplier >= 1"):
        load_trace(fast)


def test_cuberay_sim_replays_the_topology_example_with_the_distance_cost(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    rows = [f"{i * 60},3600,8,{w},research,0,,{t}" for i, (w, t) in enumerate(
        [(2, "required:rack"), (2, "preferred:rack"), (1, ""), (3, "preferred:rack"), (2, "required:rack")])]
    trace.write_text("submit_time,duration,gpus,workers,tenant,priority,max_workers,topology\n" + "\n".join(rows) + "\n")
    code = main(["sim", str(trace), "--platform", str(REPO / "configs" / "topology" / "platform.yaml"),
                 "--distance-cost", "1", "--policy", "cuberay", "-o", "table"])
    out = capsys.readouterr().out
    assert code == 0
    assert "multi-host gangs inside one rack" in out and "mean distance slowdown" in out
