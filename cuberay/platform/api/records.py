"""The records that cross the controller's boundary: what every call takes and hands back.

Frozen and plain (pydantic models and dataclasses, no database rows), so they pickle across Ray actor calls
and serialise as JSON for other transports; the controller builds them, the client returns them, the CLI and
the console render them. Pure: importing this loads neither Ray nor the database.

Every model builds its validator on first use (``defer_build``), as the spec models do: about a thousand
processes import this module during a test run (job drivers, Ray workers, CLI runs), and most of them touch
one or two of its sixteen models (building all of them at import: 0.04 CPU s a process, measured 2026-12-07).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict  # pydantic reads its field types on Python 3.11

from cuberay.platform.policy.run_states import RunState, StepState
from cuberay.platform.policy.states import JobState

# Every record: frozen, unknown keys refused, its validator built on first use (see above).
_RECORD = ConfigDict(frozen=True, extra="forbid", defer_build=True)
# A record the store builds from its database row's attributes.
_STORED = ConfigDict(**_RECORD, from_attributes=True)


class JobRecord(BaseModel):
    """One job as stored: its spec, state and the controller's bookkeeping."""

    model_config = _STORED

    id: str = Field(description="Job id: '<tenant>-<name>-<seq>', e.g. 'vision-mnist-ddp-3'.")
    tenant: str = Field(description="Tenant the job runs under.")
    name: str = Field(description="Job name from the spec's metadata.")
    kind: str = Field(description="Spec kind: TrainJob, TuneJob, ServeApp or Task.")
    user: str = Field(description="Who submitted the job.")
    spec: dict[str, Any] = Field(description="The full spec, as model_dump(mode='json').")
    state: JobState = Field(description="Lifecycle state.")
    priority: int = Field(description="Effective priority (higher runs first).")
    submit_time: float = Field(description="Submission time, seconds since the epoch.")
    seq: int = Field(description="Sequence number among jobs of the same tenant and name.")
    start_time: float | None = Field(default=None, description="Start of the current or last run (epoch s).")
    end_time: float | None = Field(default=None, description="End of the last run (epoch s).")
    attempts: int = Field(default=0, description="How many times the job was started.")
    allocation: list[dict[str, Any]] | None = Field(
        default=None, description="One entry per worker while resources are held, e.g. {'node_id': ...}.")
    reason: str = Field(default="", description="Why the last decision was made, e.g. why the job waits.")
    submission_id: str | None = Field(default=None, description="Current Ray Job submission id.")
    driver: str | None = Field(
        default=None, description="'launcher', or 'external' for a `ray job submit -- cuberay run` driver.")
    attained_gpu_s: float = Field(default=0.0, description="GPU-seconds of service so far.")
    gpus: float = Field(default=0.0, description="Total GPUs of the gang.")
    message: str | None = Field(default=None, description="Final message or error.")
    checkpoint_time: float | None = Field(
        default=None, description="When the current run last reported a checkpoint (epoch s); None if never.")
    correction: dict[str, Any] | None = Field(
        default=None, description="Automatic resource correction at submit: {requested, corrected, reason} "
                                  "per worker (Ray names: CPU cores, memory bytes); None if none was applied.")
    request_id: str | None = Field(
        default=None, description="The submitter's own id for this submission: the same user submitting the "
                                  "same request id again gets this job back instead of a new one.")
    repeat: bool = Field(
        default=False, exclude=True, description="Only in the answer to a submit: True when that submit repeated "
                                                 "an earlier request id and got the earlier job back. Never stored.")


class EventRecord(BaseModel):
    """One line of the platform's event log."""

    model_config = _STORED

    id: int = Field(description="Increasing event id.")
    time: float = Field(description="When it happened, seconds since the epoch.")
    job_id: str | None = Field(description="The job concerned, if any.")
    kind: str = Field(description="submitted, rejected, admitted, started, preempted, requeued, succeeded, "
                                  "failed, cancelled, node_joined, node_lost, ...")
    message: str = Field(description="What happened, in words.")


class ServeChangeRecord(BaseModel):
    """One change of a serving app's traffic: who, when, what."""

    model_config = _STORED

    id: int = Field(description="Increasing change id.")
    time: float = Field(description="When it was applied, seconds since the epoch.")
    app: str = Field(description="The ServeApp's job id.")
    user: str = Field(description="Who made it (an automatic rollback: who ran the rollout; its note says so).")
    action: str = Field(description="deploy, rollout, rollback, delete.")
    weights: dict[str, float] = Field(description="Version weights (percent) after the change.")
    note: str = Field(description="Why, in words, e.g. 'rollout to v2: step 2' or the broken threshold.")


class PipelineRecord(BaseModel):
    model_config = _STORED

    tenant: str = Field(description="Tenant the pipeline runs in.")
    name: str = Field(description="Pipeline name.")
    user: str = Field(description="Who submitted the current definition.")
    spec: dict[str, Any] = Field(description="The Pipeline spec (step files inlined).")
    version: int = Field(description="1 + how many times the definition was replaced.")
    submit_time: float = Field(description="When the current definition was submitted (epoch s).")
    last_tick: float | None = Field(default=None, description="The latest cron tick recorded as a run (epoch s).")


class PipelineSummary(BaseModel):
    """A stored pipeline as the console's Pipelines page and `cuberay pipeline list` show it."""

    model_config = _RECORD

    tenant: str = Field(description="Tenant the pipeline runs in.")
    name: str = Field(description="Pipeline name.")
    user: str = Field(description="Who submitted the current definition.")
    version: int = Field(description="1 + how many times the definition was replaced.")
    submit_time: float = Field(description="When the current definition was submitted (epoch s).")
    steps: list[str] = Field(description="Its steps' names, in the order the file lists them.")
    cron: str | None = Field(default=None, description="Its schedule (5-field cron, UTC); null: runs on request only.")
    last_tick: float | None = Field(default=None, description="The latest cron tick made into a run (epoch s).")
    next_ticks: list[float] = Field(default_factory=list,
                                    description="The next ticks to come (epoch s, soonest first); empty without a "
                                                "schedule.")


class RunRecord(BaseModel):
    model_config = _STORED

    id: str = Field(description="Run id: '<tenant>-<pipeline>-r<seq>'.")
    tenant: str = Field(description="Tenant.")
    pipeline: str = Field(description="Pipeline name.")
    seq: int = Field(description="Run number of this pipeline.")
    trigger: str = Field(description="schedule or manual.")
    tick: float | None = Field(default=None, description="The cron tick (scheduled runs only; unique).")
    execution_time: float = Field(description="The tick, or when a manual run was asked for (epoch s).")
    user: str = Field(description="Who asked for it ('cuberay' for the schedule).")
    spec: dict[str, Any] = Field(description="The pipeline definition this run runs (fixed at its creation).")
    params: dict[str, Any] = Field(default_factory=dict, description="Parameter overrides of this run.")
    state: RunState = Field(description="WAITING, RUNNING, SUCCEEDED, FAILED, CANCELLED or EXPIRED.")
    workdir: str = Field(description="The run's working directory under the tenant's storage.")
    create_time: float = Field(description="When the run was recorded (epoch s).")
    start_time: float | None = Field(default=None, description="When its first step could start (epoch s).")
    end_time: float | None = Field(default=None, description="When it ended (epoch s).")
    message: str = Field(default="", description="Why it waits, or how it ended.")


class PipelineStored(TypedDict):
    """What storing a pipeline did (a mapping, so ``info["run"]`` reads as it always has)."""

    tenant: str          # the tenant it was stored in
    tenant_why: str      # why that tenant (the rule that chose it)
    pipeline: str        # its name
    scheduled: bool      # it has a schedule, which makes its runs from now on
    run: RunRecord | None  # the run started now (no schedule, and a run asked for), else None


class StepRecord(BaseModel):
    model_config = _STORED

    run_id: str = Field(description="The run.")
    name: str = Field(description="Step name.")
    state: StepState = Field(description="PENDING, RUNNING, SUCCEEDED, FAILED, SKIPPED, CANCELLED, "
                                         "UPSTREAM_FAILED.")
    attempt: int = Field(default=0, description="Attempts started so far.")
    job_id: str | None = Field(default=None, description="The current (or last) attempt's job id.")
    job_ids: list[str] = Field(default_factory=list, description="Every attempt's job id, oldest first.")
    start_time: float | None = Field(default=None, description="When the current attempt's job started running.")
    end_time: float | None = Field(default=None, description="When the step ended (epoch s).")
    message: str = Field(default="", description="Why it is in its state.")
    outputs: dict[str, Any] = Field(default_factory=dict, description="Outputs it published (once SUCCEEDED).")
    nodes: list[str] = Field(default_factory=list, description="Nodes the current attempt ran on.")


@dataclass(frozen=True)
class JobRef:
    """A handle to a submitted job; prints as ``cuberay://<tenant>/<job id>``."""

    id: str
    tenant: str
    name: str
    repeat: bool = False  # the submit repeated an earlier request id and got that job back

    def __str__(self) -> str:
        return f"cuberay://{self.tenant}/{self.id}"


@dataclass(frozen=True)
class QueueEntry:
    """One line of ``cuberay queue``: a running or waiting job, its position and why it waits."""

    job_id: str
    tenant: str
    name: str
    kind: str
    state: JobState
    position: int | None      # 1-based place in admission order; None when running
    reason: str               # why it waits / where it runs
    gpus: float
    workers: int
    age_s: float


MAX_PAGE = 1000  # rows one paged call (queue_page, job_page) may ask for: a page is what a person reads


@dataclass(frozen=True)
class QueuePage:
    """One page of the queue (running jobs first, then waiting ones in admission order), as the console shows it.

    ``users`` names the submitter of each listed job the caller may read (the shared queue shows every tenant's
    names, sizes and reasons, never who submitted another tenant's job).
    """

    total: int                        # entries matching the filters, of which ``entries`` is one page
    offset: int                       # index of entries[0] among them
    entries: list[QueueEntry]
    users: dict[str, str]             # job id -> user, for the listed jobs the caller may read
    ticks: int                        # the admission tick the page was read from


@dataclass(frozen=True)
class JobPage:
    """One page of the jobs the caller may read, newest first, and how many match in all."""

    total: int                        # jobs matching the filters
    offset: int                       # index of records[0] among them (newest first)
    records: list[JobRecord]


@dataclass(frozen=True)
class TenantUsage:
    """One line of ``cuberay tenants``: quota and what is in use (resource name -> amount)."""

    name: str
    guaranteed: Mapping[str, float]
    max: Mapping[str, float] | None
    in_use: Mapping[str, float]
    borrowed: Mapping[str, float]
    running: int
    queued: int


@dataclass(frozen=True)
class JobIdentity:
    """Who and what a job is, as the ``KFJ_*`` names expose it to user code.

    Resource fields are the per-worker strings exactly as the user typed them
    (``"2(V100)"``, ``"32Gi"``), since CubeStudio scripts parse those raw strings.
    """

    job_id: str
    name: str
    tenant: str
    user: str
    run_id: str
    kind: str
    cpu: str = ""
    memory: str = ""
    gpu: str = ""
    rdma: str = ""
    namespace: str = ""
    environment: str = "local"


class LogChunk(BaseModel):
    """A piece of one attempt's log, read from a byte offset (control/logs.py)."""

    model_config = _RECORD

    attempt: int = Field(description="The attempt the text is from, 1 for the first; 0 while none has started.")
    offset: int = Field(description="Byte offset in that attempt's log where the text begins.")
    text: str = Field(description="The log's bytes from offset, decoded as UTF-8; never ends inside a character.")
    next_offset: int = Field(description="Where to read on: offset plus the number of bytes the text came from.")
    more: bool = Field(description="Whether the log already holds bytes past next_offset (the read hit its limit).")
    latest_attempt: int = Field(description="The job's latest attempt: a higher one than attempt means a new "
                                            "attempt started; 0 while none has.")
    terminal: bool = Field(description="Whether the job has ended: once read to its end, no more text comes "
                                       "for the latest attempt.")


# ---------------------------------------------------------------- what a job's driver is told


class AdmissionInfo(BaseModel):
    """An external driver's poll: where its job stands."""

    model_config = _RECORD

    state: JobState = Field(description="The job's state.")
    position: int | None = Field(description="1-based place in admission order while waiting; None otherwise.")
    reason: str = Field(description="Why it waits, or the last decision about it.")
    attempt: int = Field(description="The current (or last) attempt, 0 before the first.")


class JobContext(BaseModel):
    """What a driver needs to run its job's current attempt."""

    model_config = _RECORD

    record: JobRecord = Field(description="The job as stored (its spec included).")
    node_ids: list[str] = Field(description="One Ray node id per worker, as admission placed the gang.")
    identity: JobIdentity = Field(description="The KFJ_* identity of the job, for its processes' environment.")
    attempt: int = Field(description="The attempt this context is for (1 for the first).")
    storage_path: str = Field(description="The tenant's storage folder: checkpoints, results, step outputs.")

    @property
    def spec(self) -> dict[str, Any]:
        return self.record.spec


class AllocationInfo(BaseModel):
    """A running driver's poll: its attempt's nodes now (admission may resize a running job)."""

    model_config = _RECORD

    current: bool = Field(description="Whether the attempt is still the job's and holds resources.")
    node_ids: list[str] = Field(description="One node id per worker of the current allocation; empty if not current.")
    checkpoint_time: float | None = Field(description="When the attempt last reported a checkpoint (epoch s).")


class TrainRun(BaseModel):
    """A SUCCEEDED training run a serving app may serve."""

    model_config = _RECORD

    id: str = Field(description="The training job's id.")
    config: dict[str, Any] = Field(description="The training function's config, as submitted.")
    entrypoint: str | None = Field(description="The training function's import path.")
    storage_path: str = Field(description="The tenant's storage folder, where its checkpoints are.")


# ---------------------------------------------------------------- a search's trials


class TrialInfo(BaseModel):
    """One trial of a search (a TuneJob) as its driver last reported it."""

    model_config = _RECORD

    trial_id: str = Field(description="Ray Tune's trial id.")
    index: int = Field(description="The trial's number: the order the searcher suggested it in, from 0.")
    state: str = Field(description="RUNNING, TERMINATED (ran to its end or was stopped early) or ERROR.")
    config: dict[str, Any] = Field(description="The parameters the searcher chose for it.")
    value: float | None = Field(description="The metric's last reported value; None before its first report.")
    iterations: int = Field(description="How many results it has reported.")
    history: list[float] = Field(description="Its reported values in order (a long trial's last 500).")
    error: str | None = Field(None, description="Its error in one line (the exception), for a trial in ERROR.")


class TrialsPage(BaseModel):
    """A search's trials and what they are measured by: the console's Tune page."""

    model_config = _RECORD

    job_id: str = Field(description="The search's job id.")
    attempt: int = Field(description="The attempt the trials are from (the latest that reported any); 0: none.")
    metric: str | None = Field(description="The metric the search optimises, as its spec names it.")
    mode: str | None = Field(description="max or min.")
    trials: list[TrialInfo] = Field(description="Every reported trial, by index.")


# ---------------------------------------------------------------- a serving app's traffic, live


class VersionFigures(BaseModel):
    """One version's requests as the app's router counts them: running totals and the last window's figures."""

    model_config = _RECORD

    requests: int = Field(description="Requests it answered since the router started.")
    errors: int = Field(description="Of those, the ones that failed.")
    mirrored: int = Field(0, description="Requests copied to it as a shadow (not answered to clients).")
    count: int = Field(description="Requests in the window (mirrored copies included).")
    rate_per_s: float = Field(description="count over the window's length.")
    error_rate: float = Field(description="Failed share of the window's requests, 0..1.")
    p50_ms: float | None = Field(description="Median latency in the window; None without requests.")
    p99_ms: float | None = Field(description="99th percentile latency in the window; None without requests.")


class ServeStats(BaseModel):
    """A serving app's live traffic per version (the console's Services page, `cuberay serve status`)."""

    model_config = _RECORD

    app: str = Field(description="The app's job id.")
    window_s: float = Field(description="The window the rates and latencies are over, in seconds.")
    weights: dict[str, float] = Field(description="The split the router applies now: version -> percent.")
    versions: dict[str, VersionFigures] = Field(description="Per version that served since the router started.")
    note: str | None = Field(None, description="Why there are no figures (not running, not deployed yet, or "
                                               "served without cuberay's router), else None.")
