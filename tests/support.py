"""Helpers shared by the test tiers (import as ``from tests.support import wait_for``)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float, what: str, poll_s: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy, and return that; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll_s)


def alive(pid: int) -> bool:
    """Whether a process with this pid runs: it exists (signal 0 checks without sending anything) and is no zombie.

    A zombie is a dead process its parent has not reaped. A command killed after its Ray worker died (a forced
    cancel: the watchdog kills it) is an orphan, and this machine's init (PID 1) never reaps orphans: its pid
    answers signal 0 for good though nothing of it runs.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]  # after "pid (comm)"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False  # gone between the two looks (reaped while its stat was read: ESRCH)
    return state not in ("Z", "X")
