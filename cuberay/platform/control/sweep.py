"""Every process one local head started, found and ended: what ``cuberay down`` stops besides the head itself.

The head's process group is not all of it: Ray puts each worker in a process group of its own, and the job
supervisor starts each Ray Job driver (``python -m cuberay.run``) in a session of its own. A driver still in
``ray.init`` when the head goes is left running with parent 1, and neither the group nor the process tree
(broken by then) finds it. So ``head.start`` marks the head's environment with ``CUBERAY_HEAD_ID``, a fresh id
per head: Ray hands its environment on to its workers, the supervisor to the drivers, a driver to its commands,
so every process the head started carries the mark, wherever it was re-parented. A process of another Ray
cluster on the machine carries another id or none, and one whose environment this user cannot read is not ours.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Iterable

import psutil

MARK = "CUBERAY_HEAD_ID"
POLL_S = 0.1


def find(head_id: str | None, also: Iterable[psutil.Process] = ()) -> list[psutil.Process]:
    """The running processes that carry ``head_id``'s mark, with ``also``; never this process or its parents."""
    spared = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = {p.pid: p for p in also if p.pid not in spared and running(p)}
    if head_id:
        for proc in psutil.process_iter():
            if proc.pid in spared or proc.pid in found:
                continue
            try:
                if proc.environ().get(MARK) == head_id:
                    found[proc.pid] = proc
            except psutil.Error:  # gone, a zombie, or another user's (not ours)
                continue
    return list(found.values())


# What stopping a whole head need not wait for after SIGTERM (matched on the command line): Ray's own daemons, which
# drain as if the node were leaving a cluster that goes on (the raylet for 10 s, the GCS, the autoscaler and `ray
# start --block` for longer), and cuberay's own actors, whose state is in the store and which wait seconds for the
# daemons they talk to. The drivers and workers, where users' code runs, get the whole grace.
NO_GRACE = ("gcs_server", "/raylet", "bin/ray start", "monitor.py", "log_monitor.py", "dashboard.py",
            "dashboard/agent.py", "runtime_env/agent", "ray::DashboardAgent", "ray::RuntimeEnvAgent",
            "ray::Controller", "ray::ApiServer", "ray::SmallRunner")


def needs_no_grace(proc: psutil.Process) -> bool:
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return any(name in line for name in NO_GRACE)


def end(procs: Iterable[psutil.Process], grace_s: float, kill_wait_s: float = 5.0) -> list[psutil.Process]:
    """SIGTERM each; SIGKILL what still runs once every one that needs a grace has ended, or after ``grace_s``;
    returns any that outlived both."""
    procs = list(procs)
    spared = {p.pid for p in procs if needs_no_grace(p)}
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        for proc in procs:
            try:
                proc.send_signal(sig)  # psutil refuses a pid reused since the process was found
            except psutil.Error:
                pass
        if sig == signal.SIGTERM:
            _wait([p for p in procs if p.pid not in spared], wait_s)
            procs = [p for p in procs if running(p)]
        else:
            procs = _wait(procs, wait_s)
        if not procs:
            break
    return procs


def running(proc: psutil.Process) -> bool:
    """Alive and still the process that was found (a zombie has ended; only its parent can reap it)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while True:
        procs = [p for p in procs if running(p)]
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(POLL_S)
