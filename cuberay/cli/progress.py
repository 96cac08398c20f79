"""Watching jobs from the terminal: a spinner line per job on stderr, and why it waits.

A state change (or a new wait reason) is printed as a plain line, so a log
file or CI output keeps the history; on a terminal a spinner shows the live
state and the elapsed time below those lines.
"""

from __future__ import annotations

import time
from typing import Callable

from rich.console import Console

from cuberay.cli.views import span
from cuberay.platform import client
from cuberay.platform.api.records import JobRecord, QueueEntry
from cuberay.platform.policy.states import JobState

POLL_S = 1.0


def waiting_line(record: JobRecord, entry: QueueEntry | None) -> str:
    """``QUEUED (position 2): <reason>``, ``RUNNING``, or the final state with its message."""
    state = JobState(record.state)
    if state.is_waiting:
        where = f" (position {entry.position})" if entry is not None and entry.position is not None else ""
        reason = (entry.reason if entry is not None and entry.reason else record.reason) or "waiting for admission"
        return f"{state.value}{where}: {reason}"
    if state.is_terminal and record.message:
        return f"{state.value}: {record.message}"
    return state.value


def queue_entry(record: JobRecord) -> QueueEntry | None:
    """The job's line in the queue while it waits (its position and reason), else None."""
    if not JobState(record.state).is_waiting:
        return None
    return next((e for e in client.queue(record.tenant) if e.job_id == record.id), None)


def watch(job_id: str, console: Console, *, poll_s: float | None = None,
          read: Callable[[str], JobRecord] | None = None) -> JobRecord:
    """Show ``job_id``'s progress on ``console`` until it is terminal; return its last record."""
    read = read or client.status
    poll_s = POLL_S if poll_s is None else poll_s
    started = time.monotonic()
    last = ""
    with console.status(f"{job_id}: submitted", spinner="dots") as spinner:
        while True:
            record = read(job_id)
            line = waiting_line(record, queue_entry(record))
            if line != last:
                console.print(f"{time.strftime('%H:%M:%S')} {job_id}: {line}", highlight=False, soft_wrap=True)
                last = line
            if JobState(record.state).is_terminal:
                return record
            spinner.update(f"{job_id}: {line} [dim]({span(time.monotonic() - started)})[/]")
            time.sleep(poll_s)
