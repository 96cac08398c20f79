"""Inputs of a replay from command-line words: trace format, time window, durations, platform quotas.

Kept apart from the CLI so that the benchmarks and tests use the same rules.
Pure: no Ray, no Kubernetes.
"""

from __future__ import annotations

import csv
import enum
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from cuberay.errors import SpecError
from cuberay.platform.policy import fit
from cuberay.platform.policy.scheduling import Policy, TenantQuota, policy_named
from cuberay.platform.sim.trace import TraceJob, load_generic, load_philly, parse_time
from cuberay.platform.spec import Platform
from cuberay.platform.spec.load import parse_duration

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
GENERIC_COLUMNS = ("submit_time", "duration", "gpus")
_PHILLY_TIME = "%Y-%m-%d %H:%M:%S"
_NUMBER = re.compile(r"^\s*\d+(\.\d+)?\s*$")


class TraceFormat(str, enum.Enum):
    philly = "philly"
    generic = "generic"


def seconds(value: str | float, what: str) -> float:
    """Seconds from ``3600``, ``"90m"``, ``"36h"``, ``"2d"``, ``"1h30m"``; ``0`` is allowed."""
    if isinstance(value, (int, float)) or _NUMBER.match(value):
        amount = float(value)
        if amount < 0:
            raise SpecError(f"{what} {value!r} is negative; give seconds >= 0 or e.g. '36h'")
        return amount
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise SpecError(f"{what}: {exc}") from None


def is_offset(value: str) -> bool:
    """True for seconds or a duration (``"36h"``), False for anything else (taken as a date)."""
    try:
        seconds(value, "time")
    except SpecError:
        return False
    return True


def detect_format(path: str | Path) -> TraceFormat:
    """The trace format from the CSV header (Philly: timestamp,...,cluster; generic: submit_time,...)."""
    header = _header(path)
    if all(c in header for c in PHILLY_COLUMNS):
        return TraceFormat.philly
    if all(c in header for c in GENERIC_COLUMNS):
        return TraceFormat.generic
    shown = ", ".join(header[:8]) + (", ..." if len(header) > 8 else "")
    raise SpecError(f"the header has {shown or 'no columns'}; a Philly trace needs "
                    f"{', '.join(PHILLY_COLUMNS)} and a generic trace needs {', '.join(GENERIC_COLUMNS)} "
                    f"(optional: cpus, memory, workers, tenant, priority, max_workers)", file=str(path), path="line 1")


def _header(path: str | Path) -> list[str]:
    try:
        with open(path, newline="") as fh:
            return next(csv.reader(fh), [])
    except FileNotFoundError:
        raise SpecError("no such trace file; check the path", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read the trace ({exc}); pass a UTF-8 CSV file", file=str(path)) from None


def load_trace(path: str | Path, fmt: TraceFormat | None = None, start: str | None = None,
               end: str | None = None) -> list[TraceJob]:
    """Load a trace, selecting submissions in ``[start, end)``.

    ``start``/``end`` are dates (``2017-10-01``, Philly only; a bare ``end`` date includes that day) or
    seconds/durations (``3600``, ``"7d"``) from the trace's first submission.
    """
    path = str(path)
    fmt = fmt or detect_format(path)
    for value, what in ((start, "--start"), (end, "--end")):
        if value is not None and fmt is TraceFormat.philly and not is_offset(value):
            try:
                parse_time(value)
            except SpecError as err:
                raise SpecError(err.reason, path=what) from None
    if fmt is TraceFormat.generic:
        lo, hi = _generic_bound(start, "--start"), _generic_bound(end, "--end")
        return check_jobs(load_generic(path, lo, hi), path)
    if any(v is not None and is_offset(v) for v in (start, end)):
        base = first_philly_submission(path)
        start = None if start is None else (base + seconds(start, "--start") if is_offset(start) else start)
        end = None if end is None else (base + seconds(end, "--end") if is_offset(end) else end)
    return check_jobs(load_philly(path, start=start, end=end), path)


def check_jobs(jobs: list[TraceJob], path: str) -> list[TraceJob]:
    """Refuse rows the simulator cannot replay faithfully (negative amounts, 1.5 GPUs, empty requests).

    The loaders name each job after its CSV line (``job-7``, ``philly-7``), so the error can point there.
    """
    for job in jobs:
        problem = _row_problem(job)
        if problem:
            line = job.id.rsplit("-", 1)[-1]
            raise SpecError(f"{problem}; fix or drop the row", file=path, path=f"line {line}")
    return jobs


def _row_problem(job: TraceJob) -> str | None:
    if not job.duration >= 0:
        return f"duration {job.duration:g} is negative; give seconds >= 0"
    if job.workers < 1:
        return f"workers {job.workers} must be >= 1"
    if job.max_workers is not None and job.max_workers < job.workers:
        return f"max_workers {job.max_workers} is below workers {job.workers}; raise it or leave it empty"
    for name, amount in (("gpus", job.gpus), ("cpus", job.cpus), ("memory", job.memory)):
        if not amount >= 0:
            return f"{name} {amount:g} is negative"
        if not math.isfinite(amount):
            return f"{name} {amount:g} is not a finite number"
    if job.gpus > 1 and not float(job.gpus).is_integer():
        return (f"gpus {job.gpus:g} per worker: a count above 1 must be whole (a fraction shares ONE card); "
                f"use {math.ceil(job.gpus)} or split the job into more workers")
    for level, factor in job.slowdown:
        if not (math.isfinite(factor) and factor >= 1):
            return f"slowdown_{level} {factor:g} is not a run-time multiplier >= 1 (1: crossing it costs nothing)"
    if job.gpus == 0 and job.cpus == 0 and job.memory == 0:
        return "the row asks for nothing (gpus, cpus and memory are 0); give at least one"
    return None


def _generic_bound(value: str | None, what: str) -> float | None:
    if value is None:
        return None
    if not is_offset(value):
        raise SpecError(f"{value!r}: a generic trace counts time in seconds from its start, so give "
                        f"seconds or a duration such as '7d', not a date", path=what)
    return seconds(value, what)


def first_philly_submission(path: str) -> float:
    """Epoch seconds of the earliest submission in a Philly trace (its rows are not sorted)."""
    earliest: str | None = None
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            ts = row.get("timestamp") or ""
            if earliest is None or ts < earliest:  # the fixed-width format sorts as text
                earliest = ts
    if earliest is None:
        raise SpecError("the trace has no rows", file=path)
    try:
        return datetime.strptime(earliest, _PHILLY_TIME).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise SpecError(f"timestamp {earliest!r} is not 'YYYY-MM-DD HH:MM:SS'", file=path) from None


def platform_policy(name: str, platform: Platform | None) -> Policy:
    """A named policy; ``cuberay`` takes the platform's scheduler settings (backfill, reclaim, LAS) when given."""
    return fit.platform_policy(platform) if platform is not None and name == "cuberay" else policy_named(name)


def unknown_tenants(jobs: Sequence[TraceJob], quotas: dict[str, TenantQuota]) -> dict[str, int]:
    """Tenants the trace names but the quotas lack (their jobs will be rejected), with job counts."""
    out: dict[str, int] = {}
    for job in jobs:
        if job.tenant not in quotas:
            out[job.tenant] = out.get(job.tenant, 0) + 1
    return out
