"""The controller's submit calls: one job, or many copies of one job in a single call.

A mixin of :class:`cuberay.platform.control.controller.Controller`, which supplies
platform, store, state, ledger, groups, metrics, seq_floor, drivers, claims, ``_submit_lock``
and ``_wake``. A submit only adds a waiting job (one synchronous step on the actor's
loop), so it takes ``_submit_lock``, never the tick's lock: it answers while a tick
waits on Ray. Ids are ``<tenant>-<name>-<seq>``; ``seq_floor`` keeps them unique on
the cluster across database resets.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Mapping

from cuberay.errors import AdmissionError, SpecError
from cuberay.platform.api.records import JobRecord
from cuberay.platform.control import convert as conv
from cuberay.platform.control import correcting
from cuberay.platform.control.endpoint import endpoint
from cuberay.platform.control.guard import Principal, token_hash
from cuberay.platform.policy.autoscale import with_headroom
from cuberay.platform.policy.fit import check_job, pool_problem
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec

MAX_COPIES = 200_000  # one call's rows; a backlog larger than this is submitted in several calls


class Submitting:
    @endpoint
    async def submit(self, who: Principal, spec: Mapping[str, Any], tenant: str | None = None,
                     driver: str = "launcher", submission_id: str | None = None, request_id: str | None = None,
                     driver_token: str | None = None) -> JobRecord:
        """Validate, check it could ever run, and queue it; AdmissionError (exit 3) with the reason if not.

        With ``request_id`` (the caller's own id for this submission) submitting again returns the job the first
        call made, so a client may retry a submit whose answer it lost. An external driver (``driver`` external)
        hands over ``driver_token``, the secret its calls will carry; the store keeps its hash.
        """
        user = who.user
        job = load_spec(dict(spec))
        conv.require_runnable(job)
        async with self._submit_lock:
            if request_id is not None:
                earlier = self.store.find_request(user, request_id)
                if earlier is not None:
                    return conv.same_request(earlier, job)
            owner, job, correction, now = self._owned(job, tenant, who)
            self._unclaimed(job, user, 1)
            seq = await self._seqs(owner.name, job.name, 1)
            job_id = f"{owner.name}-{job.name}-{seq}"
            req = conv.job_request(job_id, job, owner, now, user)
            record = self._record(job_id, owner.name, job, req, user, now, seq, correction, driver=driver,
                                  submission_id=submission_id, request_id=request_id)
            token = {"driver_token": token_hash(driver_token)} if driver == "external" and driver_token else {}
            rule, problem = self._never_fits(job, [req], owner)
            if problem:
                self.store.add_job(record.model_copy(update={"state": JobState.REJECTED, "reason": problem,
                                                             "message": problem, "end_time": now}),
                                   [("rejected", problem)])
                self.metrics.rejected(owner.name, rule)
                raise AdmissionError(f"job {job_id} rejected: {problem}")
            events = [("corrected", correcting.describe(correction))] if correction else []
            self.store.add_job(record, [*events, ("submitted", _submitted(job, user, req))], **token)
            self.claims.hold(job_id, job.claims())
            if driver == "external":
                self.drivers.contact[job_id] = now
            self._wake.set()
            return record

    @endpoint
    async def submit_copies(self, who: Principal, spec: Mapping[str, Any], count: int,
                            tenant: str | None = None) -> tuple[str, list[str]]:
        """Queue ``count`` copies of one job (consecutive ids) in one call and one transaction: (tenant, ids).

        For a backlog (a sweep of identical runs, a deadline rush): the checks run once, the rows are one
        bulk insert. All or none: if the job could never run, nothing is queued (AdmissionError, exit 3).
        """
        user = who.user
        if not 1 <= count <= MAX_COPIES:
            raise SpecError(f"count {count} is outside 1..{MAX_COPIES:,}; submit a larger backlog in several calls")
        job = load_spec(dict(spec))
        conv.require_runnable(job)
        async with self._submit_lock:
            owner, job, correction, now = self._owned(job, tenant, who)
            self._unclaimed(job, user, count)
            first = await self._seqs(owner.name, job.name, count)
            ids = [f"{owner.name}-{job.name}-{seq}" for seq in range(first, first + count)]
            reqs = [conv.job_request(job_id, job, owner, now, user) for job_id in ids]
            rule, problem = self._never_fits(job, reqs, owner)
            if problem:
                self.store.add_event("rejected", f"{count} copies of {job.kind} {job.name!r} by {user}: {problem}")
                self.metrics.rejected(owner.name, rule)
                raise AdmissionError(f"{count} copies of {job.kind} {job.name!r} rejected: {problem}")
            spec_json = job.model_dump(mode="json")  # once: the copies share it
            records = [self._record(job_id, owner.name, job, req, user, now, first + i, correction,
                                    spec_json=spec_json, driver="launcher")
                       for i, (job_id, req) in enumerate(zip(ids, reqs))]
            self.store.add_jobs(records, "submitted", [_submitted(job, user, reqs[0])] * count)
            self.claims.hold(ids[0], job.claims())  # one copy at most (_unclaimed)
            self._wake.set()
            return owner.name, ids

    # ------------------------------------------------------------------ pieces

    def _owned(self, job: Any, tenant: str | None, who: Principal) -> tuple[Any, Any, Any, float]:
        """(tenant, job as that tenant's, resource correction, now); AdmissionError if the user may not."""
        user = who.user
        try:
            owner = conv.choose_tenant(self.platform, user, tenant, job.tenant, who.preferred_tenant).tenant
        except AdmissionError as err:
            self.store.add_event("denied", f"submit of {job.kind} {job.name!r} by {user}: {err}")
            raise
        if job.tenant != owner.name:
            job = job.with_tenant(owner.name)
        clash = self.store.prefix_owner(owner.name, job.name)
        if clash is not None:
            problem = (f"job name {job.name!r} in tenant {owner.name!r} makes the id prefix "
                       f"'{owner.name}-{job.name}', which tenant {clash.tenant!r}'s job {clash.name!r} already "
                       f"uses (job ids and Ray Serve app names are '<tenant>-<name>'); rename the job")
            self.store.add_event("rejected", problem)
            raise AdmissionError(problem)
        now = time.time()
        job, correction = correcting.apply(self.store, job, self.state.tenants.get(owner.name),
                                           [n.capacity for n in self.ledger.nodes.values()], now)
        return owner, job, correction, now

    def _unclaimed(self, job: Any, user: str, count: int) -> None:
        """AdmissionError (exit 3) when an active job holds what ``job`` claims (a route, a Serve app name)."""
        claims = job.claims()
        if not claims:
            return
        problem = (f"{count} copies of {job.kind} {job.name!r} would all claim "
                   f"{', '.join(f'{c.what} {c.value!r}' for c in claims)}, which only one job may hold; submit one"
                   if count > 1 else self.claims.clash(claims, self.store.get_job))
        if problem:
            problem = f"{job.kind} {job.name!r} of {user} refused: {problem}"
            self.store.add_event("rejected", problem)
            raise AdmissionError(problem)

    async def _seqs(self, tenant: str, name: str, count: int) -> int:
        """The first of ``count`` fresh sequence numbers for ``tenant``/``name``, recorded on the cluster."""
        first = await asyncio.to_thread(self.seq_floor.next, tenant, name, self.store.next_seq(tenant, name))
        await asyncio.to_thread(self.seq_floor.record, tenant, name, first + count - 1)
        return first

    def _record(self, job_id: str, tenant: str, job: Any, req: Any, user: str, now: float, seq: int,
                correction: Any, spec_json: dict | None = None, **extra: Any) -> JobRecord:
        return JobRecord(id=job_id, tenant=tenant, name=job.name, kind=job.kind, user=user,
                         spec=spec_json or job.model_dump(mode="json"), state=JobState.QUEUED, priority=req.priority,
                         submit_time=now, seq=seq, gpus=req.gpus, reason="waiting for the next admission cycle",
                         correction=correction, **extra)

    def _never_fits(self, job: Any, reqs: list[Any], owner: Any) -> tuple[str, str | None]:
        """(rule, reason) when the job can never run: a node pool its tenant may not use, over its tenant's max,
        or larger than the cluster.

        On success every request is in the core's queue (they are copies: the first's answer is theirs).
        """
        outside = pool_problem(job, owner)
        if outside:
            return "pool", outside
        try:
            check_job(conv.live_platform(self.platform), job)
        except AdmissionError as err:
            return "quota", str(err)
        with with_headroom(self.state, self.groups):  # on KubeRay, nodes the autoscaler may add count
            reject = self.state.submit(reqs[0])
            if reject is None:
                for req in reqs[1:]:
                    self.state.submit(req)
        return "capacity", (reject.reason if reject is not None else None)


def _submitted(job: Any, user: str, req: Any) -> str:
    return f"{job.kind} by {user}: {req.workers} worker(s) x {req.worker.resources}"
