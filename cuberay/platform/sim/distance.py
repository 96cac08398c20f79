"""A cost for distance: how much slower a gang runs for each topology level its placement crosses.

A job's trace duration is its run time placed as close as its size allows: on
one host if one empty host holds it, else inside one rack if one empty rack
does, and so on (its *ideal* level, from the empty cluster). Placed wider, it
runs slower: its run time is multiplied by the slowdown of every level its
workers cross beyond the ideal one (a 4-GPU gang on two hosts of one rack
crosses ``host``; on two racks of a block it crosses ``host`` and ``rack``; a
16-GPU gang whose ideal is a rack, on two racks, crosses ``rack``).

The defaults, fixed before any topology figure was measured:

- ``host`` 1.47: the median, over the six models Pollux profiled (OSDI'21
  artifact, ``simulator/traces/<model>/placements.csv``: BERT, CIFAR-10,
  DeepSpeech2, ImageNet, NCF, YOLOv3 on 4-GPU AWS g4dn nodes), of each model's
  median ratio of the step time on several nodes to the step time on one node
  with the same GPUs and batch size. Per model: 1.07-2.14.
- every level above the host, 2.29: the cross-host step with its all-reduce
  (sync) share, 0.43 in the same profiles (median of the models' medians,
  0.19-0.71), slowed by the uplink oversubscription of that tier, 1:4, the low
  end of what ML clusters run ("generally between 1:4 and 1:16", openmlsys,
  *Machine Learning Systems*, "Architecture of Machine Learning Clusters"):
  1 + (4 - 1) x 0.43. Kueue's TAS proposal (KEP-2724) gives the same order:
  workloads that "take twice longer" with pods in different racks.

A trace may set a job's own factors (``slowdown_<level>`` columns of a generic
trace); :meth:`DistanceCost.scaled` spans a sensitivity range (``k`` scales each
factor's excess over 1: 0 is no cost, 2 doubles it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from cuberay.platform.policy.nodes import NodeState
from cuberay.platform.policy.topology import HOST, Topology, groups, room

HOST_SLOWDOWN = 1.47
LEVEL_SLOWDOWN = 2.29


@dataclass(frozen=True)
class DistanceCost:
    """Run-time multiplier per level crossed: ``levels[name]``, else ``host`` for the host and ``other``."""

    host: float = HOST_SLOWDOWN
    other: float = LEVEL_SLOWDOWN
    levels: Mapping[str, float] = field(default_factory=dict)

    def factor(self, level: str, own: Mapping[str, float] | None = None) -> float:
        if own and level in own:
            return own[level]
        if level in self.levels:
            return self.levels[level]
        return self.host if level == HOST else self.other

    def scaled(self, k: float) -> DistanceCost:
        """Every factor's excess over 1 times ``k`` (0: no cost at all)."""
        return DistanceCost(1 + k * (self.host - 1), 1 + k * (self.other - 1),
                            {name: 1 + k * (f - 1) for name, f in self.levels.items()})

    def slowdown(self, topo: Topology, span: int, ideal: int, own: Mapping[str, float] | None = None) -> float:
        """The multiplier of a placement whose narrowest common domain is at depth ``span``, for a gang whose ideal
        depth is ``ideal`` (depths of :class:`Topology`; -1 is the whole cluster)."""
        names = topo.names
        out = 1.0
        for depth in range(max(span, -1) + 1, ideal + 1):
            out *= self.factor(names[depth], own)
        return out


def ideal_depth(nodes: Sequence[NodeState], topo: Topology, per_node: Mapping[str, int], workers: int) -> int:
    """The narrowest depth at which one domain of the empty cluster holds ``workers`` (``per_node``: node id ->
    how many fit on it empty); -1 when only the whole cluster does."""
    fits = [(n, per_node[n.id]) for n in nodes if per_node.get(n.id, 0) > 0]
    for depth in range(topo.host_depth, -1, -1):
        if any(room(m) >= workers for m in groups(fits, topo, depth).values()):
            return depth
    return -1
