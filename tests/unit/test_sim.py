"""The simulator and its inputs: gang deadlock, starvation, preemption accounting, --until, loaders.

Pure code only (no Ray). Each scenario is small enough to check by hand, or
built so that a regression in the policy makes the assertion fail.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from cuberay.errors import SpecError
from cuberay.platform.policy.admission import Admit, ClusterState, schedule
from cuberay.platform.policy.fit import tenant_quotas
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.scheduling import Policy, TenantQuota
from cuberay.platform.sim.cluster import NodeSpec, load_cluster, uniform_cluster
from cuberay.platform.sim.engine import LARGE_JOB_GPUS, Report, simulate
from cuberay.platform.sim.inputs import TraceFormat, detect_format, load_trace, seconds
from cuberay.platform.sim.plot import cdf, downsample, plot_reports
from cuberay.platform.sim.trace import TraceJob, load_generic, load_philly, proportional_quotas
from cuberay.platform.spec.resources import (
    CPU,
    GPU,
    LABEL_ACCELERATOR,
    LABEL_POOL,
    LABEL_RDMA,
    Resources,
    parse_worker,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_EXAMPLE = REPO_ROOT / "configs" / "sim" / "cluster-example.yaml"
TRACE_EXAMPLE = REPO_ROOT / "configs" / "sim" / "trace-example.csv"


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _max_allocated(report: Report) -> float:
    return max(used for _, used, _ in report.timeline)


# -- the seed article's gang deadlock --------------------------------------------------------

@pytest.mark.parametrize("policy", ["cuberay", "fifo", "fifo-backfill"])
def test_four_gangs_on_three_nodes_finish_in_two_rounds_without_partial_gangs(tmp_path: Path, policy: str) -> None:
    # 3 nodes x 4 GPUs; 4 jobs x 4 workers x 1 GPU at once. Without gang admission each job grabs
    # 3 of its 4 GPUs and all wait forever; with it, 3 run, then the 4th.
    trace = _write(tmp_path / "t.csv", "submit_time,duration,gpus,workers\n" + "0,1000,1,4\n" * 4)
    report = simulate(load_generic(trace), uniform_cluster(3, gpus_per_node=4), policy=policy)
    assert report.finished == 4
    assert report.makespan_s == 2 * 1000
    assert _max_allocated(report) <= 12
    # Whole gangs only: the allocation is always a multiple of one gang (4 GPUs), so at most 3 run.
    assert all(used % 4 == 0 for _, used, _ in report.timeline)
    assert report.preemptions == 0


def test_until_reports_the_state_at_that_time(tmp_path: Path) -> None:
    trace = _write(tmp_path / "t.csv", "submit_time,duration,gpus,workers\n" + "0,1000,1,4\n" * 4)
    report = simulate(load_generic(trace), uniform_cluster(3, gpus_per_node=4), until=1500)
    assert (report.finished, report.running_at_end, report.queued_at_end) == (3, 1, 0)
    assert report.gpu_allocated_fraction == pytest.approx(4 / 12)
    assert report.allocated_at_end[GPU] == 4
    early = simulate(load_generic(trace), uniform_cluster(3, gpus_per_node=4), until=500)
    assert (early.finished, early.running_at_end, early.queued_at_end) == (0, 3, 1)


# -- starvation of a large gang ------------------------------------------------------------------

def _stream_with_big_job() -> list[TraceJob]:
    """An endless-looking stream of 1-GPU jobs (arrivals outpace the cluster) and one 64-GPU job at t=600."""
    rng = random.Random(7)
    jobs = [TraceJob(f"small-{i:05d}", i * 5.0, float(rng.randint(100, 1000))) for i in range(5000)]
    jobs.append(TraceJob("big", 600.0, 1000.0, gpus=1.0, workers=64))
    return jobs


def test_a_64_gpu_job_behind_a_stream_of_1_gpu_jobs_starts_within_a_bounded_delay() -> None:
    jobs = _stream_with_big_job()
    longest_small = max(j.duration for j in jobs if j.id != "big")
    cluster = uniform_cluster(8, gpus_per_node=8)
    ours = simulate(jobs, cluster, policy="cuberay")
    greedy = simulate(jobs, cluster, policy="fifo-backfill")
    assert ours.finished == greedy.finished == len(jobs)
    assert 1 < LARGE_JOB_GPUS <= 64  # only the big job counts as large, so max_wait_s_large is its wait
    # Once overdue (queued overdue_after_s), the big gang takes the reservation: its wait is bounded by that
    # plus the longest small runtime plus the backlog queued ahead of it (margin 1000 s).
    overdue = Policy().overdue_after_s
    assert overdue is not None
    assert ours.max_wait_s_large <= overdue + longest_small + 1000
    # Greedy backfill never leaves all 64 GPUs free while small jobs wait: the big job waits for the
    # stream (5000 x 5 s = 25,000 s) to end.
    assert greedy.max_wait_s_large >= 23000
    assert greedy.max_wait_s_large > ours.max_wait_s_large + 5000


# -- preemption accounting -------------------------------------------------------------------------

def test_a_reclaimed_job_keeps_only_checkpointed_progress_and_pays_the_restart() -> None:
    # Tenant b borrows the whole node (guarantee 0); tenant a (guarantee 4 GPUs) arrives at t=4000 and
    # reclaims. b worked 4000 s, checkpointed every 1800 s: keeps 3600 s, loses 400 s. It restarts at
    # 5000 when a finishes, pays 60 s, and runs the remaining 6400 s: done at 11,460.
    jobs = [TraceJob("borrower", 0.0, 10000.0, 1.0, 4, tenant="b"),
            TraceJob("owner", 4000.0, 1000.0, 1.0, 4, tenant="a")]
    quotas = {"a": TenantQuota("a", Resources({GPU: 4}), None), "b": TenantQuota("b", Resources(), None)}
    report = simulate(jobs, uniform_cluster(1, gpus_per_node=4), quotas, "cuberay",
                      checkpoint_interval_s=1800, restart_cost_s=60)
    assert report.preemptions == 1
    assert report.finished == 2
    assert report.makespan_s == 11460
    assert sorted(report.jcts) == [1000, 11460]
    allocated = 4 * (4000 + 1000 + 6460)   # GPU-seconds held: b's two attempts and a's run
    lost = 4 * (400 + 60)                  # b's work since its last checkpoint, and its restart
    assert report.goodput == pytest.approx(1 - lost / allocated)
    assert report.goodput < 1
    assert report.tenants["a"]["jobs_finished"] == 1 and report.tenants["b"]["avg_jct_s"] == 11460


def test_without_checkpoints_a_preempted_job_starts_over() -> None:
    jobs = [TraceJob("borrower", 0.0, 10000.0, 1.0, 4, tenant="b"),
            TraceJob("owner", 4000.0, 1000.0, 1.0, 4, tenant="a")]
    quotas = {"a": TenantQuota("a", Resources({GPU: 4}), None), "b": TenantQuota("b", Resources(), None)}
    report = simulate(jobs, uniform_cluster(1, gpus_per_node=4), quotas, "cuberay",
                      checkpoint_interval_s=0, restart_cost_s=0)
    assert report.makespan_s == 5000 + 10000
    assert report.goodput == pytest.approx(1 - 4000 / (4000 + 1000 + 10000))


def test_no_preemption_means_full_goodput() -> None:
    jobs = [TraceJob(f"j{i}", float(i), 100.0, 1.0, 2) for i in range(6)]
    report = simulate(jobs, uniform_cluster(1, gpus_per_node=4), policy="cuberay")
    assert report.preemptions == 0 and report.goodput == 1.0


# -- fractional GPUs, quotas -------------------------------------------------------------------------

def test_generic_trace_with_fractional_gpus_shares_cards(tmp_path: Path) -> None:
    trace = _write(tmp_path / "t.csv", "submit_time,duration,gpus\n" + "0,100,0.5\n" * 8)
    report = simulate(load_generic(trace), uniform_cluster(1, gpus_per_node=2))
    assert report.finished == 8
    assert report.makespan_s == 200  # 4 half-card jobs at a time on 2 cards
    assert _max_allocated(report) == 2


def test_proportional_quotas_sum_to_cluster_capacity() -> None:
    jobs = [TraceJob("a1", 0, 100, 1, 4, tenant="a"), TraceJob("b1", 0, 300, 1, 1, tenant="b"),
            TraceJob("c1", 0, 50, 0.5, 2, tenant="c"), TraceJob("d1", 0, 10, 0.0, 1, cpus=1, tenant="d")]
    cluster = uniform_cluster(3, gpus_per_node=8)
    quotas = proportional_quotas(jobs, cluster)
    assert set(quotas) == {"a", "b", "c", "d"}
    assert sum(q.guaranteed[GPU] for q in quotas.values()) == pytest.approx(24)
    assert sum(q.guaranteed[CPU] for q in quotas.values()) == pytest.approx(3 * 64)
    assert quotas["a"].guaranteed[GPU] == pytest.approx(24 * 400 / 750)
    assert quotas["d"].guaranteed[GPU] == 0  # no GPU-time, no guarantee
    assert all(q.max is None for q in quotas.values())


# -- heterogeneous clusters ----------------------------------------------------------------------------

def test_cluster_file_gives_ray_named_capacity_and_constraint_labels() -> None:
    nodes = load_cluster(CLUSTER_EXAMPLE)
    a100 = [n for n in nodes if n.id.startswith("a100-")]
    assert len(a100) == 8 and len(nodes) == 36
    assert a100[0].capacity == {CPU: 64.0, "memory": 512 * 2**30, GPU: 8.0, "rdma": 1.0}
    assert a100[0].labels[LABEL_ACCELERATOR] == "A100"
    assert a100[0].labels[LABEL_RDMA] == "ib"
    assert a100[0].labels[LABEL_POOL] == "a100"
    assert a100[0].labels["cuberay.io/rdma-domain"] == "r1"
    cpu_only = next(n for n in nodes if n.id == "cpu-0")
    assert GPU not in cpu_only.capacity and LABEL_ACCELERATOR not in cpu_only.labels


def _state_of(nodes: list[NodeSpec]) -> ClusterState:
    ledger = Ledger()
    for n in nodes:
        ledger.add_node(n.id, n.capacity, n.labels)
    return ClusterState(ledger, {"t": TenantQuota("t")})


def test_constrained_gangs_land_only_on_matching_nodes() -> None:
    state = _state_of(load_cluster(CLUSTER_EXAMPLE))
    rdma = JobRequest("rdma", "t", parse_worker(cpu="8", gpu="1(A100)", rdma="1(ib)"), 4)
    t4 = JobRequest("t4", "t", parse_worker(cpu="4", gpu="1(T4)"), 8)
    h100 = JobRequest("h100", "t", parse_worker(gpu="1(H100)"), 1)
    assert state.submit(rdma) is None and state.submit(t4) is None
    rejected = state.submit(h100)
    assert rejected is not None and "ray.io/accelerator-type=H100" in rejected.reason
    admitted = {d.job_id: d.node_ids for d in schedule(state, 0.0).decisions if isinstance(d, Admit)}
    # One rdma device per node: four workers need four distinct A100 nodes.
    assert sorted(admitted["rdma"]) == sorted(set(admitted["rdma"]))
    assert all(n.startswith("a100-") for n in admitted["rdma"])
    assert all(n.startswith("t4-") for n in admitted["t4"])


def test_a_platform_file_works_as_a_cluster() -> None:
    nodes = load_cluster(REPO_ROOT / "configs" / "platform.yaml")
    assert [n.id for n in nodes] == ["cpu-0", "cpu-1", "gpu-0"]
    assert nodes[2].labels[LABEL_ACCELERATOR] == "T4" and nodes[2].labels["node-type"] == "gpu"


@pytest.mark.parametrize(("text", "where"), [
    ("nodes:\n  - name: a\n    count: 1\n    resources: {cpu: '2', memory: 1Gi, gpu: '2('}\n", "nodes[0].resources.gpu"),
    ("nodes:\n  - name: a\n    count: 0\n    resources: {cpu: '2', memory: 1Gi}\n", "nodes[0].count"),
    ("nodes:\n  - name: a\n    count: 1\n    resources: {cpu: '2', memory: 1Gi}\n    lables: {}\n",
     "nodes[0].lables"),
    ("nodes:\n  - {name: a, count: 1, resources: {cpu: '2', memory: 1Gi}}\n"
     "  - {name: a, count: 1, resources: {cpu: '2', memory: 1Gi}}\n", "nodes[1].name"),
])
def test_cluster_loader_names_file_field_and_line(tmp_path: Path, text: str, where: str) -> None:
    path = _write(tmp_path / "nodes.yaml", text)
    with pytest.raises(SpecError) as info:
        load_cluster(path)
    message = str(info.value)
    assert path in message and where in message and "line" in message


# -- trace loaders and inputs ---------------------------------------------------------------------------

PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-01 02:00:00,100.0,1,100.0,vc2
2017-10-01 00:00:00,50.0,8,400.0,vc1
2017-10-02 00:00:00,10.0,2,20.0,vc1
2017-10-01 01:00:00,0.0,4,0.0,vc1
"""


def test_philly_loader_sorts_rebases_and_makes_one_gpu_workers(tmp_path: Path) -> None:
    path = _write(tmp_path / "philly.csv", PHILLY)
    jobs = load_philly(path)
    assert [j.submit_time for j in jobs] == [0, 3600, 7200, 86400]
    assert [(j.workers, j.gpus, j.tenant) for j in jobs][:2] == [(8, 1.0, "vc1"), (4, 1.0, "vc1")]
    assert jobs[1].duration == 1.0  # zero durations are clamped to one second
    assert len(load_philly(path, start="2017-10-01", end="2017-10-01")) == 3  # a bare end date includes the day


def test_load_trace_windows_by_date_or_offset(tmp_path: Path) -> None:
    path = _write(tmp_path / "philly.csv", PHILLY)
    assert detect_format(path) is TraceFormat.philly
    by_offset = load_trace(path, start="1h", end="2d")
    assert [j.duration for j in by_offset] == [1.0, 100.0, 10.0]
    assert by_offset[0].submit_time == 0  # rebased to the first selected submission
    assert len(load_trace(path, end="3600")) == 1
    generic = _write(tmp_path / "g.csv", "submit_time,duration,gpus\n0,10,1\n100,10,1\n7200,10,1\n")
    assert detect_format(generic) is TraceFormat.generic
    assert [j.submit_time for j in load_trace(generic, start="100", end="2h")] == [100]
    with pytest.raises(SpecError, match="not a date"):
        load_trace(generic, start="2017-10-01")


@pytest.mark.parametrize(("loader", "text", "where"), [
    (load_generic, "submit_time,duration,gpus\n0,10,1\n5,ten,1\n", "line 3"),
    (load_generic, "submit_time,gpus\n0,1\n", "header"),
    (load_philly, "timestamp,duration,num_gpus,gpu_time,cluster\n2017-13-01 00:00:00,5,1,5,vc\n", "line 2"),
    (load_philly, "timestamp,duration,cluster\n", "header"),
])
def test_loaders_reject_bad_input_naming_file_and_line(tmp_path: Path, loader, text: str, where: str) -> None:
    path = _write(tmp_path / "trace.csv", text)
    with pytest.raises(SpecError) as info:
        loader(path)
    assert path in str(info.value) and where in str(info.value)


@pytest.mark.parametrize(("row", "words"), [
    ("0,-5,1", "negative"), ("0,10,-1", "gpus -1 is negative"), ("0,10,1.5", "must be whole"),
    ("0,10,0", "asks for nothing"),
])
def test_load_trace_refuses_rows_the_simulator_cannot_replay(tmp_path: Path, row: str, words: str) -> None:
    path = _write(tmp_path / "t.csv", f"submit_time,duration,gpus\n0,10,1\n{row}\n")
    with pytest.raises(SpecError) as info:
        load_trace(path)
    assert words in str(info.value) and f"{path}: line 3" in str(info.value)


def test_unknown_header_and_missing_file_are_spec_errors(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(SpecError, match="header has a, b, c"):
        detect_format(path)
    with pytest.raises(SpecError, match="no such trace file"):
        load_trace(tmp_path / "missing.csv")


def test_durations() -> None:
    assert seconds("36h", "--until") == 36 * 3600
    assert seconds("2d", "--until") == 2 * 86400
    assert seconds("1h30m", "--until") == 5400
    assert seconds("90", "--until") == 90 and seconds("0", "--checkpoint-interval") == 0
    for bad in ("36x", "-5", "h"):
        with pytest.raises(SpecError, match="--until"):
            seconds(bad, "--until")


def test_example_trace_fits_the_example_platform() -> None:
    from cuberay.platform.sim.cluster import cluster_from_pools
    from cuberay.platform.spec import load_platform

    platform = load_platform(REPO_ROOT / "configs" / "platform.yaml")
    report = simulate(load_trace(TRACE_EXAMPLE), cluster_from_pools(platform.spec.node_pools),
                      tenant_quotas(platform))
    assert report.jobs == 20 and report.rejected == 0 and report.finished == 20


# -- plots ------------------------------------------------------------------------------------------------

def test_downsample_is_time_weighted() -> None:
    mids, used, queued = downsample([(0.0, 4.0, 1), (10.0, 0.0, 0)], end=20.0, bins=2)
    assert (mids, used, queued) == ([5.0, 15.0], [4.0, 0.0], [1.0, 0.0])
    mids, used, _ = downsample([(0.0, 2.0, 0), (5.0, 4.0, 0)], end=10.0, bins=1)
    assert used == [3.0]


@pytest.mark.timeout(10)
def test_downsample_terminates_on_float_edges() -> None:
    timeline = [(i * 0.1, float(i % 3), i % 5) for i in range(3000)]
    mids, used, _ = downsample(timeline, bins=7)
    assert len(mids) == 7 and all(0 <= u <= 2 for u in used)
    xs, ys = cdf([3.0, 1.0, 2.0])
    assert xs == [1.0, 2.0, 3.0] and ys[-1] == 1.0


def test_plot_without_matplotlib_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    report = simulate([TraceJob("j", 0, 10)], uniform_cluster(1, 1))
    with pytest.raises(SpecError, match=r'pip install "cuberay\[plot\]"'):
        plot_reports([report], tmp_path / "x.png")



# -- utilisation ----------------------------------------------------------------------------------

def test_gpu_utilization_counts_the_whole_makespan_even_on_an_idle_cluster() -> None:
    # One 1-GPU job on 8 GPUs for 100 s, then a 2-GPU job for 100 s: nothing ever waits.
    jobs = [TraceJob("a", 0, 100), TraceJob("b", 100, 100, gpus=2)]
    report = simulate(jobs, uniform_cluster(1, gpus_per_node=8))
    assert report.makespan_s == 200
    assert report.gpu_utilization == pytest.approx((1 * 100 + 2 * 100) / (8 * 200))
    assert report.gpu_utilization_while_queued == 0.0  # no job ever waited


def test_gpu_utilization_while_queued_counts_only_while_jobs_wait() -> None:
    # Two 8-GPU jobs on 8 GPUs: the second waits 100 s with the cluster full, then runs alone.
    jobs = [TraceJob("a", 0, 100, gpus=8), TraceJob("b", 0, 100, gpus=8)]
    report = simulate(jobs, uniform_cluster(1, gpus_per_node=8))
    assert report.gpu_utilization_while_queued == 1.0
    assert report.gpu_utilization == 1.0


def test_gpu_utilization_until_counts_up_to_that_time() -> None:
    report = simulate([TraceJob("a", 0, 1000, gpus=4)], uniform_cluster(1, gpus_per_node=8), until=100)
    assert report.finished == 0 and report.gpu_utilization == pytest.approx(0.5)


def test_an_elastic_job_grows_shrinks_on_reclaim_and_grows_back_in_the_replay() -> None:
    # e (tenant b, 2..4 GPUs, 1000 s at 2) gets the idle node's 4 GPUs: twice as fast. a reclaims its
    # guaranteed 2 at t=200: e shrinks to 2 (it did 400 s of work, pays 60 s to restart), a runs 200-300,
    # then e grows back to 4 (440 s done, restart 300-360, the last 560 s take 280): done at 640.
    jobs = [TraceJob("e", 0.0, 1000.0, 1.0, 2, tenant="b", max_workers=4),
            TraceJob("o", 200.0, 100.0, 1.0, 2, tenant="a")]
    quotas = {"a": TenantQuota("a", Resources({GPU: 2}), None), "b": TenantQuota("b", Resources({GPU: 2}), None)}
    report = simulate(jobs, uniform_cluster(1, gpus_per_node=4), quotas, "cuberay",
                      checkpoint_interval_s=1800, restart_cost_s=60)
    assert report.preemptions == 0 and report.finished == 2
    assert sorted(report.jcts) == [100, 640]
    allocated = 4 * 200 + 2 * 100 + 4 * 340 + 2 * 100  # e at 4, at 2, at 4 again; o
    assert report.goodput == pytest.approx(1 - (2 * 60 + 4 * 60) / allocated)
