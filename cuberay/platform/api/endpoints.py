"""Every method a client, driver or component may call on the controller, each with its access rule.

This table is the controller's whole public surface: the controller wraps each of its public methods with the
rule declared here (control/endpoint.py), a unit test fails for a public method that is not in it, and
docs/security.md's table of methods and rules is generated from it.

``reads``: answered on the controller's reads thread from the last published snapshot and the store, so an
admission cycle in progress never delays it. ``group``: another concurrency group of the actor, off the
admission loop too (``logs``, whose file reads run in threads).
"""

from __future__ import annotations

from dataclasses import dataclass

from cuberay.platform.api.rules import Over, Rule, admin, anyone, driver, member, owner


@dataclass(frozen=True)
class Endpoint:
    name: str
    rule: Rule
    summary: str
    reads: bool = False
    group: str | None = None  # a concurrency group of its own (``reads`` implies "reads")

    @property
    def concurrency_group(self) -> str | None:
        return "reads" if self.reads else self.group


def _table(*endpoints: Endpoint) -> dict[str, Endpoint]:
    out: dict[str, Endpoint] = {}
    for e in endpoints:
        if e.name in out:
            raise ValueError(f"endpoint {e.name} is declared twice")
        out[e.name] = e
    return out


ENDPOINTS: dict[str, Endpoint] = _table(
    # -- jobs
    Endpoint("submit", member(Over.TENANT, "tenant"), "Queue a job in a tenant (its spec's, else the caller's)."),
    Endpoint("submit_copies", member(Over.TENANT, "tenant"), "Queue many copies of one job in one call."),
    Endpoint("cancel", owner(Over.JOB, "ref"), "Cancel a job."),
    Endpoint("status", member(Over.JOB, "ref"), "A job's record.", reads=True),
    Endpoint("logs", member(Over.JOB, "ref"), "A chunk of one attempt's log, from a byte offset.", group="logs"),
    Endpoint("events", member(Over.JOB, "job_id", optional=True), "The event log (of one job).", reads=True),
    Endpoint("list_jobs", anyone(), "Jobs, with their specs: only those the caller may read.", reads=True),
    # -- the shared views: every tenant's names, sizes and reasons, as a shared queue shows them
    Endpoint("queue", anyone(), "Running and waiting jobs, positions and reasons.", reads=True),
    Endpoint("tenants", anyone(), "Quota, use and borrowing per tenant.", reads=True),
    Endpoint("running", anyone(), "Job id -> node id per worker of every running job.", reads=True),
    Endpoint("nodes", anyone(), "Nodes: capacity, free resources, labels.", reads=True),
    Endpoint("ping", anyone(), "Health: platform name, database (password masked), loop and drivers.",
             reads=True),
    Endpoint("dashboard_url", anyone(), "The Ray dashboard's address."),
    # -- a job's own driver
    Endpoint("admission", driver(), "An external driver's poll: state, position, reason, attempt."),
    Endpoint("job_context", driver(), "What the current attempt runs: spec, nodes, identity, storage."),
    Endpoint("allocation", driver(), "A running attempt's nodes (they change when admission resizes it)."),
    Endpoint("resized", driver(), "The driver applied a resize."),
    Endpoint("job_report", driver(), "The attempt's progress or result."),
    Endpoint("finished", driver(), "An external driver's report of its run's end."),
    Endpoint("checkpointed", driver(), "The attempt saved a checkpoint."),
    Endpoint("usage", driver(), "One worker's peak cores and memory."),
    # -- pipelines
    Endpoint("pipeline_submit", member(Over.TENANT, "tenant"), "Store a pipeline (and run it once)."),
    Endpoint("pipeline_run", member(Over.TENANT, "tenant"),
             "A manual run; superseding other runs needs the pipeline's submitter or a tenant admin."),
    Endpoint("pipeline_runs", member(Over.TENANT, "tenant", optional=True), "Pipeline runs.", reads=True),
    Endpoint("pipeline_status", member(Over.RUN, "ref"), "A run and its steps.", reads=True),
    Endpoint("pipeline_cancel", owner(Over.RUN, "ref"), "Cancel a run."),
    # -- serving
    Endpoint("train_run", member(Over.TENANT, "tenant"), "A SUCCEEDED TrainJob run of the tenant to serve."),
    Endpoint("serve_deploy", driver(), "Deploy or update the driver's own app on Serve (the one writer of Serve's "
                                       "config is the controller)."),
    Endpoint("serve_undeploy", driver(), "Take the driver's own app off Serve as its attempt ends."),
    Endpoint("serve_traffic", owner(Over.JOB, "job_id"), "Change a serving app's traffic (a rollout step, a "
                                                          "rollback, a rate limit)."),
    Endpoint("serve_rollback", owner(Over.JOB, "job_id"), "Restore the weights before the app's last rollout, or "
                                                           "those of a recorded change."),
    Endpoint("serve_delete", owner(Over.JOB, "job_id"), "After the app's job was cancelled: take it off Serve and "
                                                         "record the delete."),
    Endpoint("serve_history", member(Over.JOB, "app"), "A serving app's traffic changes.", reads=True),
    # -- the platform
    Endpoint("reload", admin(), "Apply an edited platform file."),
    Endpoint("shutdown", admin(),
             "Before the platform stops: stop every driver and put running jobs back in the queue."),
)


def rules_table() -> str:
    """The table of every method and its rule, as docs/security.md shows it (a test keeps the two equal)."""
    rows = ["| method | who may call it | what it does |", "|---|---|---|"]
    for e in ENDPOINTS.values():
        about = f" (`{e.rule.param}`)" if e.rule.param else ""
        rows.append(f"| `{e.name}` | {e.rule.describe()}{about} | {e.summary} |")
    return "\n".join(rows)
