"""The victim index gives the same victims, in the same order, as scanning every running job.

Random running sets (tenants borrowing and below their guarantees, priorities, both service bands,
fractional attained service, jobs restarting with their useful start ahead, protected jobs, finishes),
asked at increasing times by waiting jobs of every kind that preempts: each answer is compared with the
scan's (the index switched off).
"""

from __future__ import annotations

import random

import pytest

from cuberay.platform.policy import preemption
from cuberay.platform.policy.admission import AdmissionCycle
from cuberay.platform.policy.scheduling import Policy
from tests.unit.helpers import cluster, job, quota, state

LAS = Policy(las_threshold_gpu_s=500.0, min_run_before_preempt_s=0.0, las_victims_most_attained=True, reserve=False)


def running_set(rng: random.Random, policy: Policy):
    st = state(cluster(nodes=48, gpus=8), quota("a", 96), quota("b", 96), quota("c", 0), policy=policy)
    free = {f"n{i}": 8 for i in range(48)}
    t = 0.0
    for i in range(200):
        g = rng.choice((1, 1, 2, 4, 8))
        room = [n for n, f in free.items() if f >= g]
        if not room:
            break
        t += rng.choice((0.0, 0.0, rng.random() * 20))  # ties in start time are common (one cycle)
        j = job(f"j{i}", tenant=rng.choice("aabbc"), gpus=g, workers=1, priority=rng.choice((0, 0, 1)), t=t)
        j.attained_gpu_s = rng.choice((0.0, 0.0, 100.0, 600.0, rng.random() * 2000))
        st.submit(j)
        node = rng.choice(room)
        free[node] -= g
        run = st.start(j.id, [node], t, protected=rng.random() < 0.05)
        if rng.random() < 0.1:  # restarting: its useful start is a restart cost ahead (the simulator)
            run.start_time = t + 60.0
            st.set_band_flip(run)
        if rng.random() < 0.1:
            st.finish(j.id)
            free[node] += g
    return st, t


def victims(st, now: float, probe, own_only: bool = False) -> list[str]:
    c = AdmissionCycle(st, now, explain=False)
    contended = preemption._contended(probe)
    return [r.job.id for r in c._victims(probe, contended, own_only)]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", [LAS, Policy(las_threshold_gpu_s=500.0, min_run_before_preempt_s=30.0,
                                                las_victims_most_attained=True, reserve=False)])
def test_indexed_victims_are_the_scan_s(seed: int, policy: Policy, monkeypatch) -> None:
    rng = random.Random(seed)
    st, t = running_set(rng, policy)
    scan = preemption.indexed_victims
    for k, now in enumerate(sorted(t + rng.random() * 3000 for _ in range(6))):
        for tenant in "abc":
            for gpus, prio in ((1, 0), (4, 0), (8, 1), (16, 0), (2, 2)):
                probe = job(f"p{k}{tenant}{gpus}{prio}", tenant=tenant, gpus=gpus, workers=1, priority=prio, t=now)
                probe.attained_gpu_s = rng.choice((0.0, 0.0, 800.0))
                for own_only in (False, True):
                    got = victims(st, now, probe, own_only)
                    monkeypatch.setattr(preemption, "indexed_victims", lambda *a, **k: None)
                    want = victims(st, now, probe, own_only)
                    monkeypatch.setattr(preemption, "indexed_victims", scan)
                    assert got == want, (seed, now, tenant, gpus, prio, own_only)
