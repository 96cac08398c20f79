"""The body of small jobs: a detached actor that runs one-worker command Tasks as named Ray tasks.

The controller (:mod:`cuberay.platform.control.small`) decides which jobs are small and
tracks them; this module is what runs them. ``SmallRunner`` submits and owns the Ray
tasks, so they outlive a controller restart; ``run_command`` is one job's task: its
command as rank 0 of a world of 1 with cuberay's environment, in a process group of
its own, its output appended to the job's log file.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import time
from pathlib import Path
from typing import Any

import ray

from cuberay.platform.control.aio import wait_set
from cuberay.platform.control.head import NAMESPACE
from cuberay.platform.control.small import FAILED, RUNNER_NAME, STOPPED, SUCCEEDED
from cuberay.runtime.env import compose_env, worker_env
from cuberay.runtime.process import CommandProcess

EXIT_TIMEOUT = 124
POLL_S = 0.05  # output is relayed and a cancel is seen within this long
LOST_AFTER_S = 10.0  # a run asked about but unknown this long was lost (the runner restarted)
# A cancel the task has not answered this long after is forced: Ray can lose the KeyboardInterrupt of a
# plain cancel (ray-project/ray#32954); the forced one kills the worker, and the command's watchdog its group.
STOP_GRACE_S = 10.0
KEPT_ENDS = 100_000  # ends kept after they are reported: a controller that died before storing one asks again


@ray.remote(max_retries=0)
def run_command(command: str, user_env: dict[str, str], identity: Any, gpus: float, log_path: str,
                timeout_s: float | None) -> int:
    """The body of a small job: ``bash -c command`` as rank 0 of a world of 1; returns the shell's exit code.

    A ``ray.cancel`` arrives as KeyboardInterrupt in the poll loop; ``finally`` then kills the
    command's process group. If this worker process dies instead, the command's watchdog kills it.
    """
    ip = ray.util.get_node_ip_address()
    with socket.socket() as sock:
        sock.bind(("", 0))
        port = int(sock.getsockname()[1])
    env = worker_env(rank=0, world_size=1, master_addr=ip, master_port=port, hosts=[ip], gpus_per_worker=gpus,
                     job=identity, node_id=ray.get_runtime_context().get_node_id())
    path = Path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with path.open("a", buffering=1) as out:
        proc = CommandProcess(command, compose_env(env, base=os.environ, user=user_env))
        code: int | None = None
        try:
            while code is None:
                lines, code = proc.poll(POLL_S)
                out.writelines(line + "\n" for line in lines)
                if code is None and deadline is not None and time.monotonic() > deadline:
                    out.write(f"cuberay: timed out after {timeout_s:g}s; stopping the command\n")
                    return EXIT_TIMEOUT
            if code != 0:
                out.write(f"cuberay: the command exited with code {code}\n")
            return code
        finally:
            end_command(proc, code)


def end_command(proc: Any, code: int | None) -> None:
    """Kill the command's group if it still runs (else retire its watchdog), to the end whatever interrupts.

    Ray repeats a cancel the task has not yet answered (a second KeyboardInterrupt, seconds later, possibly
    inside this cleanup). Cut short, the kill would leave the command running: the task ends as cancelled, its
    worker lives on (so the watchdog's pipe stays open) and nothing forces it.
    """
    grace_s: float | None = None  # the process group's usual grace (TERM, then KILL) the first time
    while True:
        try:
            if code is not None:
                proc._release_watchdog()
            elif grace_s is None:
                proc.kill()
            else:
                proc.kill(grace_s)
            return
        except KeyboardInterrupt:
            grace_s = 0.0  # interrupted again: no more grace, KILL at once


class SmallRunner:
    """The detached actor that submits and owns small jobs' Ray tasks (``ray.remote`` is applied by :func:`runner`).

    Async: ``ended`` long-polls while ``start`` and ``stop`` go on.
    """

    def __init__(self) -> None:
        self.runs: dict[str, ray.ObjectRef] = {}  # submission id -> the running task's ref
        self.stopping: set[str] = set()
        self.ends: dict[str, tuple[str, str]] = {}  # submission id -> (status, note), the last KEPT_ENDS
        self.unknown: dict[str, float] = {}  # asked-about submission id this runner does not have -> since when
        self._changed = asyncio.Event()
        self._watchers: set[asyncio.Task] = set()
        self._ended_total = 0  # ends so far: with ``ends`` (in end order), what ended while a poll waited

    async def start(self, sid: str, options: dict[str, Any], node_id: str, args: tuple) -> None:
        """Submit one attempt's task (idempotent: a resent start of a known run does nothing)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if sid in self.runs or sid in self.ends:
            return
        ref = run_command.options(
            **options, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(*args)
        self.runs[sid] = ref
        self.unknown.pop(sid, None)
        watcher = asyncio.get_running_loop().create_task(self._watch(sid, ref))
        self._watchers.add(watcher)  # a strong reference until it is done (asyncio keeps only weak ones)
        watcher.add_done_callback(self._watchers.discard)

    async def _watch(self, sid: str, ref: ray.ObjectRef) -> None:
        note = ""
        try:
            code = await ref
            status = SUCCEEDED if code == 0 else FAILED
        except ray.exceptions.TaskCancelledError:
            status = STOPPED
        except ray.exceptions.RayError as err:
            status = STOPPED if sid in self.stopping else FAILED
            note = f"the job's Ray task failed: {type(err).__name__}: {_first_line(err)}"
        self._record_end(sid, status, note)

    def _record_end(self, sid: str, status: str, note: str) -> None:
        self.runs.pop(sid, None)
        self.stopping.discard(sid)
        self.ends[sid] = (status, note)
        while len(self.ends) > KEPT_ENDS:  # oldest first (dicts keep insertion order)
            del self.ends[next(iter(self.ends))]
        self._ended_total += 1
        self._changed.set()

    async def stop(self, sid: str) -> None:
        """Cancel one run: its task sees KeyboardInterrupt and kills its command's process group.

        If the run has not ended ``STOP_GRACE_S`` later, the cancel is forced.
        """
        ref = self.runs.get(sid)
        if ref is not None:
            self.stopping.add(sid)
            ray.cancel(ref, force=False)
            forcing = asyncio.get_running_loop().create_task(self._force_after(sid, ref, STOP_GRACE_S))
            self._watchers.add(forcing)
            forcing.add_done_callback(self._watchers.discard)

    async def _force_after(self, sid: str, ref: ray.ObjectRef, grace_s: float) -> None:
        await asyncio.sleep(grace_s)
        if self.runs.get(sid) is ref:
            ray.cancel(ref, force=True)

    async def ended(self, known: list[str], wait_s: float) -> dict[str, tuple[str, str]]:
        """Ends of runs among ``known`` (waits up to ``wait_s`` for one); a run this runner never had is FAILED."""
        deadline = time.monotonic() + wait_s
        first = self._ended_total
        while True:
            self._changed.clear()
            # Not popped: the controller may die between reading an end and storing it, and its successor asks
            # again about the same run; it stops asking once it has the end, so the answer is read once per life.
            out = {sid: self.ends[sid] for sid in known if sid in self.ends}
            # Ends that came while this call waited are answered too, known or not: a run started after the
            # caller made its list (while longer runs hold the poll open) would otherwise wait out the poll.
            # Each run ends once, so the newest keys of ``ends`` are the latest ends.
            fresh = min(self._ended_total - first, len(self.ends))
            out.update((sid, self.ends[sid]) for sid in itertools.islice(reversed(self.ends), fresh))
            now = time.monotonic()
            for sid in known:  # unknown for a while (not just a start still on its way): lost with a restart
                if sid not in self.runs and sid not in out and now - self.unknown.setdefault(sid, now) > LOST_AFTER_S:
                    out[sid] = (FAILED, "its run was lost (the small-job runner restarted)")
                    self.unknown.pop(sid, None)
            left = deadline - time.monotonic()
            if out or left <= 0:
                return out
            await wait_set(self._changed, left)  # not wait_for: it can swallow a cancellation

    async def running(self) -> list[str]:
        return list(self.runs)


def runner(node_id: str) -> Any:
    """The small jobs' runner, created detached on ``node_id`` (the controller's) if it is not running."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return ray.remote(SmallRunner).options(
        name=RUNNER_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, num_cpus=0,
        max_restarts=-1, max_task_retries=0, max_concurrency=1000,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()



def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
