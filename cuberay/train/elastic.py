"""Elastic function-mode training: the worker group follows the allocation cuberay's admission grants.

Ray Train V2 always runs exactly ``len(node_ids)`` workers here, worker i pinned to
node i (a fixed ``num_workers``: Ray Train's own elastic scaling, which grows on
whatever Ray resources happen to be free, is never turned on, so nothing bypasses
the ledger). When admission grows or shrinks the job (policy/resize.py), the
driver's :class:`AllocationWatch` sees the new node list, waits for the run's next
checkpoint (at most ``RESIZE_WAIT_S``) and aborts the run the way Ctrl-C does:
SIGINT, on which Ray Train aborts its controller and worker group. The driver then
starts the same run again (same name and storage, so Ray Train resumes from the
latest checkpoint) on exactly the new nodes. A resize is not a failure: the new run
has its whole ``max_failures`` budget, and the job's attempt does not change.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable

from cuberay.platform.api import ControllerAPI
from cuberay.platform.api.records import AllocationInfo

POLL_S = 1.0           # how often the driver asks the controller for its allocation
RESIZE_WAIT_S = 30.0   # longest wait for a checkpoint boundary before restarting anyway

class AllocationWatch:
    """A daemon thread that interrupts the training run when the job's allocation changes."""

    def __init__(self, job_id: str, attempt: int, node_ids: list[str], api: ControllerAPI, *,
                 poll_s: float = POLL_S, wait_s: float = RESIZE_WAIT_S) -> None:
        self.job_id, self.attempt, self.node_ids = job_id, attempt, list(node_ids)
        self.api, self.poll_s, self.wait_s = api, poll_s, wait_s
        self.changed: list[str] | None = None  # the new node list, once the run was interrupted for it
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cuberay-allocation-watch", daemon=True)

    def start(self) -> AllocationWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:  # after this no SIGINT is sent: the run's end is not mistaken for a resize
            self._stopped.set()

    def _poll(self) -> AllocationInfo | None:
        try:
            return self.api.allocation(self.job_id, self.attempt)
        except Exception:  # noqa: BLE001 - a controller restart: ask again at the next poll
            return None

    def _run(self) -> None:
        while not self._stopped.wait(self.poll_s):
            info = self._poll()
            if info is None:
                continue
            if not info.current:
                return  # preempted or cancelled: the controller stops this driver
            if sorted(info.node_ids) == sorted(self.node_ids):
                continue
            seen = time.time()
            # Restart at a checkpoint boundary: the run loses no work when its next checkpoint is in.
            while time.time() - seen < self.wait_s and not self._stopped.wait(self.poll_s):
                latest = self._poll()
                if latest is not None:
                    info = latest
                    if (info.checkpoint_time or 0.0) >= seen or not info.current:
                        break
            if not info.current:
                return
            with self._lock:
                if self._stopped.is_set():
                    return
                self.changed = list(info.node_ids)
                os.kill(os.getpid(), signal.SIGINT)  # Ray Train's handler aborts the run gracefully
            return


def run_elastic(run_once: Callable[[list[str]], dict], *, job_id: str, attempt: int, node_ids: list[str],
                api: ControllerAPI, say: Callable[[str], None], poll_s: float = POLL_S) -> dict:
    """``run_once(node_ids)`` (one Ray Train run), restarted on the new nodes each time admission resizes it."""
    nodes = list(node_ids)
    while True:
        watch = AllocationWatch(job_id, attempt, nodes, api, poll_s=poll_s).start()
        previous = signal.getsignal(signal.SIGINT)
        try:
            result = run_once(nodes)
            watch.stop()
            return result
        except BaseException:  # noqa: BLE001 - Ray Train's abort surfaces as SystemExit or an actor error
            watch.stop()
            if watch.changed is None:
                raise
            note = (f"worker group restarted with {len(watch.changed)} worker(s) (was {len(nodes)}) from the "
                    f"latest checkpoint")
            say(note)
            nodes = watch.changed
            try:
                api.resized(job_id, attempt, len(nodes), note)
            except Exception:  # noqa: BLE001 - the event is a record, not a step of the run
                pass
        finally:
            signal.signal(signal.SIGINT, previous)
