"""Why a gang can never be placed: the message for a job refused at submit, naming what it saw and the fix.

Kept apart from :mod:`.placement` (which chooses nodes) because it runs once per refused job, not per decision.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from cuberay.platform.policy.nodes import FitCounter, NodeState, workers_that_fit
from cuberay.platform.policy.placement import Placement, place
from cuberay.platform.policy.topology import Locality, Topology, closest
from cuberay.platform.spec.resources import WorkerRequest, format_resources


def why_not(nodes: Iterable[NodeState], req: WorkerRequest, count: int, policy: Placement | str,
            near: Locality | None = None, topology: Topology | None = None) -> str:
    """Explain why a gang can never be placed on these nodes even when they are empty."""
    nodes = [n for n in nodes if n.alive]
    if near is not None and topology is not None and near.required \
            and place(nodes, req, count, policy, empty=True) is not None:
        return _why_not_near(nodes, req, count, near, topology, policy)
    policy = Placement(policy).resolve(req)
    selector = req.node_selector()
    matching = [n for n in nodes if n.matches(selector)] if selector else nodes
    if not matching:
        labels = ", ".join(f"{k}={v}" for k, v in selector.items())
        return (f"no node has the labels {labels}; remove the constraint or add nodes with these labels "
                f"(check the gpu type in resources.gpu and spec.node_selector)")
    per_node = max((workers_that_fit(n, req, empty=True) for n in matching), default=0)
    card = req.card_resource
    share = req.resources.get(card, 0.0) if card else 0.0
    if per_node == 0:
        with_cards = [n for n in matching if n.card_resource == card] if card else []
        biggest = max(with_cards or matching, key=lambda n: sum(n.capacity.values()))
        rule = ("; a share of a card runs on a node that also has the worker's other resources free"
                if 0 < share < 1 else "")
        return (f"one worker needs {_fmt(req.resources)} but the largest matching node has "
                f"{_fmt(biggest.capacity)}{rule}; lower the per-worker resources")
    capacity = sum(workers_that_fit(n, req, empty=True) for n in matching)
    rule = (f" (a card holds {int(1 / share + 1e-9)} share(s) of {share:g}; shares of different cards do not "
            f"add up)" if 0 < share < 1 else "")
    if policy is Placement.STRICT_PACK and per_node < count:
        return (f"strict_pack needs all {count} workers on one node but a node holds at most {per_node}{rule}; "
                f"lower workers to {per_node} or use placement pack")
    if policy is Placement.STRICT_SPREAD and len(matching) < count:
        return (f"strict_spread needs {count} distinct nodes but only {len(matching)} match; "
                f"lower workers or use placement spread")
    return (f"the gang of {count} workers x {_fmt(req.resources)} is larger than the cluster "
            f"(at most {capacity} such workers fit on empty nodes{rule}); lower workers or per-worker resources")


def _why_not_near(nodes: list[NodeState], req: WorkerRequest, count: int, near: Locality, topo: Topology,
                  policy: Placement | str) -> str:
    """The gang fits the cluster but no single domain of its required level."""
    counter = FitCounter(req, empty=True)
    selector = req.node_selector()
    fits = [(n, k) for n in nodes if (not selector or n.matches(selector)) and (k := counter(n)) > 0]
    best = closest(fits, count, topo, near.level)
    depth = topo.depth(near.level)
    wider = [name for name in topo.names[:depth] if name != near.level] if depth else []
    if best is not None and best[1] >= count:  # room enough: the job's own policy is what no domain allows
        policy = Placement(policy).resolve(req)
        return (f"topology {near.text()} needs all {count} workers x {_fmt(req.resources)} inside one "
                f"{near.level} placed {policy.value}, which no {near.level} allows (the largest, {best[0]}, holds "
                f"{best[1]} such workers, but not placed that way); use placement pack or spread"
                + (f", ask for a wider level ({' or '.join(reversed(wider))})" if wider else "")
                + f" or use preferred: {near.level}")
    largest = (f"the largest {near.level}, {best[0]}, holds at most {best[1]} such workers when empty"
               if best else f"no node carries the labels of a {near.level} ({_level_labels(topo, near.level)})")
    widen = f", ask for a wider level ({' or '.join(reversed(wider))})" if wider else ""
    return (f"topology {near.text()} needs all {count} workers x {_fmt(req.resources)} inside one {near.level}, "
            f"but {largest}; lower workers{widen} or use preferred: {near.level}")


def _level_labels(topo: Topology, level: str) -> str:
    depth = topo.depth(level) or 0
    return ", ".join(label for _, label in topo.levels[:depth + 1]) or "none"


def _fmt(res: Mapping[str, float]) -> str:
    return format_resources(res)
