"""Property tests for topology: ``required`` is never broken, ``preferred`` is never worse than topology-blind.

Random racked clusters (1-2 blocks of 1-3 racks of 1-3 hosts of 2, 4 or 8 GPUs, now and then a node without
labels), random gangs of which some require or prefer the block, rack or host. ``required``: through any
sequence of submit / schedule+apply / finish / preempt / cancel, every running job that requires a level has
all its workers in one domain of it (admission, growth and preemption included), and the scheduler's
bookkeeping stays sound. ``preferred``: on random busy states, a gang placed with a preferred level never
crosses a wider level than the same gang placed without one, and inside the narrowest domain both share it
uses no more domains one level down; and it is placed whenever the blind placement is.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuberay.platform.policy.admission import Admit, ClusterState, Resize, schedule
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.placement import place
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.scheduling import Policy, TenantQuota
from cuberay.platform.policy.topology import Locality, Topology
from cuberay.platform.spec.resources import CPU, GPU, Resources
from tests.unit.helpers import worker
from tests.unit.test_properties import check_state

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
# One placement per example: cheap, and the cases where a preferred gang must widen need many draws to come up.
PLACEMENT_SETTINGS = settings(SETTINGS, max_examples=600)
BLOCK, RACK = "cuberay.io/block", "cuberay.io/rack"
LEVELS = (("block", BLOCK), ("rack", RACK))


@st.composite
def racked(draw) -> Ledger:
    ledger = Ledger()
    ledger.topology = Topology(LEVELS, fill=draw(st.booleans()))
    gpus = draw(st.sampled_from([2, 4, 8]))
    for b in range(draw(st.integers(1, 2))):
        for r in range(draw(st.integers(1, 3))):
            for h in range(draw(st.integers(1, 3))):
                labels = {BLOCK: f"b{b}", RACK: f"r{r}"} if draw(st.integers(0, 9)) else {BLOCK: f"b{b}"}
                ledger.add_node(f"b{b}-r{r}-h{h}", {GPU: gpus, CPU: 32}, labels)
    return ledger


LOCALITIES = [None, None, Locality("required", "rack"), Locality("required", "block"), Locality("required", "host"),
              Locality("preferred", "rack"), Locality("preferred", "block")]


@st.composite
def gangs(draw) -> list[JobRequest]:
    out = []
    for i in range(draw(st.integers(1, 14))):
        workers = draw(st.integers(1, 10))
        out.append(JobRequest(f"j{i}", draw(st.sampled_from(["a", "b"])), worker(draw(st.sampled_from([0.5, 1, 2]))),
                              workers, draw(st.sampled_from(["pack", "frag", "spread", "best_fit", "auto"])),
                              draw(st.integers(0, 3)), float(i),
                              max_workers=draw(st.sampled_from([None, workers + 2])),
                              resizable=draw(st.booleans()), topology=draw(st.sampled_from(LOCALITIES))))
    return out


OPS = st.lists(st.tuples(st.sampled_from(["submit"] * 5 + ["cycle"] * 4 + ["finish", "preempt", "cancel"]),
                         st.integers(0, 1000)), min_size=10, max_size=50)


def inside_one(ledger: Ledger, job: JobRequest, node_ids) -> bool:
    topo = ledger.topology
    depth = topo.depth(job.topology.level)  # type: ignore[union-attr]
    keys = {topo.key(ledger.nodes[n], depth) for n in node_ids}  # type: ignore[arg-type]
    return len(keys) == 1 and None not in keys


@SETTINGS
@given(racked(), gangs(), OPS, st.sampled_from([Policy(), Policy(las_threshold_gpu_s=None, overdue_after_s=None),
                                                Policy(max_preemptions_per_cycle=3)]))
def test_required_is_never_broken(ledger, jobs, ops, policy):
    quotas = {"a": TenantQuota("a", Resources({GPU: 4}), None), "b": TenantQuota("b", Resources({GPU: 2}), None)}
    state = ClusterState(ledger, quotas, policy)
    pending, now = list(jobs), 0.0
    for op, pick in ops:
        now += 10.0
        if op == "submit" and pending:
            state.submit(pending.pop(0))
        elif op == "cycle":
            cycle = schedule(state, now)
            for d in cycle.decisions:
                if isinstance(d, (Admit, Resize)):
                    run = state.queue.get(d.job_id) or state.running[d.job_id].job
                    if run.topology is not None and run.topology.required:
                        assert inside_one(ledger, run, d.node_ids), (d, run.topology)
            state.apply(cycle.decisions, now)
        elif op in ("finish", "preempt", "cancel") and state.running:
            job_id = sorted(state.running)[pick % len(state.running)]
            {"finish": state.finish, "cancel": state.cancel}.get(op, lambda j: state.preempt(j, now))(job_id)
        check_state(state)
        for run in state.running.values():
            if run.job.topology is not None and run.job.topology.required:
                assert inside_one(ledger, run.job, run.allocation.node_ids), run.job.id


@st.composite
def busy(draw) -> Ledger:
    ledger = draw(racked())
    ledger.topology = Topology(LEVELS)  # no fill: the blind placement is the plain policy
    for i, node in enumerate(list(ledger.nodes)):
        used = draw(st.integers(0, int(ledger.nodes[node].capacity[GPU])))
        if used:
            ledger.allocate(f"busy-{i}", worker(1), [node] * used)
    return ledger


def used_at(ledger: Ledger, node_ids, depth: int) -> int:
    return len({ledger.topology.key(ledger.nodes[n], depth) for n in set(node_ids)})


@PLACEMENT_SETTINGS
@given(busy(), st.integers(1, 16), st.sampled_from([0.5, 1, 2]), st.sampled_from(["rack", "block", "host"]),
       st.sampled_from(["pack", "frag", "spread", "best_fit"]))
def test_preferred_is_never_worse_than_topology_blind(ledger, count, gpus, level, policy):
    req = worker(gpus)
    blind = place(ledger, req, count, policy)
    near = place(ledger, req, count, policy, near=Locality("preferred", level))
    if blind is None:
        return
    assert near is not None and len(near) == count
    topo = ledger.topology
    s_near = topo.span(ledger.nodes[n] for n in set(near))
    s_blind = topo.span(ledger.nodes[n] for n in set(blind))
    assert s_near >= s_blind, (near, blind)
    if s_near == s_blind and s_near < topo.depth(level):
        assert used_at(ledger, near, s_near + 1) <= used_at(ledger, blind, s_near + 1), (near, blind)
