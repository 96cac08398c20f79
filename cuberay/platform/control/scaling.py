"""On KubeRay: what the controller asks of Ray's autoscaler each tick, and what it tells the gangs that wait.

The decision is pure (:func:`cuberay.platform.policy.autoscale.scale_up_request`); this component makes the one
Ray call when the request changes, and lends its reasons to the waits the admission cycle published. A reason
says "asked Ray's autoscaler" only for a request Ray took.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Collection

from cuberay.platform.control.aio import wait_set
from cuberay.platform.control.nodes import live_nodes
from cuberay.platform.policy.autoscale import ScaleUp, WorkerGroup, as_requested, scale_up_request
from cuberay.platform.policy.cluster_state import ClusterState

log = logging.getLogger(__name__)
# While a gang waits for new nodes, how often the head looks for them between ticks (one read of Ray's node list,
# 0.7 ms on a 4-node local cluster): a node that joins wakes nothing, and the gang would wait out the rest of the
# cycle interval. On a cluster whose reads take longer, the polls spread out so they cost at most a tenth of the time.
NODE_POLL_S = 0.25
POLL_SHARE = 0.1


class ScaleRequests:
    """The autoscaler request of one controller (none when the head names no worker groups)."""

    def __init__(self, cluster: Any, groups: list[WorkerGroup]) -> None:
        self.cluster, self.groups = cluster, groups
        self._sent: list[Any] | None = None  # the bundles Ray last took
        self._asked = ScaleUp()  # what they ask for, per waiting gang (for the reasons)

    async def update(self, state: ClusterState, now: float) -> None:
        """Ask for what waiting gangs need (and keep what admitted ones hold), when it changed."""
        if not self.groups:
            return
        scale = scale_up_request(state, self.groups, now)
        if scale.bundles != self._sent:
            try:
                await asyncio.to_thread(self.cluster.request_resources, [as_requested(b) for b, _ in scale.bundles],
                                        [s for _, s in scale.bundles])
            except Exception as err:  # a hint to the autoscaler: never let it stop the admission loop
                log.warning("could not ask the autoscaler for nodes: %s", err)
                self._sent, self._asked = None, ScaleUp()
                return
            self._sent = scale.bundles
        self._asked = scale

    @property
    def awaiting_nodes(self) -> bool:
        """Whether a waiting gang waits for new nodes asked of the autoscaler."""
        return bool(self._asked.workers)

    async def idle_wait(self, wake: asyncio.Event, interval_s: float, known: Callable[[], Collection[str]]) -> None:
        """The admission loop's wait between ticks: until ``wake`` is set or ``interval_s`` passes, and, while a
        gang waits for new nodes, until a node joins that is not in ``known()``. Never raises: the admission loop
        calls it outside its tick's guard."""
        deadline = time.monotonic() + interval_s
        poll_s = NODE_POLL_S
        while (left := deadline - time.monotonic()) > 0:
            if not self.awaiting_nodes:
                await wait_set(wake, left)
                return
            if await wait_set(wake, min(left, poll_s)):
                return
            started = time.monotonic()
            try:
                joined = set(live_nodes(await asyncio.to_thread(self.cluster.nodes))) - set(known())
            except Exception as err:  # noqa: BLE001 - the next tick reads them again; wait as without a gang
                log.warning("could not read Ray's nodes: %s", err)
                await wait_set(wake, deadline - time.monotonic())
                return
            if joined:
                return
            poll_s = max(NODE_POLL_S, (time.monotonic() - started) / POLL_SHARE)

    def explain(self, waits: dict[str, str]) -> None:
        """Each waiting gang's reason, with the new nodes asked for it (and no stale mention of them)."""
        if not self.groups:
            return
        for job_id, why in list(waits.items()):
            waits[job_id] = self._asked.reason(job_id, why)
