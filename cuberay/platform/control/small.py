"""Small jobs without a driver process: a one-worker command job (a Task) runs as one named Ray task.

A Ray Job costs a supervisor actor and a driver process (``python -m cuberay.run``,
imports, ``ray.init``) before the command starts: about a second and a half of
the head's CPU for a command that may take milliseconds. A job whose kind says
it may run small (one worker running ``spec.command``: a one-worker ``Task``)
needs none of it: the controller submits one Ray task, named
``<tenant>/<job-id>`` so the Ray dashboard's task view shows the job, its tenant
and its state, pinned to the node the admission chose with the worker's
resources. Ray runs it in a pooled worker process (no process start per job);
the task runs the command in a process group of its own (:class:`CommandProcess`,
with its watchdog) and appends its output to a log file in the tenant's storage,
where ``cuberay logs`` reads it (:mod:`.logs`). Stopping one job cancels only its Ray task, which
kills only its command's process group (forced after a grace period if the task does
not answer); a killed command or a lost worker fails
only that job.

The tasks are submitted by a detached actor next to the controller,
``cuberay-small-runner`` (:mod:`cuberay.runtime.small_runner`), not by the controller itself: a Ray task dies
with the process that submitted it, and small jobs must outlive a controller restart
as Ray Jobs do. The restarted controller adopts them by submission id. The controller creates the runner as it
starts, when its platform runs small jobs, or at a reload that turns them on, with the function ``cuberay up`` and
``client.install`` hand it (this layer does not import the runtime's); Ray hands the same function to a controller
it restarts. A platform with small jobs off starts no runner. Without that function
(a controller installed on its own) every job runs as a Ray Job.

The driver cap (``max_drivers``) counts these runs with the Ray Job drivers, so
the number of jobs the controller runs at once keeps its bound.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Callable

import ray

from cuberay import kinds
from cuberay.platform.control.failure import failure_tail
from cuberay.platform.control.head import NAMESPACE
from cuberay.platform.spec import JobBase

log = logging.getLogger("cuberay.controller")

SUCCEEDED, FAILED, STOPPED = "SUCCEEDED", "FAILED", "STOPPED"
RUNNER_NAME = "cuberay-small-runner"
_DRIVER_SIZED = ("TASK_RESOURCE_CPU", "TASK_RESOURCE_MEMORY", "TASK_RESOURCE_GPU")


def is_small(job: JobBase) -> bool:
    """Whether a job runs as one Ray task: its kind says it may (one worker running ``spec.command``) and its
    driver needs no resources of its own.

    RDMA asks for NCCL's per-node set-up and TASK_RESOURCE_* for a sized driver, both of which the Ray Job
    path provides.
    """
    if not kinds.of(job.kind).small(job):
        return False
    return not any(job.spec.env.get(name) for name in _DRIVER_SIZED) and not job.spec.resources.rdma


def task_name(tenant: str, job_id: str) -> str:
    """The Ray task's name: what the dashboard lists (tenant first, so a tenant's jobs sort together)."""
    return f"{tenant}/{job_id}"


def log_file(storage: Path, job_id: str, sid: str) -> Path:
    """Where one attempt's output goes: the tenant's storage, which every node of the platform reaches."""
    return storage / "logs" / job_id / f"{sid}.log"


def runner_running() -> bool:
    try:
        ray.get_actor(RUNNER_NAME, namespace=NAMESPACE)
    except ValueError:
        return False
    return True


def remove_runner() -> None:
    """Kill the runner (and with it every small job it runs)."""
    try:
        ray.kill(ray.get_actor(RUNNER_NAME, namespace=NAMESPACE), no_restart=True)
    except ValueError:
        pass


class SmallRuns:
    """The controller's side of small jobs: what runs, the cap's count, starts, stops and ends."""

    ENDED_WAIT_S = 5.0  # one long poll of the runner; a run's end comes back as soon as it happens

    def __init__(self, storage_of: Callable[[str], Path], wake: Callable[[], None], node_id: str,
                 start: Callable[[str], Any] | None = None) -> None:
        self.storage_of = storage_of  # tenant name -> its storage folder
        self.wake = wake              # called when a run ends, so the controller acts at once
        self.node_id = node_id
        self.start_runner = start     # node id -> the runner, created there unless it runs
        self._runner: Any = None
        self.runs: set[str] = set()         # submission ids in flight
        self.paths: dict[str, Path] = {}    # submission id -> its log, until its end is read
        self.names: dict[str, str] = {}     # submission id -> its Ray task's name, as long as paths
        self._ended: dict[str, str] = {}
        self._reported: list[str] = []
        self._poller: asyncio.Task | None = None
        self._watchers: set[asyncio.Task] = set()

    @property
    def handle(self) -> Any:
        if self._runner is None:
            try:
                self._runner = ray.get_actor(RUNNER_NAME, namespace=NAMESPACE)
            except ValueError:
                if self.start_runner is None:
                    raise
                self._runner = self.start_runner(self.node_id)
        return self._runner

    def available(self) -> bool:
        """Whether the runner exists: created here if this side can, else looked up until found."""
        try:
            return self.handle is not None
        except ValueError:
            return False

    def in_flight(self) -> int:
        return len(self.runs)

    def handles(self, sid: str) -> bool:
        return sid in self.paths

    def _track(self, sid: str, rec: Any) -> None:
        self.runs.add(sid)
        self.paths[sid] = log_file(self.storage_of(rec.tenant), rec.id, sid)
        self.names[sid] = task_name(rec.tenant, rec.id)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    def adopt(self, sid: str, rec: Any, node_id: str, identity: Any) -> None:
        """Follow a run started before a controller restart, and send its start again.

        The runner owns the run and ignores a start it has seen (running or ended). A start the old
        controller sent just before it died may never have reached the runner: this one starts the run.
        """
        try:
            self._submit(sid, rec, node_id, identity)
        except (ValueError, ray.exceptions.RayError) as err:  # no runner yet: its runs are reported lost
            log.warning("could not resend the start of %s: %s", sid, err)
        self._track(sid, rec)

    def _submit(self, sid: str, rec: Any, node_id: str, identity: Any) -> Any:
        """Send the runner the start of one attempt's Ray task (pinned to its node with the worker's resources)."""
        from cuberay.platform.spec import load_spec

        job = load_spec(rec.spec)
        res = {k: float(v) for k, v in job.worker_request().to_ray().items() if v > 0}
        custom = {k: v for k, v in res.items() if k not in ("CPU", "GPU", "memory")}
        options = {"name": task_name(rec.tenant, rec.id), "num_cpus": res.get("CPU", 0),
                   "num_gpus": res.get("GPU", 0), "memory": int(res["memory"]) if "memory" in res else None,
                   "resources": custom or None, "runtime_env": job.spec.runtime_env or None}
        path = log_file(self.storage_of(rec.tenant), rec.id, sid)
        args = (job.spec.command, dict(job.spec.env), identity, res.get("GPU", 0.0), str(path), job.max_runtime_s)
        return self.handle.start.remote(sid, options, node_id, args)

    async def start(self, sid: str, rec: Any, node_id: str, identity: Any) -> None:
        """Have the runner submit the Ray task of one attempt."""
        # Not awaited: the runner takes calls in order, so a stop sent later finds the run; a start it refuses
        # comes back as this run's end.
        started = self._submit(sid, rec, node_id, identity)
        self._track(sid, rec)
        watcher = asyncio.get_running_loop().create_task(self._started(sid, started))
        self._watchers.add(watcher)  # a strong reference until it is done (asyncio keeps only weak ones)
        watcher.add_done_callback(self._watchers.discard)

    async def _started(self, sid: str, started: Any) -> None:
        try:
            await started
        except ray.exceptions.RayError as err:
            if sid in self.runs:
                self.runs.discard(sid)
                self._note(sid, f"cuberay: the small-job runner could not start the run: {err}")
                self._ended[sid] = FAILED
                self.wake()

    async def _poll(self) -> None:
        """Collect ends from the runner while runs are in flight."""
        while self.runs:
            try:
                ends = await self.handle.ended.remote(sorted(self.runs), self.ENDED_WAIT_S)
            except ray.exceptions.RayError as err:  # the runner is restarting: its runs are reported lost
                log.warning("small-job runner unreachable: %s", err)
                await asyncio.sleep(1.0)
                continue
            for sid, (status, note) in ends.items():
                if sid not in self.runs:
                    continue
                self.runs.discard(sid)
                if note:
                    self._note(sid, f"cuberay: {note}")
                self._ended[sid] = status
            if ends:
                self.wake()

    def _note(self, sid: str, text: str) -> None:
        try:
            path = self.paths[sid]
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as out:
                out.write(text + "\n")
        except (KeyError, OSError):
            log.warning("%s: %s", sid, text)

    async def stop(self, sid: str) -> None:
        if sid in self.runs:
            await self.handle.stop.remote(sid)

    def ended(self) -> dict[str, str]:
        """Submission id -> SUCCEEDED / FAILED / STOPPED for runs that ended since the last call."""
        for sid in self._reported:  # the caller has named them in its messages by now
            self.forget(sid)
        out, self._ended = self._ended, {}
        self._reported = [sid for sid, status in out.items() if status != FAILED]
        return out

    def forget(self, sid: str) -> None:
        self.paths.pop(sid, None)
        self.names.pop(sid, None)

    def failure_message(self, sid: str) -> str:
        """The last lines of a failed run's log: usually the error."""
        path = self.paths.get(sid)
        self.forget(sid)
        try:
            text = path.read_text(errors="replace") if path else ""
        except OSError:
            text = ""
        return failure_tail(text)
