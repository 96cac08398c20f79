"""The replays of one ``cuberay sim``: one per policy and placement, side by side on the machine's cores.

Each replay is independent and deterministic, so several run at once in processes of their own (spawned: the
CLI's threads are never forked) and come back in the order asked; on one core, or for a trace
that replays in less time than a process takes to start, they run one after the other here.
A replay's wall time is its own process's, so with replays at once each reads slower than it would alone.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from dataclasses import dataclass
from typing import Sequence

from cuberay.cli.output import error_console
from cuberay.platform.policy.fit import platform_topology
from cuberay.platform.policy.scheduling import TenantQuota
from cuberay.platform.sim.cluster import NodeSpec
from cuberay.platform.sim.distance import DistanceCost
from cuberay.platform.sim.engine import Report, simulate
from cuberay.platform.sim.inputs import platform_policy
from cuberay.platform.sim.trace import TraceJob
from cuberay.platform.spec import Platform

# Starting a process costs about a second (imports): below this many jobs a replay takes less than that.
PARALLEL_FROM_JOBS = 2_000


@dataclass(frozen=True)
class Replay:
    """One replay: the trace on the cluster under one policy (and placement)."""

    jobs: Sequence[TraceJob]
    cluster: Sequence[NodeSpec]
    quotas: dict[str, TenantQuota] | None
    policy: str
    platform: Platform | None
    checkpoint_s: float
    restart_s: float
    until: float | None
    demand: float | None
    placement: str | None
    distance: DistanceCost | None

    @property
    def label(self) -> str:
        return self.policy if self.placement is None else f"{self.policy}, {self.placement}"


def run(replay: Replay) -> Report:
    topology = platform_topology(replay.platform) if replay.platform is not None else None
    return simulate(replay.jobs, replay.cluster, replay.quotas, platform_policy(replay.policy, replay.platform),
                    checkpoint_interval_s=replay.checkpoint_s, restart_cost_s=replay.restart_s, until=replay.until,
                    until_demand=replay.demand, placement=replay.placement, topology=topology,
                    distance=replay.distance)


def run_all(replays: Sequence[Replay]) -> list[Report]:
    """Every replay's report, in the order given; each one's end is printed as it comes."""
    err = error_console()
    jobs = len(replays[0].jobs) if replays else 0
    workers = min(len(replays), len(os.sched_getaffinity(0)))  # the cores this process may use
    if workers <= 1 or jobs < PARALLEL_FROM_JOBS:
        reports = []
        for replay in replays:
            with err.status(f"replaying {jobs:,} jobs under {replay.label} ..."):
                reports.append(run(replay))
            _done(replay, reports[-1])
        return reports
    labels = ", ".join(r.label for r in replays)
    done: list[Report | None] = [None] * len(replays)
    pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        with err.status(f"replaying {jobs:,} jobs under {labels}, {workers} at a time ..."):
            futures = {pool.submit(run, replay): i for i, replay in enumerate(replays)}
            for future in concurrent.futures.as_completed(futures):
                i = futures[future]
                done[i] = future.result()
                _done(replays[i], done[i])
    finally:  # one that failed (or Ctrl-C) stops the rest instead of waiting for them
        pool.shutdown(wait=True, cancel_futures=True)
    return [r for r in done if r is not None]


def _done(replay: Replay, report: Report) -> None:
    error_console().print(f"{replay.label}: {report.finished:,}/{report.jobs:,} finished in {report.wall_s:.1f} s",
                          highlight=False)
