"""``cuberay history export``: finished jobs as a trace the simulator replays.

The simulator's generic CSV format has one row per job with per-worker amounts:
``submit_time,duration,gpus,cpus,memory,workers,tenant,priority`` where
submit_time is seconds after the first exported job, duration is seconds of the
last run, and memory is in bytes. The simulator owns reading the format.
"""

from __future__ import annotations

import csv
from typing import Any, Iterable, Mapping, TextIO

from cuberay.platform.api.records import JobRecord
from cuberay.platform.spec.resources import CPU, MEMORY, parse_worker

TRACE_COLUMNS = ("submit_time", "duration", "gpus", "cpus", "memory", "workers", "tenant", "priority")


def export_trace(records: Iterable[JobRecord], out: TextIO) -> int:
    """Write ``records`` that have a start and an end time as trace rows; return how many.

    Rows are in submit order. Each row describes the job's last run (a preempted
    job's earlier attempts are not in the store's start/end times).
    """
    ran = sorted((r for r in records if r.start_time is not None and r.end_time is not None),
                 key=lambda r: (r.submit_time, r.id))
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TRACE_COLUMNS)
    if not ran:
        return 0
    origin = ran[0].submit_time
    for record in ran:
        writer.writerow(_row(record, origin))
    return len(ran)


def _row(record: JobRecord, origin: float) -> list[str]:
    assert record.start_time is not None and record.end_time is not None
    body: Mapping[str, Any] = record.spec.get("spec") or {}
    resources: Mapping[str, Any] = body.get("resources") or {}
    worker = parse_worker(cpu=resources.get("cpu"), memory=resources.get("memory"), gpu=resources.get("gpu"),
                          rdma=resources.get("rdma"), custom=resources.get("custom"))
    card = worker.card_resource
    return [
        _num(record.submit_time - origin),
        _num(record.end_time - record.start_time),
        _num(worker.resources[card] if card else 0.0),
        _num(worker.resources[CPU]),
        _num(worker.resources[MEMORY]),
        str(_workers(body.get("workers", 1))),
        record.tenant,
        str(record.priority),
    ]


def _workers(value: Any) -> int:
    """``workers`` is a count, or an elastic range ``{"min": .., "max": ..}`` (the max is what ran)."""
    if isinstance(value, Mapping):
        value = value.get("max", value.get("min", 1))
    return int(value)


def _num(value: float) -> str:
    """Shortest exact text: ``3`` for whole numbers, else Python's round-trip repr."""
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)
