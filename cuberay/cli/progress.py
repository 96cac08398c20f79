"""Watching jobs and pipeline runs from the terminal: a spinner line on stderr, and why it waits.

Every ``--wait`` follows its work here (:func:`follow`) and maps the end to its exit code here
(:func:`raise_for_end`): a job (submit, tune import) and a pipeline run (pipeline submit, pipeline run).

A state change (or a new wait reason) is printed as a plain line, so a log
file or CI output keeps the history; on a terminal a spinner shows the live
state and the elapsed time below those lines.
"""

from __future__ import annotations

import time
from typing import Any, Callable, TypeVar

from rich.console import Console

from cuberay.cli.views import span
from cuberay.errors import AdmissionError, JobFailedError
from cuberay.platform import client
from cuberay.platform.api.records import JobRecord, QueueEntry
from cuberay.platform.policy.states import JobState

POLL_S = 1.0
STILL_S = 60.0  # a wait without news repeats its line this often, so a log shows it is alive
T = TypeVar("T")


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
    return _reads().queue_entry(record.id)


def watch(job_id: str, console: Console, *, poll_s: float | None = None,
          read: Callable[[str], JobRecord] | None = None) -> JobRecord:
    """Show ``job_id``'s progress on ``console`` until it is terminal; return its last record."""
    read = read or _reads().status

    def line(record: JobRecord) -> str:
        return waiting_line(record, queue_entry(record))

    return follow(job_id, console, read, line, lambda r: JobState(r.state).is_terminal, poll_s=poll_s)


def run_line(run: Any, steps: list[Any]) -> str:
    """``RUNNING: 2/5 steps ended; running train-a (attempt 2)``, or the final state with its message."""
    if run.state.is_terminal:
        return f"{run.state.value}: {run.message}" if run.message else run.state.value
    ended = sum(1 for s in steps if s.state.is_terminal)
    total = len((run.spec.get("spec") or {}).get("steps") or steps)
    running = ", ".join(s.name + (f" (attempt {s.attempt})" if s.attempt > 1 else "")
                        for s in steps if s.state.value == "RUNNING")
    why = f"; {run.message}" if run.message else ""  # why a run waits (its schedule, a superseded run, ...)
    return f"{run.state.value}: {ended}/{total} steps ended" + (f"; running {running}" if running else "") + why


def _reads() -> Any:
    """The API a --wait polls through: each read rides out a controller restart, as cuberay.wait does."""
    return client.driver_api()


def watch_run(run_id: str, console: Console, *, poll_s: float | None = None) -> Any:
    """Show a pipeline run's progress (its steps as they start and end) until it ends; return its record."""
    def read(ref: str) -> tuple[Any, list[Any]]:
        return _reads().pipeline_status(ref)

    def line(found: tuple[Any, list[Any]]) -> str:
        return run_line(*found)

    return follow(run_id, console, read, line, lambda found: found[0].state.is_terminal, poll_s=poll_s)[0]


def follow(ref: str, console: Console, read: Callable[[str], T], line: Callable[[T], str],
           ended: Callable[[T], bool], *, poll_s: float | None = None) -> T:
    """Poll ``read(ref)`` until ``ended``; return the last answer. Each new ``line`` is printed as a plain
    timestamped line (a log or CI output keeps the history), and a long wait without news repeats it every
    ``STILL_S`` with the time waited, so a log shows the wait is alive; a terminal also gets a spinner."""
    poll_s = POLL_S if poll_s is None else poll_s
    started = last_print = time.monotonic()
    last = ""
    with console.status(f"{ref}: submitted", spinner="dots") as spinner:
        while True:
            found = read(ref)
            text, now = line(found), time.monotonic()
            if text != last or now - last_print >= STILL_S:
                still = f" (still, after {span(now - started)})" if text == last else ""
                console.print(f"{time.strftime('%H:%M:%S')} {ref}: {text}{still}", highlight=False, soft_wrap=True)
                last, last_print = text, now
            if ended(found):
                return found
            spinner.update(f"{ref}: {text} [dim]({span(now - started)})[/]")
            time.sleep(poll_s)


def raise_for_end(record: Any, what: str, hint: str) -> None:
    """The exit code of a ``--wait``, from the end state of a job or a pipeline run: FAILED (and EXPIRED, a run
    that never started) -> 1, REJECTED -> 3, SUCCEEDED and CANCELLED -> 0 (a cancel is what someone asked for,
    as a STOPPED Ray Job exits 0). ``hint`` says where to look next."""
    state = record.state.value
    why = getattr(record, "message", None) or getattr(record, "reason", None) or "no message"
    if state in ("FAILED", "EXPIRED"):
        raise JobFailedError(f"{what} {record.id!r} {state}: {why}; {hint}")
    if state == "REJECTED":
        raise AdmissionError(f"{what} {record.id!r} was REJECTED: {record.reason or record.message or 'no reason'}")
