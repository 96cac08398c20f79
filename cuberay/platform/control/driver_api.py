"""The controller's API for job drivers: where a job stands, what to run, checkpoints, how a run ended.

A mixin of :class:`cuberay.platform.control.controller.Controller`. The launcher's
drivers (``python -m cuberay.run <job-id>``) and external drivers (``ray job submit
-- cuberay run FILE``) call these; an external driver's calls double as heartbeats.
Only the job's own driver may: each call carries its attempt's secret (control/guard.py).
"""

from __future__ import annotations

import time

from cuberay.errors import CuberayError
from cuberay.platform.api.records import AdmissionInfo, AllocationInfo, JobContext, JobRecord, TrialInfo
from cuberay.platform.control import convert as conv
from cuberay.platform.control.endpoint import endpoint
from cuberay.platform.control.guard import Principal
from cuberay.platform.policy.states import JobState


class DriverAPI:
    """Drivers' calls; the controller supplies store, state, waits, drivers, platform, _lock, _end and _failed."""

    @endpoint
    async def admission(self, who: Principal, job_id: str) -> AdmissionInfo:
        """For an external driver (and a heartbeat from it): state, queue position, reason, attempt."""
        rec = self.store.get_job(job_id)
        if rec.driver == "external" and not rec.state.is_terminal:
            self.drivers.contact[job_id] = time.time()
        # Positions as of the last tick (the snapshot the reads use): computing the order per poll costs O(queue).
        position = self.snapshot.positions.get(job_id) if rec.state.is_waiting else None
        reason = self.waits.get(job_id) or rec.message or rec.reason
        return AdmissionInfo(state=rec.state, position=position, reason=reason or "", attempt=rec.attempts)

    @endpoint
    async def job_context(self, who: Principal, job_id: str, submission_id: str | None = None) -> JobContext:
        """What a driver needs to run the job's current attempt; marks an external job RUNNING."""
        rec = self.store.get_job(job_id)
        if not rec.state.holds_resources:
            raise CuberayError(f"job {job_id} is {rec.state.value}, not admitted, so there is nothing to run; "
                               f"check it with `cuberay status {job_id}`")
        if rec.driver == "launcher" and submission_id and rec.submission_id and submission_id != rec.submission_id:
            raise CuberayError(f"this driver ({submission_id}) is a stale attempt of {job_id}; the current "
                               f"attempt is {rec.submission_id}")
        if rec.driver == "external":
            self.drivers.contact[job_id] = time.time()
            if rec.state == JobState.ADMITTED:
                rec = self.store.update_job(job_id, state=JobState.RUNNING, start_time=time.time(),
                                            reason="running in its external driver",
                                            event=("started", "external driver started its run"))
        run_id = rec.submission_id or f"{job_id}-{rec.attempts}"
        return JobContext(record=rec, node_ids=conv.node_ids_of(rec.allocation), identity=conv.identity(rec, run_id),
                          attempt=rec.attempts, storage_path=str(self._tenant_storage(rec.tenant)))

    @endpoint
    async def allocation(self, who: Principal, job_id: str, attempt: int) -> AllocationInfo:
        """A running driver's poll: the attempt's current nodes (they change when admission resizes it) and
        its last checkpoint time; ``current`` False when the attempt is no longer the job's."""
        rec = self.store.get_job(job_id)
        if rec.driver == "external" and not rec.state.is_terminal:
            self.drivers.contact[job_id] = time.time()
        current = rec.state.holds_resources and rec.attempts == attempt
        return AllocationInfo(current=current, node_ids=conv.node_ids_of(rec.allocation) if current else [],
                              checkpoint_time=rec.checkpoint_time)

    @endpoint
    async def resized(self, who: Principal, job_id: str, attempt: int, workers: int, note: str) -> None:
        """A driver applied a resize (restarted its worker group, re-pinned its replicas): an event."""
        rec = self.store.get_job(job_id)
        if rec.attempts == attempt:
            self.store.add_event("resize_applied", f"{workers} worker(s): {note}", job_id)

    @endpoint
    async def job_report(self, who: Principal, job_id: str, attempt: int, text: str, final: bool = False) -> JobRecord:
        """A running driver's progress (into reason) or result (into message, kept when it succeeds)."""
        rec = self.store.get_job(job_id)
        if not rec.state.holds_resources or attempt != rec.attempts:
            return rec  # a stale attempt
        return self.store.update_job(job_id, **({"message": text} if final else {"reason": text}))

    @endpoint
    async def finished(self, who: Principal, job_id: str, ok: bool, message: str = "",
                       attempt: int | None = None) -> JobRecord:
        """An external driver's report of its run's end."""
        async with self._lock:
            rec = self.store.get_job(job_id)
            if rec.state.is_terminal or not rec.state.holds_resources or \
                    (attempt is not None and attempt != rec.attempts):
                return rec  # a stale report (preempted or cancelled meanwhile)
            now = time.time()
            if ok:
                # A message the run reported (job_report) says more than "the run exited 0".
                return self._end(job_id, JobState.SUCCEEDED, rec.message or message or "driver reported success",
                                 now)
            self._failed(rec, message or "driver reported failure", now)
            return self.store.get_job(job_id)

    @endpoint
    async def checkpointed(self, who: Principal, job_id: str, attempt: int, when: float | None = None) -> None:
        """A running attempt saved a checkpoint: a preemption now loses only the work since ``when``.

        Preemption picks its victims by least work lost, so the time matters; a job that never reports one
        counts from its start.
        """
        when = time.time() if when is None else when
        async with self._lock:
            run = self.state.running.get(job_id)
            rec = self.store.get_job(job_id)
            if run is None or rec.attempts != attempt:
                return  # a stale report: the attempt was preempted or ended meanwhile
            run.checkpoint_time = when
            self.store.update_job(job_id, checkpoint_time=when)

    @endpoint
    async def usage(self, who: Principal, job_id: str, worker: int, cpu: float, memory_gib: float) -> None:
        """One worker's peak cores and GiB in the current attempt (automatic resource correction reads them)."""
        async with self._lock:
            rec = self.store.get_job(job_id)
            if rec.attempts:
                self.store.add_usage(job_id, rec.attempts, int(worker), float(cpu), float(memory_gib))

    @endpoint
    async def trials_report(self, who: Principal, job_id: str, attempt: int, trials: list[TrialInfo]) -> None:
        """The trials of a running search that changed since its last report (a stale attempt's are dropped)."""
        rec = self.store.get_job(job_id)
        if not rec.state.holds_resources or attempt != rec.attempts:
            return
        self.store.put_trials(job_id, attempt, [TrialInfo.model_validate(t) for t in trials])  # dicts over HTTP
