"""Decision values the admission cycle returns and executors apply.

Plain frozen dataclasses: the live controller turns them into Ray calls, the
simulator into events; ``ClusterState.apply`` does the bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union


@dataclass(frozen=True, slots=True)
class Admit:
    job_id: str
    node_ids: tuple[str, ...]
    reason: str = "admitted"
    protected: bool = False  # admitted as overdue or as the reservation holder: no LAS preemption


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str
    by: str
    reason: str


@dataclass(frozen=True, slots=True)
class Reserve:
    """Hold capacity for a blocked job (``job_id`` None clears the reservation)."""

    job_id: str | None
    nodes: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    at: float = 0.0  # when the nodes were picked


@dataclass(frozen=True, slots=True)
class Resize:
    """Grow or shrink a running job's allocation to ``node_ids`` (its new full list, one entry per worker).

    Workers on nodes that stay keep their place; only the difference is taken or given back.
    """

    job_id: str
    node_ids: tuple[str, ...]
    reason: str


Decision = Union[Admit, Preempt, Reserve, Resize]


@dataclass(frozen=True, slots=True)
class Reject:
    job_id: str
    reason: str


@dataclass(slots=True)
class Cycle:
    decisions: list[Decision]
    waits: dict[str, str]
    complete: bool = True  # False: the cycle stopped at its time budget; run another soon

    @property
    def admitted(self) -> list[Admit]:
        return [d for d in self.decisions if isinstance(d, Admit)]

    @property
    def preempted(self) -> list[Preempt]:
        return [d for d in self.decisions if isinstance(d, Preempt)]

    @property
    def resized(self) -> list[Resize]:
        return [d for d in self.decisions if isinstance(d, Resize)]
