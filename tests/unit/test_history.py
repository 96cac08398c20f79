"""`cuberay history export`: finished jobs become the simulator's generic CSV trace."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from cuberay.platform.api.records import JobRecord
from cuberay.platform.control.history import TRACE_COLUMNS, export_trace
from cuberay.platform.control.store import Store, default_url
from cuberay.platform.policy.states import JobState


def record(seq: int, *, tenant: str, submit: float, start: float | None, end: float | None,
           workers: Any, resources: dict[str, Any], priority: int = 0,
           state: JobState = JobState.SUCCEEDED) -> JobRecord:
    return JobRecord(
        id=f"{tenant}-job-{seq}", tenant=tenant, name="job", kind="TrainJob", user="alice",
        spec={"kind": "TrainJob", "metadata": {"name": "job"},
              "spec": {"workers": workers, "resources": resources}},
        state=state, priority=priority, submit_time=submit, seq=seq, start_time=start, end_time=end)


RECORDS = [
    # Listed out of submit order on purpose: rows come out in submit order.
    record(2, tenant="nlp", submit=1_700_000_030.25, start=1_700_000_100.0, end=1_700_003_700.5,
           workers={"min": 1, "max": 4}, resources={"cpu": "500m", "memory": "512Mi", "gpu": 0.5}, priority=3,
           state=JobState.FAILED),
    record(1, tenant="vision", submit=1_700_000_000.0, start=1_700_000_010.0, end=1_700_000_610.0,
           workers=2, resources={"cpu": "8", "memory": "32Gi", "gpu": "2(V100)", "rdma": "1(roce)"}, priority=5),
    record(3, tenant="vision", submit=1_700_000_060.0, start=1_700_000_070.0, end=1_700_000_080.0,
           workers=1, resources={"cpu": 4, "custom": {"disk_ssd": 1}}),
    # Never ran to the end: no row.
    record(4, tenant="vision", submit=1_700_000_001.0, start=1_700_000_005.0, end=None,
           workers=1, resources={"cpu": "1"}, state=JobState.RUNNING),
]

GOLDEN = """\
submit_time,duration,gpus,cpus,memory,workers,tenant,priority
0,600,2,8,34359738368,2,vision,5
30.25,3600.5,0.5,0.5,536870912,4,nlp,3
60,10,0,4,0,1,vision,0
"""


def test_export_matches_golden_output() -> None:
    out = io.StringIO()
    assert export_trace(RECORDS, out) == 3
    assert out.getvalue() == GOLDEN


def test_header_and_columns_are_exactly_the_simulator_format() -> None:
    assert TRACE_COLUMNS == ("submit_time", "duration", "gpus", "cpus", "memory", "workers", "tenant", "priority")
    out = io.StringIO()
    export_trace(RECORDS, out)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[0] == list(TRACE_COLUMNS)
    assert all(len(row) == len(TRACE_COLUMNS) for row in rows)
    parsed = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [float(r["submit_time"]) for r in parsed] == sorted(float(r["submit_time"]) for r in parsed)
    assert all(int(r["workers"]) >= 1 and float(r["duration"]) > 0 for r in parsed)


def test_no_finished_jobs_gives_a_header_only() -> None:
    out = io.StringIO()
    assert export_trace([RECORDS[-1]], out) == 0
    assert out.getvalue() == ",".join(TRACE_COLUMNS) + "\n"


def test_export_from_the_store_round_trip(tmp_path: Path) -> None:
    with Store(default_url(tmp_path)) as store:
        for r in RECORDS:
            store.add_job(r)
        out = io.StringIO()
        export_trace(store.finished_jobs(), out)
    assert out.getvalue() == GOLDEN
