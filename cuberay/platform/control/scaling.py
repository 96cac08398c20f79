"""On KubeRay: what the controller asks of Ray's autoscaler each tick, and what it tells the gangs that wait.

The decision is pure (:func:`cuberay.platform.policy.autoscale.scale_up_request`); this component makes the one
Ray call when the request changes, and lends its reasons to the waits the admission cycle published. A reason
says "asked Ray's autoscaler" only for a request Ray took.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from cuberay.platform.policy.autoscale import ScaleUp, WorkerGroup, scale_up_request
from cuberay.platform.policy.cluster_state import ClusterState

log = logging.getLogger(__name__)


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
                await asyncio.to_thread(self.cluster.request_resources, [b for b, _ in scale.bundles],
                                        [s for _, s in scale.bundles])
            except Exception as err:  # a hint to the autoscaler: never let it stop the admission loop
                log.warning("could not ask the autoscaler for nodes: %s", err)
                self._sent, self._asked = None, ScaleUp()
                return
            self._sent = scale.bundles
        self._asked = scale

    def explain(self, waits: dict[str, str]) -> None:
        """Each waiting gang's reason, with the new nodes asked for it (and no stale mention of them)."""
        if not self.groups:
            return
        for job_id, why in list(waits.items()):
            waits[job_id] = self._asked.reason(job_id, why)
