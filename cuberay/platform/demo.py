"""``cuberay demo``: a local platform, four example jobs, the queue while they run, the results.

It starts a local Ray head with the controller (``client.up``), submits

* ``train-ddp.yaml``: a 2-worker PyTorch DDP TrainJob on sklearn's digits (tenant vision),
* ``task.yaml``: a command-mode Task gang (tenant research),
* ``demo-wait.yaml``: a Task of tenant vision that cannot start while the DDP job
  holds vision's quota, so the queue shows it waiting with the reason,
* ``tune-branin.yaml``: a short NNI-TPE search (TuneJob, tenant nlp, a quarter CPU),
* ``pipelines/digits-flow.yaml``: a train -> evaluate pipeline (tenant research), whose evaluate step
  reads the model file the train step wrote,

reports a :class:`Snapshot` about once a second until every job is terminal,
then serves the model the DDP job trained (``demo-serve.yaml``: a ServeApp whose
version is ``{job: digits-ddp}``, the tenant's latest successful run), queries it
over HTTP with held-out digits, deletes the app, and always shuts the platform
down. Presentation is the caller's (the CLI
draws the snapshots); this module only runs the scenario.

The demo is self-contained: it runs in a scratch directory (its own
``CUBERAY_HOME``, Ray temp dir and platform storage, deleted at the end), so a
platform the user already runs with ``cuberay up``, that platform's database and
any other Ray on the machine are left alone, and jobs of an earlier,
interrupted demo never come back.

Its head advertises as many logical CPUs as the platform's node pools hold (6
in configs/platform.yaml), at least the machine's cores: on a 2-core laptop the
cluster would otherwise be too small for the three jobs, and the third would
wait for (or be rejected by) capacity instead of showing a quota wait. Ray only
counts logical CPUs; the jobs are small enough to share the real cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

import cuberay.pipelines as pipelines
from cuberay.errors import CuberayError
from cuberay.home import HOME_ENV
from cuberay.platform import client
from cuberay.platform.api.records import JobRecord, JobRef, QueueEntry
from cuberay.platform.control import head as controller_head
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import Platform, load_platform, load_spec
from cuberay.platform.spec.pipeline import load_pipeline

# configs/ next to the package in a checkout (make demo), else in the working directory.
_CHECKOUT_CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CONFIGS = _CHECKOUT_CONFIGS if _CHECKOUT_CONFIGS.is_dir() else Path("configs")
DEMO_JOBS = ("jobs/train-ddp.yaml", "jobs/task.yaml", "jobs/demo-wait.yaml", "jobs/tune-branin.yaml")
DDP_JOB = "jobs/train-ddp.yaml"
DEMO_PIPELINE = "pipelines/digits-flow.yaml"
SERVE_APP = "jobs/demo-serve.yaml"
QUERY_ROWS = 200  # the last digits of sklearn's set, sent to the served model in one request
# Ray reads a starting node's resources from this variable (what its autoscaler uses for fake nodes).
RESOURCES_ENV = "RAY_OVERRIDE_RESOURCES"
# Ray's temp dir root. Its default, /tmp/ray, is one per machine: its ray_current_cluster file names
# the last cluster started by anyone here, and Ray's job supervisor hands that address to every job
# driver, so with another Ray on the machine our drivers could join the wrong cluster.
TMPDIR_ENV = "RAY_TMPDIR"
# "accuracy": 0.925 in the runner's "final metrics {...}" line (or accuracy=0.925 in a message).
_ACCURACY = re.compile(r"accuracy\W{0,4}\s*([01](?:\.\d+)?(?:e-?\d+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class Snapshot:
    """What the demo shows at one moment: every demo job's record and the platform's queue."""

    records: list[JobRecord]
    queue: list[QueueEntry]
    elapsed_s: float
    note: str = ""  # what the demo does now, when it is not following jobs


@dataclass(frozen=True)
class Served:
    """The trained model as a service: where it answered, how well, how fast."""

    app: str
    url: str
    accuracy: float
    rows: int
    latency_ms: float


@dataclass(frozen=True)
class DemoResult:
    """How the demo ended."""

    dashboard_url: str
    records: list[JobRecord]
    accuracy: float | None
    trained: str | None = None  # the id of the DDP job whose test accuracy that is
    metrics_seen: list[str] = field(default_factory=list)  # cuberay series on Ray's Prometheus endpoint
    waited: dict[str, str] = field(default_factory=dict)   # job id -> a reason it was seen waiting for
    wall_s: float = 0.0
    pipeline: Any = None                                     # the demo pipeline's run record, if one ran
    pipeline_steps: list[Any] = field(default_factory=list)  # its steps' records
    served: Served | None = None  # the trained model, served and queried (None: the DDP job did not succeed)

    @property
    def failed(self) -> list[str]:
        failed = [f"{r.id} ({r.state.value})" for r in self.records if r.state != JobState.SUCCEEDED]
        if self.pipeline is not None and self.pipeline.state.value != "SUCCEEDED":
            failed.append(f"pipeline run {self.pipeline.id} ({self.pipeline.state.value})")
        return failed


def run_demo(platform_file: str | None = None, *, on_tick: Callable[[Snapshot], None] = lambda _s: None,
             timeout_s: float = 600.0, poll_s: float = 1.0, jobs: tuple[str, ...] = DEMO_JOBS,
             pipeline: str | None = DEMO_PIPELINE) -> DemoResult:
    """Run the scenario end to end; the platform is shut down whatever happens."""
    started = time.monotonic()
    source = Path(platform_file) if platform_file else CONFIGS / "platform.yaml"
    plat = load_platform(source)
    with tempfile.TemporaryDirectory(prefix="crdemo", ignore_cleanup_errors=True) as scratch, \
            scratch_env(Path(scratch), controller_head.head_cpus(plat)):
        url = client.up(str(scratch_platform(source, Path(scratch))))
        try:
            refs = [_submit(CONFIGS / job, plat) for job in jobs]
            run_id = _submit_pipeline(CONFIGS / pipeline, plat) if pipeline else None
            records, waited = _follow(refs, on_tick, started, timeout_s, poll_s, run_id)
            run, steps = pipelines.status(run_id) if run_id else (None, [])
            order = [s["name"] for s in run.spec["spec"]["steps"]] if run is not None else []
            steps = sorted(steps, key=lambda s: order.index(s.name))
            ddp = records[jobs.index(DDP_JOB)] if DDP_JOB in jobs else None
            accuracy = final_accuracy(ddp) if ddp is not None else None
            metrics = metrics_seen()
            served = None
            if ddp is not None and ddp.state == JobState.SUCCEEDED:
                on_tick(Snapshot(records=records, queue=[], elapsed_s=time.monotonic() - started,
                                 note="serving the trained model ..."))
                user = submitter(plat, load_spec(CONFIGS / SERVE_APP).tenant or plat.tenants[0].name)
                served = serve_and_query(user, max(60.0, timeout_s - (time.monotonic() - started)))
        finally:
            client.down()
    return DemoResult(dashboard_url=url, records=records, accuracy=accuracy, trained=ddp.id if ddp else None,
                      metrics_seen=metrics, waited=waited, wall_s=time.monotonic() - started, served=served,
                      pipeline=run, pipeline_steps=steps)


def serve_and_query(user: str, timeout_s: float = 300.0, app_file: str = SERVE_APP,
                    tenant: str | None = None) -> Served:
    """Deploy ``app_file`` (the trained digits model), ask it about held-out digits, delete it."""
    from ray import serve
    from sklearn.datasets import load_digits

    from cuberay.serve import deploy, ops

    # A free port, not Serve's 8000, which another service on the machine may hold; a Serve already
    # running keeps its own port.
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": controller_head.free_port()})
    serve_details = deploy.details()
    app = load_spec(CONFIGS / app_file)
    tenant = tenant or app.tenant
    record = ops.deploy_app(app, tenant, wait_s=timeout_s, user=user)
    if record.state != JobState.RUNNING:
        raise CuberayError(f"the demo's serving app {record.id} did not start within {timeout_s:.0f} s "
                           f"({record.state.value}: {record.reason})")
    try:
        digits = load_digits()
        rows = (digits.data[-QUERY_ROWS:] / 16.0).tolist()  # scaled as configs/jobs/train-ddp.yaml trains
        url = deploy.url(app.spec.route_prefix, serve_details)
        sent = time.monotonic()
        answer = _post_json(url, {"inputs": rows})
        latency_ms = (time.monotonic() - sent) * 1000
        predictions = answer["predictions"]
        right = sum(int(p == t) for p, t in zip(predictions, digits.target[-QUERY_ROWS:]))
        return Served(app=record.id, url=url, accuracy=right / len(rows), rows=len(rows), latency_ms=latency_ms)
    finally:
        ops.delete(app.name, tenant)


def _post_json(url: str, body: dict, timeout_s: float = 60.0) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - our own local service
        return json.loads(response.read())


def scratch_platform(source: Path, scratch: Path) -> Path:
    """A copy of the platform file whose storage (database, checkpoints) is under ``scratch``."""
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    data.setdefault("spec", {})["storage"] = str(scratch / "storage")
    data["spec"]["database"] = None  # never the user's real database
    for tenant in data["spec"].get("tenants") or []:
        tenant.pop("storage", None)  # <storage>/<tenant>, inside the scratch directory
    path = scratch / "platform.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@contextlib.contextmanager
def scratch_env(scratch: Path, cpus: int) -> Iterator[None]:
    """Inside: cuberay's local head state and Ray's temp dir live in ``scratch``; a new head gets ``cpus`` CPUs."""
    saved = {key: os.environ.get(key) for key in (HOME_ENV, RESOURCES_ENV, TMPDIR_ENV)}
    os.environ[HOME_ENV] = str(scratch / "home")
    os.environ[TMPDIR_ENV] = str(scratch)
    if not saved[RESOURCES_ENV]:  # the caller's own override wins
        os.environ[RESOURCES_ENV] = json.dumps({"CPU": cpus})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def submitter(plat: Platform, tenant: str) -> str:
    """Who submits a demo job: the caller if a member of the job's tenant, else the tenant's first named member."""
    me = client.current_user()
    spec = plat.tenant(tenant)
    if spec.is_member(me):
        return me
    named = [login for login in (*spec.admins, *spec.members) if login != "*"]
    return named[0] if named else me


def _submit(path: Path, plat: Platform) -> JobRef:
    spec = load_spec(path)
    return client.submit(path, user=submitter(plat, spec.tenant or plat.tenants[0].name))


def _submit_pipeline(path: Path, plat: Platform) -> str:
    tenant = load_pipeline(path).tenant or plat.tenants[0].name
    return pipelines.submit(path, user=submitter(plat, tenant))["run"].id


def _follow(refs: list[JobRef], on_tick: Callable[[Snapshot], None], started: float, timeout_s: float,
            poll_s: float, run_id: str | None = None) -> tuple[list[JobRecord], dict[str, str]]:
    """Report snapshots until every job (and the pipeline run) is terminal (cancel what is left at the deadline)."""
    waited: dict[str, str] = {}
    ours = {ref.id for ref in refs}
    while True:
        records = [client.status(ref.id) for ref in refs]
        entries = client.queue()
        for entry in entries:
            if entry.job_id in ours and entry.position is not None and entry.reason:
                waited[entry.job_id] = entry.reason
        on_tick(Snapshot(records=records, queue=entries, elapsed_s=time.monotonic() - started))
        run_done = run_id is None or pipelines.status(run_id)[0].state.is_terminal
        if all(r.state.is_terminal for r in records) and run_done:
            return records, waited
        if time.monotonic() - started > timeout_s:
            if not run_done:
                pipelines.cancel(run_id)
            for record in records:
                if not record.state.is_terminal:
                    client.cancel(record.id)
            return [client.status(ref.id) for ref in refs], waited
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
