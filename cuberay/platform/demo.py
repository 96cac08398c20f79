"""``cuberay demo``: a local platform, three example jobs, the queue while they run, the results.

It starts a local Ray head with the controller (``client.up``), submits

* ``train-ddp.yaml``: a 2-worker PyTorch DDP TrainJob on sklearn's digits (tenant vision),
* ``task.yaml``: a command-mode Task gang (tenant research),
* ``demo-wait.yaml``: a Task of tenant vision that cannot start while the DDP job
  holds vision's quota, so the queue shows it waiting with the reason,

reports a :class:`Snapshot` about once a second until every job is terminal,
and always shuts the platform down. Presentation is the caller's (the CLI
draws the snapshots as a live table); this module only runs the scenario.
"""

from __future__ import annotations

import re
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cuberay.platform import client
from cuberay.platform.client import JobRef, QueueEntry
from cuberay.platform.specs import Platform, load_platform, load_spec
from cuberay.platform.states import JobState
from cuberay.platform.store import JobRecord

# configs/ next to the package in a checkout (make demo), else in the working directory.
_CHECKOUT_CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CONFIGS = _CHECKOUT_CONFIGS if _CHECKOUT_CONFIGS.is_dir() else Path("configs")
DEMO_JOBS = ("jobs/train-ddp.yaml", "jobs/task.yaml", "jobs/demo-wait.yaml")
DDP_JOB = "jobs/train-ddp.yaml"
_ACCURACY = re.compile(r"accuracy\W{0,4}\s*([01](?:\.\d+)?(?:e-?\d+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class Snapshot:
    """What the demo shows at one moment: the queue, the jobs already finished, a line of context."""

    queue: list[QueueEntry]
    finished: list[JobRecord]
    note: str


@dataclass(frozen=True)
class DemoResult:
    """How the demo ended."""

    dashboard_url: str
    records: list[JobRecord]
    accuracy: float | None
    notes: dict[str, str] = field(default_factory=dict)   # job id -> one line of result
    metrics_seen: list[str] = field(default_factory=list)  # cuberay series on Ray's Prometheus endpoint
    saw_wait: bool = False                                 # a job waited in the queue with a reason
    wall_s: float = 0.0

    @property
    def failed(self) -> list[str]:
        return [f"{r.id} ({r.state.value})" for r in self.records if r.state != JobState.SUCCEEDED]


def run_demo(platform_file: str | None = None, *, on_tick: Callable[[Snapshot], None] = lambda _s: None,
             timeout_s: float = 600.0, poll_s: float = 1.0, jobs: tuple[str, ...] = DEMO_JOBS) -> DemoResult:
    """Run the scenario end to end; the platform is shut down whatever happens."""
    started = time.monotonic()
    platform_path = Path(platform_file) if platform_file else CONFIGS / "platform.yaml"
    plat = load_platform(platform_path)
    url = client.up(str(platform_path))
    try:
        refs = [_submit(CONFIGS / job, plat) for job in jobs]
        records, saw_wait = _follow(refs, on_tick, started + timeout_s, poll_s)
        ddp = records[jobs.index(DDP_JOB)] if DDP_JOB in jobs else None
        accuracy = final_accuracy(ddp) if ddp is not None else None
        notes = {r.id: _note(r, accuracy if r is ddp else None) for r in records}
        metrics = metrics_seen()
    finally:
        client.down()
    return DemoResult(dashboard_url=url, records=records, accuracy=accuracy, notes=notes, metrics_seen=metrics,
                      saw_wait=saw_wait, wall_s=time.monotonic() - started)


def submitter(plat: Platform, tenant: str) -> str:
    """Who submits a demo job: the caller if a member of the job's tenant, else the tenant's first admin/member."""
    me = client.current_user()
    spec = plat.tenant(tenant)
    if spec.is_member(me):
        return me
    named = [login for login in (*spec.admins, *spec.members) if login != "*"]
    return named[0] if named else me


def _submit(path: Path, plat: Platform) -> JobRef:
    spec = load_spec(path)
    return client.submit(str(path), user=submitter(plat, spec.tenant or plat.tenants[0].name))


def _follow(refs: list[JobRef], on_tick: Callable[[Snapshot], None], deadline: float,
            poll_s: float) -> tuple[list[JobRecord], bool]:
    """Report snapshots until every job is terminal (cancel what is left at the deadline)."""
    saw_wait = False
    while True:
        records = [client.status(ref.id) for ref in refs]
        entries = client.queue()
        saw_wait = saw_wait or any(e.position is not None and e.reason for e in entries)
        finished = [r for r in records if r.state.is_terminal]
        waiting = [e for e in entries if e.position is not None]
        note = (f"{len(finished)}/{len(refs)} jobs finished; "
                + (f"{len(waiting)} waiting for admission" if waiting else "nothing waiting"))
        on_tick(Snapshot(queue=entries, finished=finished, note=note))
        if len(finished) == len(refs):
            return records, saw_wait
        if time.monotonic() > deadline:
            for record in records:
                if not record.state.is_terminal:
                    client.cancel(record.id)
            return [client.status(ref.id) for ref in refs], saw_wait
        time.sleep(poll_s)


def final_accuracy(record: JobRecord) -> float | None:
    """The DDP job's last reported test accuracy: from its final message, else its log."""
    for text in (record.message or "", _log_text(record)):
        found = _ACCURACY.findall(text)
        if found:
            return float(found[-1])
    return None


def _log_text(record: JobRecord) -> str:
    try:
        return "".join(client.logs(record.id))
    except Exception:  # noqa: BLE001 - the accuracy is a nicety; a missing log must not fail the demo
        return ""


def _note(record: JobRecord, accuracy: float | None) -> str:
    if accuracy is not None:
        return f"test accuracy {accuracy:.3f}"
    if record.state != JobState.SUCCEEDED:
        return record.message or record.reason or ""
    return (record.message or "ok").splitlines()[0][:80]


def metrics_seen() -> list[str]:
    """Names of cuberay series exported on the head node's Prometheus endpoint (empty if none or unreachable)."""
    try:
        import ray

        head = next(n for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"])
        url = f"http://{head['NodeManagerAddress']}:{head['MetricsExportPort']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except Exception:  # noqa: BLE001 - optional: the demo still ran without it
        return []
    names = {m.group(1) for m in re.finditer(r"^(ray_cuberay_\w+?)(?:_bucket|_sum|_count)?[{ ]", text, re.M)}
    return sorted(names)
