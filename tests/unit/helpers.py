"""Small builders for the scheduling-core unit tests (no Ray).

``cluster(nodes=3, gpus=4, cpus=16)`` gives a Ledger of identical nodes ``n0..n{k-1}``;
``job("j1", "a", gpus=1, workers=4)`` a JobRequest; ``state(ledger, quota("a", 4, 8))`` a
ClusterState; ``cycle(state, now)`` runs one admission cycle and applies it.
"""

from __future__ import annotations

import copy
from typing import Mapping

import pytest

from cuberay.platform.policy.admission import (
    Admit,
    ClusterState,
    Cycle,
    Preempt,
    Reserve,
    schedule,
)
from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.scheduling import Policy, TenantQuota
from cuberay.platform.spec.resources import CPU, GPU, Resources, parse_worker


def cluster(nodes: int = 3, gpus: float = 4, cpus: float = 16, *, memory: float | None = None,
            labels: Mapping[str, str] | None = None, prefix: str = "n") -> Ledger:
    """A ledger of ``nodes`` identical nodes named ``{prefix}0``, ``{prefix}1``, ..."""
    ledger = Ledger()
    for i in range(nodes):
        add(ledger, f"{prefix}{i}", gpus=gpus, cpus=cpus, memory=memory, labels=labels)
    return ledger


def add(ledger: Ledger, node_id: str, *, gpus: float = 0, cpus: float = 16, memory: float | None = None,
        labels: Mapping[str, str] | None = None, **custom: float):
    """Add one node to ``ledger`` (zero amounts are left out, as Ray does)."""
    cap: dict[str, float] = {CPU: cpus, GPU: gpus, **custom}
    if memory is not None:
        cap["memory"] = memory
    return ledger.add_node(node_id, cap, labels)


def worker(gpus: float | str | None = 1, cpus: float | str | None = None, **kwargs):
    """A WorkerRequest from the user-facing strings (``gpus="2(V100)"``, ``rdma="1(roce)"``...)."""
    return parse_worker(cpu=cpus, gpu=gpus if gpus not in (0, None) else None, **kwargs)


def job(id: str, tenant: str = "a", gpus: float | str | None = 1, workers: int = 4, placement: str = "pack",
        priority: int = 0, t: float = 0.0, *, cpus: float | str | None = None, max_workers: int | None = None,
        labels: Mapping[str, str] | None = None, rdma: str | None = None) -> JobRequest:
    """A gang job: ``workers`` identical workers of ``gpus`` GPUs (and ``cpus`` CPUs) each."""
    w = worker(gpus, cpus, labels=labels, rdma=rdma)
    return JobRequest(id, tenant, w, workers, placement, priority, t, max_workers=max_workers)


def quota(name: str, guaranteed_gpus: float | None = None, max_gpus: float | None = None, *,
          guaranteed_cpus: float | None = None, max_cpus: float | None = None) -> TenantQuota:
    """A tenant quota in GPUs (and CPUs); ``max_*`` None on both means no cap."""
    g = {GPU: guaranteed_gpus or 0, CPU: guaranteed_cpus or 0}
    cap = None
    if max_gpus is not None or max_cpus is not None:
        cap = Resources({GPU: max_gpus if max_gpus is not None else 1e9,
                         CPU: max_cpus if max_cpus is not None else 1e9})
    return TenantQuota(name, Resources(g), cap)


# The core without least-attained-service: most tests look at one rule at a time, and LAS
# (on in Policy() by default) would add preemptions by attained service to every scenario.
# The reservation goes to the oldest blocked gang at once (no overdue wait), so each reservation
# test sees its rule in one or two cycles; tests/unit/test_las_rules.py covers the overdue guard.
CLASSIC = Policy(las_threshold_gpu_s=None, min_run_before_preempt_s=0.0, overdue_after_s=None)


def state(ledger: Ledger, *quotas: TenantQuota, policy: Policy | None = None) -> ClusterState:
    """A ClusterState; with no quotas, tenants ``a`` and ``b`` without guarantee or cap."""
    qs = quotas or (TenantQuota("a"), TenantQuota("b"))
    return ClusterState(ledger, {q.name: q for q in qs}, policy or CLASSIC)


def submit(st: ClusterState, *jobs: JobRequest) -> None:
    """Submit jobs that must be accepted (fails loudly with the reject reason otherwise)."""
    for j in jobs:
        rejected = st.submit(j)
        assert rejected is None, rejected.reason


def cycle(st: ClusterState, now: float = 0.0) -> Cycle:
    """One admission cycle, applied; returns the decisions."""
    c = schedule(st, now)
    st.apply(c.decisions, now)
    return c


def admitted(c: Cycle) -> dict[str, tuple[str, ...]]:
    return {d.job_id: d.node_ids for d in c.decisions if isinstance(d, Admit)}


def preempted(c: Cycle) -> dict[str, Preempt]:
    return {d.job_id: d for d in c.decisions if isinstance(d, Preempt)}


def reserves(c: Cycle) -> list[Reserve]:
    return [d for d in c.decisions if isinstance(d, Reserve)]


def snapshot(ledger: Ledger) -> dict:
    """Everything a scheduling cycle could change in a ledger, as plain values."""
    return copy.deepcopy({
        "free": {n.id: dict(n.free) for n in ledger.nodes.values()},
        "cards": {n.id: list(n.cards) for n in ledger.nodes.values()},
        "full_cards": {n.id: n.full_cards for n in ledger.nodes.values()},
        "total_free": dict(ledger.total_free),
        "allocations": dict(ledger.allocations),
    })


def gpus_used(ledger: Ledger, node_id: str) -> float:
    node = ledger.nodes[node_id]
    return node.capacity.get(GPU, 0.0) - node.free.get(GPU, 0.0)


def assert_consistent(ledger: Ledger) -> None:
    """check_invariants plus the bookkeeping the ledger keeps in several places at once."""
    ledger.check_invariants()
    names = set(ledger.total_capacity) | {k for n in ledger.nodes.values() for k in n.free}
    for name in names:
        assert ledger.total_free.get(name, 0.0) == pytest.approx(
            sum(n.free.get(name, 0.0) for n in ledger.nodes.values()), abs=1e-6), name
        assert ledger.total_capacity.get(name, 0.0) == pytest.approx(
            sum(n.capacity.get(name, 0.0) for n in ledger.nodes.values()), abs=1e-6), name
    for node in ledger.nodes.values():
        if node.card_resource:
            assert sum(node.cards) == pytest.approx(node.free[node.card_resource], abs=1e-6), node.id
        assert node.full_cards == sum(1 for c in node.cards if c >= 1 - 1e-9), node.id
    for alloc in ledger.allocations.values():
        assert all(s.node_id in ledger.nodes for s in alloc.slots)


# A platform file with named members, a wildcard tenant and an explicit storage path (spec and CLI tests).
PLATFORM = {
    "apiVersion": "cuberay.io/v1alpha1",
    "kind": "Platform",
    "metadata": {"name": "test"},
    "spec": {
        "storage": "/srv/cuberay",
        "tenants": [
            {"name": "vision", "members": ["alice"], "admins": ["bob"], "priority": 5,
             "quota": {"guaranteed": {"cpu": "8", "gpu": "8"}, "max": {"cpu": "16", "gpu": "16"}}},
            {"name": "nlp", "members": ["carol", "alice"], "storage": "/data/nlp"},
            {"name": "shared", "members": ["*"], "quota": {"max": {"cpu": "4", "memory": "8Gi"}}},
        ],
    },
}
