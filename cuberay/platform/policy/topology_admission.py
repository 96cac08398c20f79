"""What admission does with a job's locality beyond placing it: why it waits, where its reservation goes.

Placement itself is :mod:`.topology` (called by :func:`.placement.place`);
preemption (:mod:`.preemption`) and growth (:mod:`.resize`) keep a gang's
workers in one domain with the helpers here.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from cuberay.platform.policy.ledger import Ledger
from cuberay.platform.policy.nodes import FitCounter, NodeState
from cuberay.platform.policy.queue import JobRequest
from cuberay.platform.policy.topology import CUBERAY, closest
from cuberay.platform.spec.resources import CPU, format_amount

_PLURAL = {"GPU": "GPUs", CPU: "CPUs"}


def near_reason(ledger: Ledger, job: JobRequest) -> str:
    """The waiting reason's tail for a job with a locality: the level and the domain that comes closest.

    E.g. "; no rack has 8 free GPUs for it (required: rack); the most free is rack b1/r3 with 6".
    """
    loc = job.topology
    assert loc is not None
    memo = ledger.cache.setdefault(("near-reason",), {})
    key = (job.worker, job.workers, loc.mode, loc.level, ledger.changes)
    hit = memo.get(key)  # type: ignore[union-attr]
    if hit is not None:
        return hit
    counter = FitCounter(job.worker)
    selector = job.worker.node_selector()
    fits = [(n, k) for n in ledger.nodes.values()
            if n.alive and (not selector or n.matches(selector)) and (k := counter(n)) > 0]
    best = closest(fits, job.workers, ledger.topology, loc.level)
    name = job.worker.card_resource or CPU
    per = job.worker.resources.get(name, 0.0)
    unit = _PLURAL.get(name, name)
    need = f"{format_amount(per * job.workers)} free {unit}" if per else f"room for {job.workers} workers"
    if best is None:
        text = f"; no {loc.level} has {need} for it ({loc.text()}); none has room for one worker now"
    else:
        domain, workers = best
        most = format_amount(per * workers) if per else f"room for {workers} workers"
        text = (f"; no {loc.level} has {need} for it ({loc.text()}); the most free is {loc.level} {domain} "
                f"with {most}")
    if len(memo) > 256:  # type: ignore[arg-type]
        memo.clear()  # type: ignore[union-attr]
    memo[key] = text  # type: ignore[index]
    return text


def home_domain(ledger: Ledger, job: JobRequest, node_ids: Iterable[str]) -> tuple[str, ...] | None:
    """The domain of the job's level that holds all of ``node_ids``, if one does."""
    loc = job.topology
    if loc is None:
        return None
    topo = ledger.topology
    depth = topo.depth(loc.level)
    if depth is None:
        return None
    keys = {topo.key(ledger.nodes[n], depth) for n in node_ids if n in ledger.nodes}
    return next(iter(keys)) if len(keys) == 1 and None not in keys else None


def in_domain(ledger: Ledger, job: JobRequest, key: tuple[str, ...]) -> list[NodeState]:
    """The nodes of domain ``key`` at the job's level."""
    topo = ledger.topology
    depth = topo.depth(job.topology.level)  # type: ignore[union-attr]
    return [n for n in ledger.nodes.values() if topo.key(n, depth) == key]  # type: ignore[arg-type]


def claim_domain(ledger: Ledger, job: JobRequest, hosts: Sequence[tuple[NodeState, str, int]],
                 previous: Mapping[str, object] | None) -> list[tuple[NodeState, str, int]]:
    """The hosts of the one domain the reservation of ``job`` claims in: the one it claimed in before while that
    could still hold the gang, else the one with the most free that could; all hosts when none could (a
    preferred gang larger than any domain) or the job has no cuberay locality."""
    loc = job.topology
    if loc is None or loc.algorithm != CUBERAY:
        return list(hosts)
    topo = ledger.topology
    depth = topo.depth(loc.level)
    if depth is None:
        return list(hosts)
    by: dict[tuple[str, ...], list[tuple[NodeState, str, int]]] = {}
    for host in hosts:
        key = topo.key(host[0], depth)
        if key is not None:
            by.setdefault(key, []).append(host)
    able = {key: members for key, members in by.items() if sum(k for _, _, k in members) >= job.workers}
    if not able:
        return list(hosts)
    if previous:
        before = home_domain(ledger, job, previous)
        if before in able:
            return able[before]
    name = job.worker.card_resource or CPU

    def free(key: tuple[str, ...]) -> tuple:
        return (-sum(n.free.get(name, 0.0) for n, _, _ in able[key]), key)

    return able[min(able, key=free)]
