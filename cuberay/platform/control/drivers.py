"""The controller's drivers: which Ray Job is which job, the driver cap, stops, and heartbeats.

Every admitted ``launcher`` job runs as one Ray Job (``python -m cuberay.run
<job-id>``), except a small one (a one-worker command Task), which runs as one
named Ray task without a driver process (:mod:`.small`); an ``external`` job's driver is the user's own process, which
polls the controller. This module keeps the bookkeeping of both apart from the
job state machine in ``controller.py``: it says what happened to a driver, the
controller decides what that means for the job.

The Ray Jobs client is synchronous, so every call runs in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import sys
from typing import Any, Callable

import ray

from cuberay import kinds
from cuberay.errors import CuberayError, NotFoundError, PlatformNotRunningError
from cuberay.platform.api import TOKEN_ENV, USER_ENV
from cuberay.platform.api.records import JobRecord
from cuberay.platform.control import convert as conv
from cuberay.platform.control.failure import failure_tail
from cuberay.platform.control.launcher import TERMINAL, Launcher
from cuberay.platform.control.small import SmallRuns, is_small
from cuberay.platform.spec import load_spec

log = logging.getLogger("cuberay.controller")


class Drivers:
    """Bookkeeping of the platform's job drivers (one instance, inside the controller actor)."""

    def __init__(self, launcher: Launcher, small: SmallRuns | None = None,
                 console: Callable[[], bytes | None] = lambda: None, driver_resource: str | None = None) -> None:
        self.launcher = launcher
        self.driver_resource = driver_resource    # each driver asks one of it: drivers run where nodes offer it
        self.small = small                        # small jobs as Ray tasks (None: every job is a Ray Job)
        self.small_on = small is not None         # False after a reload turned them off: runs in flight go on
        self.console = console                    # the web console's address, if the head serves one
        self.by_sid: dict[str, str] = {}          # Ray submission id -> job id (launcher drivers we follow)
        self.preempted: set[str] = set()          # drivers stopped by a preemption: their STOPPED is expected
        self.awaiting: dict[str, float] = {}      # ADMITTED launcher job -> when it was admitted
        self.contact: dict[str, float] = {}       # external job -> when its driver last called
        self._to_stop: list[str] = []

    # -- bookkeeping --------------------------------------------------------------------

    def adopt(self, sid: str, rec: JobRecord) -> None:
        """Follow a driver (or a small job's run) started before a controller restart."""
        if self.runs_small(rec):
            assert self.small is not None
            self.small.adopt(sid, rec, conv.node_ids_of(rec.allocation)[0], conv.identity(rec, sid))
        else:
            self.launcher.adopt([sid])
        self.by_sid[sid] = rec.id

    def stop(self, sid: str, *, preempted: bool) -> None:
        """Stop a driver at the end of this tick; a preempted one's STOPPED is then ignored."""
        if preempted:
            self.preempted.add(sid)
        else:
            self.by_sid.pop(sid, None)  # the job already has its end; nothing to follow
        self._to_stop.append(sid)

    def forget(self, job_id: str) -> None:
        self.awaiting.pop(job_id, None)
        self.contact.pop(job_id, None)

    # -- Ray calls ---------------------------------------------------------------------

    async def stop_pending(self) -> None:
        stops, self._to_stop = self._to_stop, []
        for sid in stops:
            try:
                if self.small is not None and sid in self.small.runs:
                    await self.small.stop(sid)
                    continue
                await asyncio.to_thread(self.launcher.stop, sid)
            except CuberayError as err:
                log.warning("could not stop Ray Job %s: %s", sid, err)

    async def ended(self) -> list[tuple[str, str, str]]:
        """(submission id, job id, terminal status) of followed drivers that ended since the last call."""
        try:
            changed = await asyncio.to_thread(self.launcher.poll) if self.launcher.tracked() else {}
        except CuberayError as err:
            log.warning("cannot poll Ray Jobs: %s", err)
            changed = {}
        if self.small is not None:
            changed.update(self.small.ended())
        out = []
        for sid, status in changed.items():
            if status not in TERMINAL:
                continue
            job_id = self.by_sid.pop(sid, None)
            if sid in self.preempted:
                self.preempted.discard(sid)
            elif job_id is not None:
                out.append((sid, job_id, status))
        return out

    def in_flight(self) -> int:
        """Ray Job drivers and small runs in flight: the driver cap bounds both together."""
        return self.launcher.in_flight() + (self.small.in_flight() if self.small is not None else 0)

    def full(self) -> str | None:
        """Why no driver can start now, or None."""
        if self.in_flight() < self.launcher.max_drivers:
            return None
        return (f"admitted; waiting for a driver slot ({self.in_flight()} of "
                f"{self.launcher.max_drivers} job drivers running)")

    def runs_small(self, rec: JobRecord) -> bool:
        return self.small is not None and self.small_on and is_small(load_spec(rec.spec)) and self.small.available()

    def what(self, sid: str) -> str:
        """How messages name the run of ``sid``: its Ray Job, or a small job's Ray task."""
        if self.small is not None and self.small.handles(sid):
            return f"Ray task {self.small.names.get(sid, sid)}"
        return f"Ray Job {sid}"

    async def start(self, sid: str, rec: JobRecord, token: str) -> None:
        """Submit the Ray Job (or a small job's Ray task) of one attempt; ``token`` is the attempt's secret,
        which reaches the driver (and every process of its Ray Job) only through its environment.

        Raises CuberayError; PlatformNotRunningError: retry later.
        """
        spec = rec.spec.get("spec", {})
        if self.runs_small(rec):
            assert self.small is not None
            try:
                await self.small.start(sid, rec, conv.node_ids_of(rec.allocation)[0], conv.identity(rec, sid))
            except (CuberayError, ValueError, TypeError, OSError) as err:
                raise CuberayError(f"cannot submit its Ray task: {err}") from err
            except ray.exceptions.RayError as err:
                raise PlatformNotRunningError(f"the small-job runner is unreachable: {err}") from err
            self.by_sid[sid] = rec.id
            self.awaiting.pop(rec.id, None)
            return
        # job_name is what the Ray dashboard's Jobs tab shows in its Name column; the console link leads back.
        metadata = {"job_name": rec.name, "cuberay.io/tenant": rec.tenant, "cuberay.io/job": rec.id,
                    "cuberay.io/kind": rec.kind, "cuberay.io/user": rec.user}
        console = await asyncio.to_thread(self.console)
        if console:
            metadata["cuberay.io/console"] = f"{console.decode()}/#/job/{rec.id}"
        await asyncio.to_thread(
            self.launcher.start, sid, driver_entrypoint(rec.id), metadata=metadata,
            runtime_env=spec.get("runtime_env") or None,
            env={**(spec.get("env") or {}), **kinds.env(), TOKEN_ENV: token, USER_ENV: rec.user},
            driver_resources=driver_resources(spec.get("env") or {}, self.driver_resource))
        self.by_sid[sid] = rec.id
        self.awaiting.pop(rec.id, None)

    async def status(self, sid: str) -> str | None:
        try:
            return await asyncio.to_thread(self.launcher.status, sid)
        except CuberayError:
            return None

    async def logs(self, sid: str) -> str:
        try:
            return await asyncio.to_thread(self.launcher.logs, sid)
        except NotFoundError:
            return ""

    async def failure_message(self, sid: str) -> str:
        """The last lines of a failed driver's log: usually the error."""
        if self.small is not None and self.small.handles(sid):
            return self.small.failure_message(sid)
        try:
            text = await self.logs(sid)
        except CuberayError:
            return "see its Ray Job log"
        return failure_tail(text)

    def info(self) -> dict[str, Any]:
        return {"in_flight": self.in_flight(), "max_drivers": self.launcher.max_drivers,
                "small": self.small.in_flight() if self.small is not None else 0,
                "awaiting": len(self.awaiting), "external": len(self.contact)}


def driver_resources(env: dict[str, str], place: str | None = None) -> dict[str, Any]:
    """CubeStudio's ``TASK_RESOURCE_CPU/_MEMORY/_GPU`` size the launcher, not the workers: here, the job's driver.

    Values in the spec's grammar ("2", "500m", "4Gi", "1"); unset names leave the driver at 0. ``place`` (the
    platform's driver_resource) is asked one of, which keeps the driver on the nodes that offer it.
    """
    from cuberay.platform.spec.resource_grammar import parse_cpu, parse_gpu, parse_memory

    out: dict[str, Any] = {"resources": {place: 1.0}} if place else {}
    if env.get("TASK_RESOURCE_CPU"):
        out["num_cpus"] = parse_cpu(env["TASK_RESOURCE_CPU"])
    if env.get("TASK_RESOURCE_MEMORY"):
        out["memory"] = float(parse_memory(env["TASK_RESOURCE_MEMORY"]))
    if env.get("TASK_RESOURCE_GPU"):
        out["num_gpus"] = parse_gpu(env["TASK_RESOURCE_GPU"]).count
    return out


def driver_entrypoint(job_id: str) -> str:
    """The Ray Job entrypoint of a launcher driver. Ray runs it through a shell, so every word is quoted:
    no spec value other than a command the author wrote ever reaches a shell unquoted."""
    return f"{shlex.quote(sys.executable)} -m cuberay.run {shlex.quote(job_id)}"
