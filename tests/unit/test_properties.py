"""Property tests: no sequence of submit / schedule+apply / finish / preempt / cancel ever over-allocates.

Random clusters (1-6 nodes, 0-8 GPUs, CPUs, accelerator and pool labels), random tenants (1-3, random
guarantee and max), random gangs (fractional and whole GPUs, CPU-only, 1-6 workers, every placement,
label constraints). After every step: the ledger's invariants hold, every tenant is within its max, the
scheduler's bookkeeping agrees with the ledger, every Admit gives each worker a matching node, and no
job is both queued and running.

Liveness too, so that a scheduler that decides nothing cannot pass: a cycle that admits nothing must
leave no queued job that could have started (within its tenant's max, on free capacity the reservation
in force does not hold); an idle cluster with a queue always starts something; and a run that finishes
every job it starts drains the queue.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuberay.platform.policy.admission import (
    Admit,
    ClusterState,
    Preempt,
    Reserve,
    schedule,
)
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.placement import Placement, place
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.reservation import claim, held_now
from cuberay.platform.policy.scheduling import Policy, TenantQuota
from cuberay.platform.spec.resources import (
    CPU,
    GPU,
    LABEL_ACCELERATOR,
    LABEL_POOL,
    Resources,
)
from tests.unit.helpers import assert_consistent, job, snapshot

# Derandomized: the same 150 examples every run, so CI never turns red on a case no change caused.
PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                             suppress_health_check=[HealthCheck.too_slow])
TENANTS = ("t0", "t1", "t2")
EPS = 1e-6


@dataclass(frozen=True)
class NodeSpec:
    id: str
    gpus: int
    cpus: int
    accelerator: str | None
    pool: str | None


@st.composite
def nodes(draw, plain: bool) -> list[NodeSpec]:
    """Mixed nodes with labels; ``plain``: identical GPU nodes without labels (more contention)."""
    count = draw(st.integers(1, 6))
    if plain:
        gpus = draw(st.sampled_from([2, 4, 8]))
        return [NodeSpec(f"n{i}", gpus, 32, None, None) for i in range(count)]
    out = []
    for i in range(count):
        gpus = draw(st.sampled_from([0, 1, 2, 4, 4, 8, 8]))
        out.append(NodeSpec(f"n{i}", gpus, draw(st.sampled_from([4, 8, 16, 32])),
                            draw(st.sampled_from([None, "V100", "A100"])) if gpus else None,
                            draw(st.sampled_from([None, None, "a", "b", "c"]))))
    return out


@st.composite
def quotas(draw, n: int) -> dict[str, TenantQuota]:
    out = {}
    for name in TENANTS[:n]:
        # Small amounts bind on these small clusters; large ones leave room to borrow and reclaim.
        g_gpu, g_cpu = draw(st.one_of(st.integers(0, 8), st.integers(0, 32))), draw(st.integers(0, 32))
        cap = None
        if draw(st.booleans()):
            cap = Resources({GPU: g_gpu + draw(st.one_of(st.integers(0, 4), st.integers(0, 32))),
                             CPU: g_cpu + draw(st.integers(0, 64))})
        out[name] = TenantQuota(name, Resources({GPU: g_gpu, CPU: g_cpu}), cap)
    return out


GPU_ASKS = [None, 0.25, 0.5, 1, 1, 1, 2, 4, "1(V100)", "0.5(A100)"]
PLAIN_GPU_ASKS = [0.5, 1, 1, 1, 2, 4]


@st.composite
def jobs(draw, n_tenants: int, plain: bool) -> list[JobRequest]:
    out = []
    count = draw(st.integers(1, 16))
    # Contention on purpose: later jobs outrank earlier ones (priority preemption), or one tenant
    # fills the cluster before the others arrive (borrowing, then reclaim).
    rising, phased = draw(st.booleans()) or plain, draw(st.booleans())
    for i in range(count):
        unknown = i == 0 and draw(st.integers(0, 9)) == 0  # now and then a tenant that does not exist
        if unknown:
            tenant = "nobody"
        elif phased:
            tenant = TENANTS[min(i * n_tenants // count, n_tenants - 1)]
        else:
            tenant = draw(st.sampled_from(TENANTS[:n_tenants]))
        gpus = draw(st.sampled_from(PLAIN_GPU_ASKS if plain else GPU_ASKS))
        cpus = None if plain else draw(st.sampled_from([None, 0.5, 1, 2] if gpus else [0.5, 1, 2, 4]))
        workers = draw(st.one_of(st.integers(1, 3), st.integers(1, 6)))
        max_workers = draw(st.sampled_from([None, workers + 1, workers + 3]))
        labels = None if plain else draw(st.sampled_from([None] * 6 + [{LABEL_POOL: "a"}, {LABEL_POOL: "in(a,b)"}]))
        out.append(job(f"j{i}", tenant, gpus=gpus, workers=workers,
                       placement=draw(st.sampled_from(list(Placement))).value,
                       priority=draw(st.integers(0, 2)) + (i // 3 if rising else 0), t=float(i), cpus=cpus,
                       max_workers=max_workers, labels=labels))
    return out


OPS = st.lists(st.tuples(st.sampled_from(["submit"] * 5 + ["cycle"] * 4 + ["finish", "preempt", "cancel"]),
                         st.integers(0, 1000)), min_size=10, max_size=50)


@st.composite
def scenarios(draw, plain: bool = False):
    node_specs = draw(nodes(plain))
    n_tenants = draw(st.integers(1, 3))
    tenant_quotas = draw(quotas(n_tenants))
    policy = draw(st.sampled_from([Policy(), Policy(max_preemptions_per_cycle=3),
                                   Policy(las_threshold_gpu_s=50.0), Policy(fifo=True, fair_share=False)]))
    return node_specs, tenant_quotas, draw(jobs(n_tenants, plain)), policy, draw(OPS)


def build(node_specs: list[NodeSpec], tenant_quotas, policy: Policy) -> ClusterState:
    ledger = Ledger()
    for n in node_specs:
        labels = {}
        if n.accelerator:
            labels[LABEL_ACCELERATOR] = n.accelerator
        if n.pool:
            labels[LABEL_POOL] = n.pool
        ledger.add_node(n.id, {GPU: n.gpus, CPU: n.cpus}, labels)
    return ClusterState(ledger, tenant_quotas, policy)


def check_state(state: ClusterState) -> None:
    ledger = state.ledger
    assert_consistent(ledger)
    queued = {j.id for j in state.queue}
    assert not queued & set(state.running), "a job is both queued and running"
    assert set(state.running) == set(ledger.allocations)
    for tenant, quota in state.tenants.items():
        held: dict[str, float] = {}
        for run in state.running.values():
            if run.job.tenant == tenant:
                for k, v in ledger.allocations[run.job.id].total.items():
                    held[k] = held.get(k, 0.0) + v
        usage = state.usage.get(tenant, {})
        for k in set(held) | set(usage):
            assert abs(usage.get(k, 0.0) - held.get(k, 0.0)) < EPS, f"usage of {tenant} drifted on {k}"
        if quota.max is not None:
            for k, v in held.items():
                assert v <= quota.max.get(k, 0.0) + EPS, f"tenant {tenant} over its max {k}: {v}"


def satisfies(labels: dict[str, str], selector: dict[str, str]) -> bool:
    """The label rule, written out here so that a bug in NodeState.matches cannot hide itself."""
    for key, want in selector.items():
        allowed = [v.strip() for v in want[3:-1].split(",")] if want.startswith("in(") else [want]
        if labels.get(key) not in allowed:
            return False
    return True


def check_admit(state: ClusterState, d: Admit) -> None:
    j = state.queue.get(d.job_id)
    assert j is not None, f"admitted {d.job_id}, which is not queued"
    n = len(d.node_ids)
    assert n == j.workers or (j.max_workers and j.workers <= n <= j.max_workers), (n, j.workers, j.max_workers)
    selector = j.worker.node_selector()
    for node_id in d.node_ids:
        node = state.ledger.nodes[node_id]
        assert node.alive and satisfies(node.labels, selector), f"{d.job_id} on {node_id} without {selector}"
    policy = j.placement.resolve(j.worker)
    if policy is Placement.STRICT_PACK:
        assert len(set(d.node_ids)) == 1
    if policy is Placement.STRICT_SPREAD:
        assert len(set(d.node_ids)) == n


def check_preempt(state: ClusterState, d: Preempt, admitted: set[str]) -> None:
    """A victim was running, and the job it makes room for is admitted now and has the right to it."""
    assert d.job_id in state.running and d.by in admitted, d
    victim, winner = state.running[d.job_id].job, state.queue.get(d.by)
    if d.reason.startswith("reclaimed"):
        assert victim.tenant != winner.tenant, d
    elif "less service" in d.reason:
        assert state.policy.las_threshold_gpu_s is not None and victim.priority == winner.priority, d
        assert not state.running[d.job_id].protected, f"{d.job_id} was admitted protected: no LAS victim"
    else:
        assert victim.priority < winner.priority, d


def check_backfill_respects_the_reservation(state: ClusterState, decisions) -> None:
    """Replay a cycle's decisions in order on a copy of the ledger: no job but the holder may take
    capacity the reservation in force holds (as much of it as was free when it was made); a holder is
    queued, claims no more than is free, and is admitted protected."""
    ledger = copy.deepcopy(state.ledger)
    res = state.reservation
    held_free = _held(ledger, res)
    for d in decisions:
        if isinstance(d, Reserve):
            res = d if d.job_id else None
            held_free = _held(ledger, res)
            if res is not None:
                assert res.job_id in state.queue, f"reservation for {res.job_id}, which is not queued"
                assert held_free == {n: dict(a) for n, a in res.nodes.items()}, "claims more than is free"
        elif isinstance(d, Preempt):
            ledger.release(d.job_id)
        elif isinstance(d, Admit):
            j = state.queue.get(d.job_id)
            ledger.allocate(d.job_id, j.worker, d.node_ids)
            if res is not None and d.job_id == res.job_id:
                assert d.protected, f"holder {d.job_id} admitted unprotected"
            if res is None or d.job_id == res.job_id:
                continue
            for node_id, amounts in held_free.items():
                for k, v in amounts.items():
                    assert ledger.nodes[node_id].free.get(k, 0.0) >= v - EPS, (
                        f"{d.job_id} took {k} on {node_id} held for {res.job_id}")


def _held(ledger: Ledger, res: Reserve | None) -> dict[str, dict[str, float]]:
    if res is None:
        return {}
    return {n: {k: min(v, max(ledger.nodes[n].free.get(k, 0.0), 0.0)) for k, v in amounts.items()}
            for n, amounts in res.nodes.items() if n in ledger.nodes}


def within_max(state: ClusterState, j: JobRequest) -> bool:
    quota = state.tenants[j.tenant]
    used = state.usage.get(j.tenant, {})
    return quota.max is None or all(used.get(k, 0.0) + v <= quota.max.get(k, 0.0) + EPS for k, v in j.total.items())


def reservation_in_force(state: ClusterState, decisions) -> tuple[str | None, dict | None]:
    """The holder and the capacity it holds while the cycle admits: the standing reservation with its
    claim renewed, or else the one the cycle made for the oldest blocked gang."""
    res = state.reservation
    if res is not None and res.job_id in state.queue:
        return res.job_id, claim(state.ledger, state.queue.get(res.job_id))
    made = next((d for d in decisions if isinstance(d, Reserve) and d.job_id), None)
    return (made.job_id, dict(made.nodes)) if made else (None, None)


def _held_back(state: ClusterState, j: JobRequest, reserved: dict) -> bool:
    """What the cluster has free, less what the reservation holds of it, is less than ``j`` asks in all.

    The cycle checks these totals before placing. Placement's per-card view of a reservation can
    disagree with them for shares of a card (a hold of 0.75 GPU skips the one card with the most free
    and lets a 0.25 share use the next), so the totals decide here as they do in the cycle.
    """
    held = held_now(state.ledger, reserved)
    free = state.ledger.total_free
    return any(free.get(k, 0.0) - held.get(k, 0.0) + EPS < v for k, v in j.total.items())


def check_liveness(state: ClusterState, c) -> None:
    """A cycle that admitted nothing left no queued job that could have started now."""
    if c.admitted:
        return
    if not state.running and len(state.queue):
        raise AssertionError(f"idle cluster, {len(state.queue)} queued (each fits it empty), nothing admitted")
    holder, reserved = reservation_in_force(state, c.decisions)
    for j in state.queue:
        if not within_max(state, j):
            continue
        if reserved and j.id != holder and _held_back(state, j, reserved):
            continue
        nodes = place(state.ledger.nodes.values(), j.worker, j.workers, j.placement,
                      reserved=None if j.id == holder else reserved)
        assert nodes is None, f"{j.id} fits now on {nodes} (holder {holder}) but the cycle admitted nothing"


def run_ops(state: ClusterState, pending: list[JobRequest], ops) -> None:
    now = 0.0
    for op, k in ops:
        if op == "submit" and pending:
            j = pending.pop(0)
            rejected = state.submit(j)
            if rejected is None:
                assert j.id in state.queue
            else:
                assert rejected.reason and j.id not in state.queue
                ever = place(state.ledger.nodes.values(), j.worker, j.workers, j.placement, empty=True)
                assert j.tenant not in state.tenants or ever is None or rejected.reason.startswith("tenant")
        elif op == "cycle":
            now += 1 + k % 50
            before = snapshot(state.ledger)
            c = schedule(state, now)
            assert snapshot(state.ledger) == before, "schedule() changed the ledger"
            admitted = {d.job_id for d in c.admitted}
            for d in c.decisions:
                if isinstance(d, Preempt):
                    check_preempt(state, d, admitted)
                elif isinstance(d, Admit):
                    check_admit(state, d)
                else:
                    assert isinstance(d, Reserve)
            check_backfill_respects_the_reservation(state, c.decisions)
            check_liveness(state, c)
            state.apply(c.decisions, now)  # ledger.allocate raises if a decision over-allocates
            res = state.reservation
            assert res is None or res.job_id in state.queue, "the reservation outlived its holder's wait"
            for d in c.admitted:
                assert d.job_id in state.running
        elif op in ("finish", "preempt") and state.running:
            victim = sorted(state.running)[k % len(state.running)]
            state.finish(victim) if op == "finish" else state.preempt(victim, now)
        elif op == "cancel" and len(state.queue):
            state.cancel(sorted(j.id for j in state.queue)[k % len(state.queue)])
        check_state(state)


@PROPERTY_SETTINGS
@given(scenarios())
def test_no_decision_ever_over_allocates_a_node_a_card_or_a_tenant(scenario):
    node_specs, tenant_quotas, pending, policy, ops = scenario
    state = build(node_specs, tenant_quotas, policy)
    run_ops(state, list(pending), ops)


@PROPERTY_SETTINGS
@given(scenarios(plain=True))
def test_no_preemption_or_reclaim_ever_over_allocates_on_a_contended_cluster(scenario):
    # Identical unlabelled GPU nodes and rising priorities: far more preemption and reclaim.
    node_specs, tenant_quotas, pending, policy, ops = scenario
    state = build(node_specs, tenant_quotas, policy)
    run_ops(state, list(pending), ops)


@PROPERTY_SETTINGS
@given(scenarios())
def test_running_everything_to_completion_frees_the_whole_cluster(scenario):
    node_specs, tenant_quotas, pending, policy, ops = scenario
    state = build(node_specs, tenant_quotas, policy)
    for j in pending:
        state.submit(j)
    free = snapshot(state.ledger)
    for step in range(4 * len(pending) + 4):
        c = schedule(state, float(step))
        check_liveness(state, c)
        state.apply(c.decisions, float(step))
        check_state(state)
        for job_id in sorted(state.running)[:1]:
            state.finish(job_id)
        if not state.running and not len(state.queue):
            break
    # Every job that was queued fits the empty cluster within its tenant's max (submit checked), and
    # one finishes each step: the queue must have drained long before the steps ran out.
    assert not len(state.queue), f"still queued after the run: {sorted(j.id for j in state.queue)}"
    while state.running:
        state.finish(next(iter(state.running)))
    after = snapshot(state.ledger)
    assert after["free"] == free["free"] and after["cards"] == free["cards"]
    assert not state.ledger.allocations
