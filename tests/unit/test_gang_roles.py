"""Gangs with roles (a parameter-server job): one gang of unlike members, admitted whole, each role placed its way.

The seeds' rule for TensorFlow's parameter-server mode: GPU workers packed, parameter servers spread and on CPU
nodes. Each test drives the real ClusterState + schedule + apply.
"""

from __future__ import annotations

from cuberay.platform.policy.admission import schedule
from cuberay.platform.policy.queue import JobRequest, RoleGroup
from cuberay.platform.spec.resources import CPU, GPU
from tests.unit.helpers import add, admitted, cluster, cycle, quota, snapshot, state, submit, worker

CPU_POOL = {"cuberay.io/pool": "cpu"}


def ps_job(id: str = "ps", *, workers: int = 2, ps: int = 2, ps_cpus: float = 4, chief: bool = True,
           t: float = 0.0) -> JobRequest:
    roles = ((RoleGroup("chief", worker(None, 1), 1, "spread"),) if chief else ()) + \
        (RoleGroup("ps", worker(None, ps_cpus, labels=CPU_POOL), ps, "spread"),)
    return JobRequest(id, "a", worker(1, 1), workers, "pack", 0, t, roles=roles)


def gpu_and_cpu_nodes():
    ledger = cluster(nodes=2, gpus=4, cpus=8)  # n0, n1: GPU nodes
    for i in range(3):
        add(ledger, f"c{i}", cpus=8, labels=CPU_POOL)  # c0..c2: CPU nodes
    return ledger


def test_workers_pack_on_gpus_and_parameter_servers_spread_over_cpu_nodes():
    st = state(gpu_and_cpu_nodes())
    submit(st, ps_job())
    nodes = admitted(cycle(st))["ps"]
    workers, chief, ps = nodes[:2], nodes[2], nodes[3:]
    assert workers == ("n0", "n0")  # packed on one GPU node
    assert len(set(ps)) == 2 and all(n.startswith("c") for n in ps)  # spread, on the CPU pool
    assert chief  # anywhere it fits
    alloc = st.ledger.allocations["ps"]
    assert [st.ledger.allocations["ps"].request_of(s).resources.get(GPU, 0.0) for s in alloc.slots] == [1, 1, 0, 0, 0]
    assert st.usage["a"][GPU] == 2 and st.usage["a"][CPU] == 2 + 1 + 8


def test_a_role_without_room_holds_back_the_whole_gang_and_leaves_the_ledger_as_it_was():
    st = state(gpu_and_cpu_nodes())
    submit(st, JobRequest("filler", "a", worker(None, 8, labels=CPU_POOL), 2, "spread", 0, 0.0))
    cycle(st)  # two of the three CPU nodes are full
    submit(st, ps_job(ps=2, ps_cpus=8, t=1))
    before = snapshot(st.ledger)
    c = schedule(st, 1.0)
    assert admitted(c) == {}
    assert snapshot(st.ledger) == before  # no scratch hold left behind, no worker kept
    assert "gang of 2" in c.waits["ps"]
    st.finish("filler")
    assert len(admitted(cycle(st, 2))["ps"]) == 5


def test_a_role_that_fits_no_node_is_refused_at_submit_naming_the_role():
    st = state(gpu_and_cpu_nodes())
    reject = st.submit(ps_job(ps_cpus=16))
    assert reject is not None and reject.reason.startswith("roles.ps: ")
    assert "16" in reject.reason and "8" in reject.reason
    fits_alone = st.submit(ps_job("big", ps=4, ps_cpus=8))  # each fits a CPU node, four do not fit three
    assert fits_alone is not None and "roles.ps" in fits_alone.reason


def test_the_tenant_max_counts_every_role():
    st = state(gpu_and_cpu_nodes(), quota("a", max_gpus=8, max_cpus=10))
    reject = st.submit(ps_job())  # 2 + 1 + 8 = 11 CPUs
    assert reject is not None and "max cpu" in reject.reason


def test_finishing_gives_back_every_role():
    ledger = gpu_and_cpu_nodes()
    st = state(ledger)
    empty = snapshot(ledger)
    submit(st, ps_job())
    cycle(st)
    st.finish("ps")
    assert snapshot(ledger) == empty and st.usage["a"].get(CPU, 0.0) == 0


def test_a_higher_priority_gang_with_roles_preempts_for_its_parameter_servers_room():
    st = state(gpu_and_cpu_nodes())
    cpu_hogs = JobRequest("hogs", "a", worker(None, 8, labels=CPU_POOL), 3, "spread", 0, 0.0)
    submit(st, cpu_hogs)
    cycle(st)  # every CPU node full; the GPU nodes are free, so the workers fit and only the roles do not
    urgent = ps_job("urgent", chief=False, ps=1, t=1)
    urgent.priority = 5
    submit(st, urgent)
    c = cycle(st, 1)
    assert "hogs" in {d.job_id for d in c.decisions if type(d).__name__ == "Preempt"}
    assert len(admitted(c)["urgent"]) == 3


def test_the_reservation_of_a_waiting_gang_with_roles_holds_its_parameter_servers_room_too():
    # The GPU workers fit now; the parameter server waits for 4 of the CPU node's 8 cores, held by one-core jobs.
    # As they end one by one, the reservation must claim the freed cores, or the one-core jobs queued after the
    # gang would backfill them cycle after cycle and the gang would starve.
    ledger = cluster(nodes=1, gpus=4, cpus=8)
    add(ledger, "c0", cpus=8, labels=CPU_POOL)
    st = state(ledger)

    def one_core(name: str, t: float) -> JobRequest:
        return JobRequest(name, "a", worker(None, 1, labels=CPU_POOL), 1, "spread", 0, t)

    submit(st, *(one_core(f"hog{i}", 0.0) for i in range(8)))
    cycle(st)
    submit(st, ps_job("gang", chief=False, ps=1, ps_cpus=4, t=1))
    submit(st, *(one_core(f"late{i}", 2.0 + i) for i in range(8)))
    started: list[str] = []
    for i in range(4):
        st.finish(f"hog{i}")
        started += admitted(cycle(st, 10.0 + i))
    assert started == ["gang"]  # on the fourth core freed, before any job queued after it


def test_a_gang_whose_workers_would_take_its_parameter_servers_node_places_the_roles_first():
    # CPU-only workers keep off the GPU node while another fits them, which is the one node the ps may use;
    # placed after the workers the ps finds no room, placed first it does, and the workers go to the GPU node.
    ledger = cluster(nodes=0)
    add(ledger, "cpu0", cpus=16, labels=CPU_POOL)
    add(ledger, "gpu0", gpus=4, cpus=16)
    st = state(ledger)
    for i, placement in enumerate(("auto", "pack", "spread")):
        gang = JobRequest(f"g{i}", "a", worker(None, 4), 2, placement, 0, 0.0,
                          roles=(RoleGroup("ps", worker(None, 12, labels=CPU_POOL), 1, "spread"),))
        assert st.submit(gang) is None  # never refused: it fits
        nodes = admitted(cycle(st, i))[f"g{i}"]
        assert nodes[2] == "cpu0" and nodes[:2] == (("gpu0", "gpu0") if placement != "spread" else ("cpu0", "gpu0"))
        st.finish(f"g{i}")


def test_preempting_for_a_gang_with_roles_keeps_every_victim_its_roles_need():
    # Taking back a victim can move where the workers go and leave a role no room: the victims kept must be
    # checked by placing the whole gang again, not assumed.
    ledger = cluster(nodes=0)
    add(ledger, "b0", cpus=8, labels=CPU_POOL)
    add(ledger, "f1", cpus=16, gpus=4)
    add(ledger, "c2", cpus=16, gpus=4)
    add(ledger, "a3", cpus=8)
    add(ledger, "d4", cpus=8, gpus=4, labels=CPU_POOL)
    st = state(ledger)
    for job_id, cpus, n, placement, nodes in [("v0", 6, 1, "spread", ["a3"]), ("v1", 4, 2, "pack", ["b0", "b0"]),
                                              ("v2", 2, 2, "spread", ["c2", "d4"]), ("v3", 4, 1, "pack", ["d4"])]:
        submit(st, JobRequest(job_id, "a", worker(None, cpus), n, placement, 0, 0.0))
        st.start(job_id, nodes, 0.0)
    roles = (RoleGroup("chief", worker(None, 2), 1, "pack"), RoleGroup("ps", worker(None, 4, labels=CPU_POOL), 2,
                                                                         "spread"))
    submit(st, JobRequest("urgent", "a", worker(None, 4), 3, "auto", 5, 200.0, roles=roles))
    c = schedule(st, 10_000.0)  # raised AssertionError when a kept victim left the ps no room
    assert len(admitted(c)["urgent"]) == 6


def test_a_higher_priority_gang_reclaims_another_tenants_cpu_for_its_parameter_server():
    st = state(gpu_and_cpu_nodes(), quota("a", 4, guaranteed_cpus=8), quota("b", 4))
    submit(st, JobRequest("hogs", "b", worker(None, 8, labels=CPU_POOL), 3, "spread", 0, 0.0))
    cycle(st)  # tenant b borrows all of the CPU pool; tenant a's guarantee includes 8 CPUs
    submit(st, ps_job("urgent", chief=False, ps=1, ps_cpus=4, t=1))
    c = cycle(st, 1000)
    assert "hogs" in {d.job_id for d in c.decisions if type(d).__name__ == "Preempt"}
    assert len(admitted(c)["urgent"]) == 3
