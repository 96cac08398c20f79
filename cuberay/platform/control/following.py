"""The controller's drivers loop: start admitted jobs' drivers, follow their ends, and notice dead ones.

A mixin of :class:`~cuberay.platform.control.controller.Controller`, which supplies ``store``,
``drivers``, ``waits``, ``_last_external_check``, ``_end`` and ``_requeue``. What happened to a
driver is :mod:`.drivers`' business; what it means for the job is decided here.
"""

from __future__ import annotations

import logging
import time

from cuberay import kinds
from cuberay.errors import CuberayError, PlatformNotRunningError
from cuberay.platform.api.records import JobRecord
from cuberay.platform.control import convert as conv
from cuberay.platform.control.guard import new_driver_token, token_hash
from cuberay.platform.control.launcher import LOST, STOPPED, SUCCEEDED, TERMINAL
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec

log = logging.getLogger("cuberay.controller")

EXTERNAL_TIMEOUT_S = 60.0      # an external driver polls every 1-2 s; this long silent means it died
EXTERNAL_CHECK_S = 5.0         # how often external drivers' Ray Jobs are looked up
LOST_RETRIES = 3               # attempts beyond max_failures for a job whose driver's node went away
LOST_EVENT = "driver_lost"     # the event recorded for each such attempt
# Attempts that ended through no fault of their own spend none of max_failures: preempted (a reclaim, a higher
# priority, the node lost, the platform stopped) or the driver gone with its node.
NOT_FAILURES = ("preempted", LOST_EVENT)


class Following:
    """Driver starts and ends, for the controller's tick (it supplies drivers, ledger, store and waits)."""

    async def _start_drivers(self, now: float) -> None:
        """Start ADMITTED launcher jobs oldest first while driver slots are free."""
        nowhere = self._no_driver_node()
        for job_id in sorted(self.drivers.awaiting, key=self.drivers.awaiting.__getitem__):
            if job_id not in self.drivers.awaiting:
                continue  # cancelled while an earlier start was awaited
            full = self.drivers.full()
            if full:
                self.waits.update({waiting: full for waiting in self.drivers.awaiting})
                return
            rec = self.store.get_job(job_id)
            if nowhere and not self.drivers.runs_small(rec):  # Ray would keep its Ray Job PENDING, saying nothing
                self.waits[job_id] = nowhere
                continue
            sid = conv.submission_id(job_id, rec.attempts)
            if await self._started_before_restart(rec, sid):
                continue
            token = new_driver_token()  # the attempt's secret: the store keeps only its hash
            # First, so a fast driver finds its id and its secret is known.
            rec = self.store.update_job(job_id, submission_id=sid, driver_token=token_hash(token))
            try:
                await self.drivers.start(sid, rec, token)
            except PlatformNotRunningError as err:
                log.warning("cannot start %s yet: %s", job_id, err)
                return  # the dashboard is away; the next tick retries
            except CuberayError as err:
                if not self.store.get_job(job_id).state.is_terminal:
                    self._end(job_id, JobState.FAILED, f"could not start its Ray Job {sid}: {err}", now)
                continue
            if self.store.get_job(job_id).state.is_terminal:  # cancelled while it started: stop what started
                self.drivers.stop(sid, preempted=False)
                continue
            what = self.drivers.what(sid)
            self.store.update_job(job_id, state=JobState.RUNNING, start_time=time.time(),
                                  reason=f"running as {what}", event=("started", f"{what} submitted"))

    def _no_driver_node(self) -> str | None:
        """Why no Ray Job driver can start now: no live node offers the platform's driver_resource; else None."""
        name = self.drivers.driver_resource
        if name is None or any(n.alive and n.capacity.get(name, 0.0) > 0 for n in self.ledger.nodes.values()):
            return None
        slots = self.drivers.launcher.max_drivers
        return (f"admitted; waiting for a node that offers the Ray resource {name!r}: each job driver asks one unit "
                f"of it (the platform's scheduler.driver_resource) and no live node has it. Start a Ray node that "
                f"offers it (ray start ... --resources='{{\"{name}\": {slots}}}'; on Kubernetes every worker group "
                f"does), or set "
                f"scheduler.driver_resource to null so that drivers run on the head")

    async def _started_before_restart(self, rec: JobRecord, sid: str) -> bool:
        """Adopt this attempt's Ray Job if the previous controller submitted it and died before it said RUNNING.

        Its driver holds the secret whose hash the store kept with ``submission_id`` (both are written before the
        submit): a new secret would lock that driver out, and the attempt would fail for no fault of its own.
        """
        if rec.submission_id != sid or self.drivers.runs_small(rec) or await self.drivers.status(sid) is None:
            return False
        self.drivers.adopt(sid, rec)
        self.drivers.awaiting.pop(rec.id, None)
        what = self.drivers.what(sid)
        self.store.update_job(rec.id, state=JobState.RUNNING, start_time=time.time(), reason=f"running as {what}",
                              event=("started", f"{what} adopted: submitted before the controller restarted"))
        return True

    async def _follow_drivers(self, now: float) -> None:
        """Ray Job ends -> job ends (or is retried); expected STOPs of preempted drivers are dropped."""
        for sid, job_id, status in await self.drivers.ended():
            rec = self.store.get_job(job_id)
            if rec.state.is_terminal or rec.submission_id != sid:
                continue
            what = self.drivers.what(sid)
            if status == SUCCEEDED:
                self._end(job_id, JobState.SUCCEEDED, rec.message or f"{what} succeeded", now)
            elif status == STOPPED:
                self._end(job_id, JobState.CANCELLED, f"{what} was stopped outside cuberay", now)
            elif status == LOST and self._count(job_id, (LOST_EVENT,)) < LOST_RETRIES:
                # Not the job's fault: its driver went with the node it ran on. Run it again as a new attempt,
                # outside the spec's max_failures (a few times: a cluster that keeps losing it fails it).
                reason = f"attempt {rec.attempts} lost its driver ({what}: its node went away); running it again"
                self.store.update_job(job_id, event=(LOST_EVENT, reason))
                self._requeue(job_id, reason, now, preempted=False)
            else:
                message = await self.drivers.failure_message(sid)
                rec = self.store.get_job(job_id)  # a cancel may have ended it meanwhile
                if not rec.state.is_terminal and rec.submission_id == sid:
                    self._failed(rec, f"{what} failed: {message}", now)

    def _failed(self, rec: JobRecord, message: str, now: float) -> None:
        """FAILED, or back to the queue while the spec's max_failures allows another attempt."""
        # One budget, one owner: the kind says how many the controller retries (none where the workload retries
        # in place, as Ray Train does for a function-mode TrainJob).
        allowed = kinds.of(rec.kind).retries(load_spec(rec.spec))
        failures = rec.attempts - self._count(rec.id, NOT_FAILURES)
        if failures <= allowed:
            self._requeue(rec.id, f"attempt {rec.attempts} failed ({message}); retrying "
                                  f"({failures} of {allowed} allowed failures used)", now, preempted=False)
            return
        self._end(rec.id, JobState.FAILED, message, now)

    def _count(self, job_id: str, kinds: tuple[str, ...]) -> int:
        """The job's events of these kinds: one per attempt that ended that way."""
        return sum(e.kind in kinds for e in self.store.events(job_id, limit=None))

    async def _check_external(self, now: float) -> None:
        """External drivers that went silent, or whose Ray Job ended, have died: their jobs fail."""
        for job_id, last in list(self.drivers.contact.items()):
            if now - last > EXTERNAL_TIMEOUT_S:
                self._end(job_id, JobState.FAILED, f"its driver stopped polling the controller "
                                                   f"{now - last:.0f}s ago (it died or lost the cluster)", now)
        if now - self._last_external_check < EXTERNAL_CHECK_S:
            return
        self._last_external_check = now
        for job_id in list(self.drivers.contact):
            rec = self.store.get_job(job_id)
            if not rec.submission_id:
                continue
            status = await self.drivers.status(rec.submission_id)
            if status in TERMINAL and job_id in self.drivers.contact:
                self._end(job_id, JobState.FAILED,
                          f"its driver, Ray Job {rec.submission_id}, ended ({status}) without reporting", now)
