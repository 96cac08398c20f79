"""The pipeline driver: turns pipeline runs into ordinary cuberay jobs, one per step attempt, and follows them.

It lives in the controller actor (its own asyncio task, one tick per admission
interval) and keeps every state in the store before acting, so a restarted
controller continues each run from its recorded step states: finished steps
are never rerun, a RUNNING step follows its recorded job (which the controller
itself re-adopted), and a step whose job was being submitted when the
controller died is matched to that job by its labels or submitted again as the
same attempt.

Each step attempt is submitted through the controller's own ``submit`` (same
queue, quota, admission and dashboard identity as any job), named
``<pipeline>-<step>`` with labels ``cuberay.io/pipeline``, ``.../run``,
``.../step``, ``.../attempt``, and the environment ``CUBERAY_STEP_DIR`` /
``CUBERAY_RUN_DIR`` that :mod:`cuberay.outputs` writes into. Every decision is
:mod:`cuberay.platform.policy.pipelines`; ``clock`` is injectable for tests.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import cuberay.platform.spec.templates as tpl
from cuberay import kinds
from cuberay.errors import CuberayError, NotFoundError, SpecError
from cuberay.platform.api.records import JobRecord, RunRecord, StepRecord
from cuberay.platform.control import convert as conv
from cuberay.platform.control.pipeline_store import DuplicateTickError, PipelineStore
from cuberay.platform.control.store import Store
from cuberay.platform.policy import pipelines as pol
from cuberay.platform.policy.run_states import RunState, StepState
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import Platform
from cuberay.platform.spec.pipeline import Pipeline, step_job
from cuberay.platform.spec.pipeline import load_pipeline as _load_pipeline
from cuberay.platform.spec.platform_file import TenantChoice

log = logging.getLogger("cuberay.pipelines")

LABEL = "cuberay.io/pipeline"
# The step-outputs format of cuberay/outputs.py (the API steps call): <step dir>/outputs/<name>.json.
ENV_STEP_DIR, ENV_RUN_DIR, OUTPUTS = "CUBERAY_STEP_DIR", "CUBERAY_RUN_DIR", "outputs"
SCHEDULER_USER = "cuberay"


_LOADED: dict[str, Pipeline] = {}


def load_pipeline(spec: Mapping[str, Any]) -> Pipeline:
    """A stored or sent definition as a Pipeline; each tick reads every active one, so checked ones are kept.
    Step files are refused, never read: a path a caller sent would name a file on the controller's machine."""
    key = json.dumps(spec, sort_keys=True, default=str)
    pipe = _LOADED.get(key)
    if pipe is None:
        if len(_LOADED) > 256:
            _LOADED.clear()
        pipe = _LOADED[key] = _load_pipeline(dict(spec), files=False)
    return pipe


def read_outputs(step_dir: Path) -> dict[str, Any]:
    """The values a step published with cuberay.outputs.set (one JSON file each, renamed into place)."""
    out: dict[str, Any] = {}
    folder = Path(step_dir) / OUTPUTS
    for file in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out[file.stem] = json.loads(file.read_text())
        except (OSError, ValueError):
            continue
    return out


class PipelineDriver:
    """Pipelines of one platform. ``jobs`` is the controller (async submit/cancel); None records only."""

    def __init__(self, store: Store, platform: Platform | Callable[[], Platform], jobs: Any = None,
                 clock: Callable[[], float] = time.time, caller: Callable[[str], Any] | None = None) -> None:
        self.store = store
        self.book = PipelineStore(store)
        self._platform = platform  # a getter in the controller: a live reload replaces the platform
        self.jobs = jobs
        self.clock = clock
        # The jobs API's caller for a step of a run of ``user``: the platform's own credential, acting for them.
        self.caller = caller or (lambda user: {"user": user})

    @property
    def platform(self) -> Platform:
        return self._platform() if callable(self._platform) else self._platform

    # ------------------------------------------------------------------ API

    def put(self, spec: Mapping[str, Any], user: str, tenant: str | None,
            preferred: str | None = None) -> tuple[Pipeline, TenantChoice]:
        """Validate and store a definition; returns it (in its tenant) and the tenant chosen (and why)."""
        pipe = load_pipeline(dict(spec))
        choice = conv.choose_tenant(self.platform, user, tenant, pipe.tenant, preferred)
        owner = choice.tenant
        if pipe.tenant != owner.name:
            data = pipe.model_dump(mode="json")
            data["metadata"]["tenant"] = owner.name
            pipe = load_pipeline(data)
        self.book.put_pipeline(owner.name, pipe.name, user, pipe.model_dump(mode="json"), self.clock())
        self.store.add_event("pipeline", f"pipeline {owner.name}/{pipe.name} submitted by {user} ({choice.text})")
        return pipe, choice

    async def request_run(self, tenant: str, name: str, user: str, params: Mapping[str, Any] | None = None,
                          supersede: bool = False) -> RunRecord:
        """A manual run now. With ``supersede`` the pipeline's waiting and running runs are cancelled first
        (CubeStudio's manual run); without it, it waits its turn like a tick."""
        record = self.book.get_pipeline(tenant, name)
        pipe = load_pipeline(record.spec)
        unknown = sorted(set(params or {}) - set(pipe.spec.params))
        if unknown:
            raise SpecError(f"parameter(s) {', '.join(unknown)} are not defined by pipeline {name!r} (it has "
                            f"{', '.join(pipe.spec.params) or 'none'}); add them to spec.params or drop them")
        superseded = []
        if supersede:
            for run in self.book.runs(tenant, name, (RunState.WAITING, RunState.RUNNING)):
                superseded.append(run.id)
                await self._end_run(run, RunState.CANCELLED, f"superseded by a manual run of {user}")
        run = self._new_run(record.spec, tenant, name, user, "manual", None, self.clock(), dict(params or {}))
        if superseded:
            self.store.add_event("pipeline", f"{run.id} supersedes {', '.join(superseded)}")
        return run

    async def cancel_run(self, run_id: str, user: str) -> RunRecord:
        run = self.book.get_run(run_id)
        if run.state.is_terminal:
            return run
        return await self._end_run(run, RunState.CANCELLED, f"cancelled by {user}")

    def find_run(self, ref: str, tenants: set[str] | None = None) -> RunRecord:
        """A run by id, else the latest run of the pipeline named ``ref`` (in ``tenants``, if given)."""
        try:
            return self.book.get_run(ref)
        except NotFoundError:
            runs = [r for r in self.book.runs() if r.pipeline == ref and (tenants is None or r.tenant in tenants)]
            if not runs:
                raise
            return max(runs, key=lambda r: (r.seq, r.create_time))

    # ------------------------------------------------------------------ the tick

    async def tick(self) -> None:
        now = self.clock()
        for record in self.book.pipelines():
            try:
                self.record_ticks(record.tenant, record.name, now)
                await self.apply_schedule(record.tenant, record.name)
            except Exception:  # noqa: BLE001 - one broken pipeline must not stop the others
                log.exception("pipeline %s/%s: schedule tick failed", record.tenant, record.name)
        for run in self.book.runs(states=(RunState.RUNNING,)):
            try:
                await self._advance(run)
            except Exception:  # noqa: BLE001 - one broken run must not stop the others
                log.exception("pipeline run %s: tick failed", run.id)

    def record_ticks(self, tenant: str, name: str, now: float) -> list[RunRecord]:
        """New WAITING runs for the cron ticks due at ``now``; each tick once, whatever restarts in between."""
        record = self.book.get_pipeline(tenant, name)
        schedule = load_pipeline(record.spec).spec.schedule
        if schedule is None:
            return []
        made = []
        for tick in pol.due_ticks(schedule, record.last_tick, record.submit_time, now):
            try:
                made.append(self._new_run(record.spec, tenant, name, record.user, "schedule", tick, tick, {}))
            except DuplicateTickError:
                pass  # recorded before a restart: the unique index keeps it once
            self.book.set_last_tick(tenant, name, tick)
        return made

    async def apply_schedule(self, tenant: str, name: str) -> None:
        """Start, cancel and expire runs as the schedule policy decides."""
        pipe = load_pipeline(self.book.get_pipeline(tenant, name).spec)
        runs = self.book.runs(tenant, name)
        views = [pol.RunView(r.id, r.execution_time, r.state) for r in runs]
        decision = pol.decide_runs(pipe.spec.schedule, [v for v in views if v.state != RunState.EXPIRED])
        by_id = {r.id: r for r in runs}
        for run_id, why in decision.cancel:
            await self._end_run(by_id[run_id], RunState.CANCELLED, why)
        for run_id, why in decision.expire:
            await self._end_run(by_id[run_id], RunState.EXPIRED, why)
        for run_id in decision.start:
            self.book.update_run(run_id, state=RunState.RUNNING, start_time=self.clock(), message="running")
            self.store.add_event("pipeline", f"run {run_id} started")
        fresh = [pol.RunView(r.id, r.execution_time, r.state) for r in self.book.runs(tenant, name)]
        for run in fresh:
            if run.state == RunState.WAITING:
                reason = pol.waiting_reason(pipe.spec.schedule, fresh, run.id)
                if by_id[run.id].message != reason:
                    self.book.update_run(run.id, message=reason)

    # ------------------------------------------------------------------ one run

    async def _advance(self, run: RunRecord) -> None:
        pipe = load_pipeline(run.spec)
        steps = {s.name: s for s in self.book.steps(run.id)}
        for step in list(steps.values()):
            if step.state == StepState.RUNNING:
                steps[step.name] = await self._follow(run, pipe, step)
        context = self._context(run, pipe, steps)
        plan = pol.advance(pipe.spec, {n: s.state for n, s in steps.items()}, context)
        for change in plan.changes:
            steps[change.name] = self.book.update_step(run.id, change.name, state=change.state,
                                                       message=change.reason, end_time=self.clock())
        for name in plan.start:
            steps[name] = await self._submit(run, pipe, steps[name], context)
        ended = pol.outcome({n: s.state for n, s in steps.items()}, {n: s.message for n, s in steps.items()})
        if ended is not None:
            state, message = ended
            self.book.update_run(run.id, state=state, end_time=self.clock(), message=message)
            self.store.add_event("pipeline", f"run {run.id} {state.value}: {message}")

    async def _follow(self, run: RunRecord, pipe: Pipeline, step: StepRecord) -> StepRecord:
        """A running step's job: done, failed (retry?), timed out, or still going."""
        if step.job_id is None:  # the controller died while submitting: find that job, else submit again
            found = self._job_of_attempt(run, pipe, step)
            if found is None:
                return self.book.update_step(run.id, step.name, state=StepState.PENDING,
                                             attempt=step.attempt - 1, message="resubmitting after a restart")
            step = self.book.update_step(run.id, step.name, job_id=found.id, job_ids=[*step.job_ids, found.id])
        job = self.store.get_job(step.job_id)
        spec_step = pipe.spec.step(step.name)
        now = self.clock()
        nodes = conv.node_ids_of(job.allocation)
        if job.state == JobState.RUNNING and (job.start_time != step.start_time or nodes and nodes != step.nodes):
            step = self.book.update_step(run.id, step.name, start_time=job.start_time, nodes=nodes or step.nodes)
        if job.state == JobState.RUNNING and pol.timed_out(spec_step.timeout_s, job.start_time, now):
            reason = f"attempt {step.attempt} timed out: ran {now - job.start_time:.0f}s, its timeout is " \
                     f"{spec_step.timeout_s:g}s"
            self.book.update_step(run.id, step.name, message=reason)
            await self.jobs.cancel(self.caller(run.user), job.id, f"by pipeline {pipe.name} (step timeout)")
            return self._failed(run, spec_step, step, reason)
        if kinds.step_done(job.kind, job.state):
            values = read_outputs(self._step_dir(run, step.name))
            what = f"job {job.id} succeeded" if job.state == JobState.SUCCEEDED else "serving"
            return self.book.update_step(run.id, step.name, state=StepState.SUCCEEDED, outputs=values,
                                         end_time=now, message=what)
        if job.state.is_terminal:
            if step.message.startswith(f"attempt {step.attempt} timed out"):
                return self._failed(run, spec_step, step, step.message)
            return self._failed(run, spec_step, step, f"attempt {step.attempt} ({job.id}) "
                                                      f"{job.state.value.lower()}: {job.message or job.reason}")
        return step

    def _failed(self, run: RunRecord, spec_step: Any, step: StepRecord, reason: str) -> StepRecord:
        if pol.should_retry(step.attempt, spec_step.retries):
            self.store.add_event("pipeline", f"run {run.id} step {step.name}: {reason}; retrying "
                                             f"({step.attempt} of {spec_step.retries} retries used)")
            return self.book.update_step(run.id, step.name, state=StepState.PENDING,
                                         message=f"{reason}; retrying ({step.attempt} of {spec_step.retries} "
                                                 f"retries used)")
        return self.book.update_step(run.id, step.name, state=StepState.FAILED, message=reason,
                                     end_time=self.clock())

    async def _submit(self, run: RunRecord, pipe: Pipeline, step: StepRecord,
                      context: Mapping[str, Any]) -> StepRecord:
        attempt = step.attempt + 1
        spec_step = pipe.spec.step(step.name)
        step_dir = self._step_dir(run, step.name)
        extra: dict[str, Any] = {
            "env": {ENV_STEP_DIR: str(step_dir), ENV_RUN_DIR: run.workdir,
                    "CUBERAY_PIPELINE_RUN": run.id},
            "labels": {LABEL: pipe.name, f"{LABEL}-run": f"r{run.seq}", f"{LABEL}-step": step.name,
                       f"{LABEL}-attempt": str(attempt)},
        }
        if (spec_step.job or {}).get("spec", {}).get("workers", 1) == 1:
            extra["placement"] = "spread"  # a one-worker step goes to the least-used node: siblings spread out
        try:
            job = step_job(pipe, spec_step, context, extra)
        except (CuberayError, tpl.TemplateError) as exc:
            return self.book.update_step(run.id, step.name, state=StepState.FAILED, attempt=attempt,
                                         message=f"its job could not be built: {exc}", end_time=self.clock())
        step_dir.mkdir(parents=True, exist_ok=True)
        # Recorded before the submit: a restart in between finds the job by its labels (or submits it again).
        step = self.book.update_step(run.id, step.name, state=StepState.RUNNING, attempt=attempt, job_id=None,
                                     start_time=None, message=f"attempt {attempt}: submitting")
        try:
            record: JobRecord = await self.jobs.submit(self.caller(run.user), job.model_dump(mode="json"),
                                                       run.tenant)
        except CuberayError as exc:
            return self._failed(run, spec_step, step, f"attempt {attempt} was refused: {exc}")
        return self.book.update_step(run.id, step.name, job_id=record.id, job_ids=[*step.job_ids, record.id],
                                     message=f"attempt {attempt}: job {record.id}")

    def _job_of_attempt(self, run: RunRecord, pipe: Pipeline, step: StepRecord) -> JobRecord | None:
        want = {LABEL: pipe.name, f"{LABEL}-run": f"r{run.seq}", f"{LABEL}-step": step.name,
                f"{LABEL}-attempt": str(step.attempt)}
        for job in self.store.list_jobs(run.tenant):
            labels = (job.spec.get("metadata") or {}).get("labels") or {}
            if all(labels.get(k) == v for k, v in want.items()):
                return job
        return None

    async def _end_run(self, run: RunRecord, state: RunState, why: str) -> RunRecord:
        """End a run now: its running steps' jobs are cancelled, its pending steps never start."""
        for step in self.book.steps(run.id):
            if step.state.is_terminal:
                continue
            self.book.update_step(run.id, step.name, state=StepState.CANCELLED, message=why, end_time=self.clock())
            if step.job_id and self.jobs is not None:
                await self.jobs.cancel(self.caller(run.user), step.job_id, f"by pipeline run {run.id} ({why})")
        self.store.add_event("pipeline", f"run {run.id} {state.value}: {why}")
        return self.book.update_run(run.id, state=state, end_time=self.clock(), message=why)

    # ------------------------------------------------------------------ helpers

    def _new_run(self, spec: dict[str, Any], tenant: str, name: str, user: str, trigger: str,
                 tick: float | None, execution_time: float, params: dict[str, Any]) -> RunRecord:
        pipe = load_pipeline(spec)
        seq = self.book.next_run_seq(tenant, name)
        run_id = f"{tenant}-{name}-r{seq}"
        run = RunRecord(id=run_id, tenant=tenant, pipeline=name, seq=seq, trigger=trigger, tick=tick,
                        execution_time=execution_time, user=user, spec=spec, params=params,
                        state=RunState.WAITING, workdir=str(self._run_dir(tenant, name, run_id)),
                        create_time=self.clock(), message="waiting for its turn")
        self.book.add_run(run, [s.name for s in pipe.spec.steps])
        self.store.add_event("pipeline", f"run {run_id} created ({trigger}, execution date "
                                         f"{pol.iso(execution_time)})")
        return run

    def _run_dir(self, tenant: str, name: str, run_id: str) -> Path:
        return self.platform.tenant_storage(tenant) / "pipelines" / name / run_id

    def _step_dir(self, run: RunRecord, step: str) -> Path:
        return Path(run.workdir) / step

    def _context(self, run: RunRecord, pipe: Pipeline, steps: Mapping[str, StepRecord]) -> dict[str, Any]:
        builtins = {"run_id": run.id, "execution_date": pol.iso(run.execution_time), "creator": run.user,
                    "pipeline": pipe.name}
        params = {k: tpl.render(v, builtins) for k, v in {**pipe.spec.params, **run.params}.items()}
        return {**builtins, "params": params,
                "steps": {n: tpl.step_context(s.outputs, str(self._step_dir(run, n)), s.state.value)
                          for n, s in steps.items()}}
