"""The controller's API: one typed method per call, each with its access rule, for every transport.

``ControllerAPI`` is what a client holds (``client.api()``): the same methods over Ray today, over HTTP for
the console, in process for tests. The controller implements each method with the caller's ``Principal``
first (``who``); the caller itself never appears here, every transport carries it. ``@declare`` gives each
method its rule and summary: ``ENDPOINTS`` (cuberay/platform/api/endpoints.py) is read from this class, and
docs/security.md's table from that.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from cuberay.platform.api.records import (
    AdmissionInfo,
    AllocationInfo,
    EventRecord,
    JobContext,
    JobPage,
    JobRecord,
    LogChunk,
    PipelineStored,
    PipelineSummary,
    QueueEntry,
    QueuePage,
    RunRecord,
    ServeChangeRecord,
    ServeStats,
    StepRecord,
    TenantUsage,
    TrainRun,
    TrialInfo,
    TrialsPage,
)
from cuberay.platform.api.rules import Over, admin, anyone, declare, driver, member, owner

LOG_CHUNK = 1 << 20  # the most a logs call returns by default (bytes)


class ControllerAPI(Protocol):
    # ------------------------------------------------------------------ jobs
    @declare(member(Over.TENANT, "tenant"), "Queue a job in a tenant (its spec's, else the caller's).")
    def submit(self, spec: Mapping[str, Any], tenant: str | None = None, driver: str = "launcher",
               submission_id: str | None = None, request_id: str | None = None,
               driver_token: str | None = None) -> JobRecord: ...

    @declare(member(Over.TENANT, "tenant"), "Queue many copies of one job in one call.")
    def submit_copies(self, spec: Mapping[str, Any], count: int, tenant: str | None = None) -> tuple[str, list[str]]:
        ...

    @declare(owner(Over.JOB, "ref"), "Cancel a job.")
    def cancel(self, ref: str, why: str | None = None) -> JobRecord: ...

    @declare(member(Over.JOB, "ref"), "A job's record.", reads=True)
    def status(self, ref: str) -> JobRecord: ...

    @declare(member(Over.JOB, "ref"), "A chunk of one attempt's log, from a byte offset.", reads=True)
    def logs(self, ref: str, attempt: int | None = None, offset: int = 0, limit: int = LOG_CHUNK) -> LogChunk: ...

    @declare(member(Over.JOB, "job_id", optional=True), "The event log (of one job).", reads=True)
    def events(self, job_id: str | None = None, limit: int | None = 100) -> list[EventRecord]: ...

    @declare(anyone(), "How many events of each kind since a time: of the jobs the caller may read.", reads=True)
    def event_counts(self, since: float) -> dict[str, int]: ...

    @declare(anyone(), "Jobs, with their specs: only those the caller may read; at most 1,000 (more: job_page).",
             reads=True)
    def list_jobs(self, tenant: str | None = None, states: list[str] | None = None,
                  limit: int | None = None) -> list[JobRecord]: ...

    @declare(anyone(), "One page of the jobs the caller may read, filtered, newest first.", reads=True)
    def job_page(self, tenant: str | None = None, user: str | None = None, kinds: list[str] | None = None,
                 states: list[str] | None = None, name: str | None = None, since: float | None = None,
                 offset: int = 0, limit: int = 50) -> JobPage: ...

    # ------------------------------------------------------------------ the shared views
    # Every tenant's names, sizes and reasons, as a shared queue shows them.
    @declare(anyone(), "One page of the queue (running jobs, then waiting ones in admission order, with positions and "
                       "reasons), filtered by tenant, user (of readable jobs) and state.", reads=True)
    def queue_page(self, tenant: str | None = None, user: str | None = None, state: str | None = None,
                   offset: int = 0, limit: int = 50) -> QueuePage: ...

    @declare(member(Over.JOB, "ref"), "A waiting job's line in the queue (position, reason), or None.", reads=True)
    def queue_entry(self, ref: str) -> QueueEntry | None: ...

    @declare(anyone(), "Quota, use and borrowing per tenant.", reads=True)
    def tenants(self) -> list[TenantUsage]: ...

    @declare(anyone(), "The tenant a submit of the caller's would use, and why.", reads=True)
    def tenant_choice(self, tenant: str | None = None, spec_tenant: str | None = None) -> dict[str, str]: ...

    @declare(anyone(), "Job id -> node id per worker of every running job.", reads=True)
    def running(self) -> dict[str, list[str]]: ...

    @declare(anyone(), "Nodes: capacity, free resources, labels.", reads=True)
    def nodes(self) -> list[dict[str, Any]]: ...

    @declare(anyone(), "Health: platform name, database (password masked), loop and drivers.", reads=True)
    def ping(self) -> dict[str, Any]: ...

    @declare(anyone(), "The Ray dashboard's address.")
    def dashboard_url(self) -> str: ...

    # ------------------------------------------------------------------ a job's own driver
    @declare(driver(), "An external driver's poll: state, position, reason, attempt.")
    def admission(self, job_id: str) -> AdmissionInfo: ...

    @declare(driver(), "What the current attempt runs: spec, nodes, identity, storage.")
    def job_context(self, job_id: str, submission_id: str | None = None) -> JobContext: ...

    @declare(driver(), "A running attempt's nodes (they change when admission resizes it).")
    def allocation(self, job_id: str, attempt: int) -> AllocationInfo: ...

    @declare(driver(), "The driver applied a resize.")
    def resized(self, job_id: str, attempt: int, workers: int, note: str) -> None: ...

    @declare(driver(), "The attempt's progress or result.")
    def job_report(self, job_id: str, attempt: int, text: str, final: bool = False) -> JobRecord: ...

    @declare(driver(), "An external driver's report of its run's end.")
    def finished(self, job_id: str, ok: bool, message: str = "", attempt: int | None = None) -> JobRecord: ...

    @declare(driver(), "The attempt saved a checkpoint.")
    def checkpointed(self, job_id: str, attempt: int, when: float | None = None) -> None: ...

    @declare(driver(), "One worker's peak cores and memory.")
    def usage(self, job_id: str, worker: int, cpu: float, memory_gib: float) -> None: ...

    @declare(driver(), "The search's trials that changed.")
    def trials_report(self, job_id: str, attempt: int, trials: list[TrialInfo]) -> None: ...

    @declare(member(Over.JOB, "ref"), "A search's trials: parameters, metric, state.", reads=True)
    def trials(self, ref: str) -> TrialsPage: ...

    # ------------------------------------------------------------------ pipelines
    @declare(member(Over.TENANT, "tenant", optional=True), "Stored pipelines, their schedules and next ticks.",
             reads=True)
    def pipeline_list(self, tenant: str | None = None) -> list[PipelineSummary]: ...

    @declare(member(Over.TENANT, "tenant"), "Store a pipeline (and run it once).")
    def pipeline_submit(self, spec: Mapping[str, Any], tenant: str | None = None, run: bool = True) -> PipelineStored:
        ...

    @declare(member(Over.TENANT, "tenant"),
             "A manual run; superseding other runs needs the pipeline's submitter or a tenant admin.")
    def pipeline_run(self, name: str, tenant: str | None = None, params: Mapping[str, Any] | None = None,
                     supersede: bool = False) -> RunRecord: ...

    @declare(member(Over.TENANT, "tenant", optional=True), "Pipeline runs.", reads=True)
    def pipeline_runs(self, name: str | None = None, tenant: str | None = None) -> list[RunRecord]: ...

    @declare(member(Over.RUN, "ref"), "A run and its steps.", reads=True)
    def pipeline_status(self, ref: str) -> tuple[RunRecord, list[StepRecord]]: ...

    @declare(owner(Over.RUN, "ref"), "Cancel a run.")
    def pipeline_cancel(self, ref: str) -> RunRecord: ...

    # ------------------------------------------------------------------ serving
    @declare(member(Over.TENANT, "tenant"), "A SUCCEEDED TrainJob run of the tenant to serve.")
    def train_run(self, tenant: str, job: str | None = None, run: str | None = None, previous: int = 0) -> TrainRun:
        ...

    @declare(driver(), "Deploy or update the driver's own app on Serve (the one writer of Serve's config is the "
                       "controller).")
    def serve_deploy(self, job_id: str, attempt: int, entry: Mapping[str, Any], note: str = "") -> dict[str, Any]:
        ...

    @declare(driver(), "Take the driver's own app off Serve as its attempt ends.")
    def serve_undeploy(self, job_id: str, attempt: int) -> bool: ...

    @declare(owner(Over.JOB, "job_id"), "Change a serving app's traffic (a rollout step, a rollback, a rate limit).")
    def serve_traffic(self, job_id: str, action: str, changes: Mapping[str, Any], note: str = "") -> dict[str, Any]:
        ...

    @declare(owner(Over.JOB, "job_id"),
             "Restore the weights before the app's last rollout, or those of a recorded change.")
    def serve_rollback(self, job_id: str, to: int | None = None) -> dict[str, Any]: ...

    @declare(owner(Over.JOB, "job_id"), "After the app's job was cancelled: take it off Serve and record the delete.")
    def serve_delete(self, job_id: str) -> ServeChangeRecord: ...

    @declare(member(Over.JOB, "app"), "A serving app's traffic changes.", reads=True)
    def serve_history(self, app: str, limit: int | None = 100) -> list[ServeChangeRecord]: ...

    @declare(member(Over.JOB, "app"), "A serving app's live requests, errors and latency per version.", reads=True)
    def serve_stats(self, app: str, window_s: float = 60.0) -> ServeStats: ...

    # ------------------------------------------------------------------ the platform
    @declare(admin(), "Apply an edited platform file.")
    def reload(self, platform: Mapping[str, Any]) -> list[str]: ...

    @declare(admin(), "Before the platform stops: stop every driver and put running jobs back in the queue.")
    def shutdown(self) -> list[str]: ...
