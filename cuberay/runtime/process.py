"""A user's command in a process group of its own, with a watchdog: what every runner of commands uses.

The command runs as ``bash -c command`` in a new session; its output is read line by line. A watchdog
process beside it kills the whole group if the process that started it dies, so no user process outlives
the Ray worker that owns it (and holds GPUs after a job is cancelled or preempted).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Mapping

POLL_S = 0.5  # how long one poll waits for output; bounds the latency of a stop
KILL_GRACE_S = 3.0  # SIGTERM first so trainers can flush, then SIGKILL
REAP_S = 1.0  # after SIGKILL, how long to wait for the leader to die and be reaped

# Runs beside each command in its own session. It blocks on a pipe from the actor;
# when the actor process dies (ray.kill, driver gone, node lost, OOM kill), the pipe
# closes and it kills the command's process group, so no user process outlives its
# actor and holds GPUs after a job is cancelled or preempted. It forks away first:
# a Ray worker kills its *direct* children when it exits (not their children), which
# would take the watchdog but leave the command's grandchildren running.
_WATCHDOG = (
    "import os, signal, sys\n"
    "if os.fork():\n"
    "    os._exit(0)\n"
    "sys.stdin.read()\n"
    "try:\n"
    "    os.killpg(int(sys.argv[1]), signal.SIGKILL)\n"
    "except (ProcessLookupError, PermissionError):\n"
    "    pass\n"
)
_EOF = object()


class CommandProcess:
    """``bash -c command`` in its own process group, its output read line by line."""

    def __init__(self, command: str, env: Mapping[str, str], cwd: str | None = None) -> None:
        self._popen = subprocess.Popen(
            ["bash", "-c", command], env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
            start_new_session=True,
        )
        watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(self._popen.pid)],
            stdin=subprocess.PIPE, start_new_session=True,
        )
        watchdog.wait()  # the forked-away watchdog holds the pipe's read end from here
        self._watchdog_pipe = watchdog.stdin
        self._lines: queue.Queue[object] = queue.Queue()
        self._eof = False
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def pid(self) -> int:
        return self._popen.pid

    def _read(self) -> None:
        assert self._popen.stdout is not None
        for line in self._popen.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(_EOF)

    def poll(self, wait_s: float = POLL_S) -> tuple[list[str], int | None]:
        """New output lines (waits up to ``wait_s`` for the first), and the exit code once done."""
        lines: list[str] = []
        try:
            item = self._lines.get(timeout=wait_s)
            while True:
                if item is _EOF:
                    self._eof = True
                    break
                lines.append(str(item))
                item = self._lines.get_nowait()
        except queue.Empty:
            pass
        code = self._popen.poll()
        # Report the exit only after the output is drained; a background child that
        # keeps stdout open must not hold the gang forever once bash has exited.
        if code is None or (not self._eof and lines):
            return lines, None
        return lines, _shell_code(code)

    def kill(self, grace_s: float = KILL_GRACE_S) -> None:
        """Stop the whole process group (TERM, then KILL), then retire the watchdog."""
        kill_group(self._popen.pid, grace_s, wait=self._popen)
        self._release_watchdog()

    def _release_watchdog(self) -> None:
        # Closing the pipe makes it kill any background leftovers of the group, then exit.
        if self._watchdog_pipe is not None and not self._watchdog_pipe.closed:
            self._watchdog_pipe.close()


def _shell_code(returncode: int) -> int:
    """Popen's ``-N`` for "killed by signal N" as a shell reports it: ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode


def kill_group(pgid: int, grace_s: float = KILL_GRACE_S, wait: "subprocess.Popen | None" = None) -> None:
    """SIGTERM the process group ``pgid``, then, after ``grace_s`` or once its leader ``wait`` ended, SIGKILL what
    is left of it (children that outlive the leader too).

    The leader is reaped: killed but never waited for, it would stay a zombie for as long as this process lives (a
    reused Ray worker: for good), and its pid would still answer as a live process.
    """
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    _wait_end(pgid, wait, grace_s)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _wait_end(pgid, wait, REAP_S)


def _wait_end(pgid: int, leader: "subprocess.Popen | None", within_s: float) -> None:
    """Wait up to ``within_s`` for the group's leader to end (reaping it) or for the group to be gone."""
    deadline = time.monotonic() + within_s
    while True:
        if leader is not None and leader.poll() is not None:
            return
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        if time.monotonic() >= deadline:
            return
        time.sleep(0.05)
