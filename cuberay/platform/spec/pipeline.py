"""The Pipeline spec: a DAG of ordinary cuberay jobs with retries, timeouts, conditions, outputs and a schedule.

::

    apiVersion: cuberay.io/v1alpha1
    kind: Pipeline
    metadata: {name: digits-flow, tenant: vision}
    spec:
      params: {epochs: 3}
      parallelism: 2
      schedule: {cron: "0 2 * * *", start: 2026-11-01T00:00:00Z, catchup: true, max_active_runs: 1}
      steps:
        - name: prepare
          job: {kind: Task, spec: {command: "python prep.py --day {{ execution_date }}"}}
        - name: train
          file: train.yaml                  # a job spec file, relative to this one
          depends_on: [prepare]
          retries: 2
          timeout: 30m
        - name: publish
          depends_on: [train]
          when: "steps.train.outputs.accuracy > 0.9"
          job: {kind: Task, spec: {command: "echo {{ steps.train.outputs.accuracy }}"}}

Everything that can be checked before a run is checked when the file is
loaded: duplicate step names, unknown ``depends_on``, cycles, a bad cron, and
every template variable (an unknown name, an undefined parameter, a step that is
not upstream); each error names the step and the field.
"""

from __future__ import annotations

import datetime as dt
import difflib
import graphlib
import hashlib
from pathlib import Path
from typing import Any, Literal, Mapping, Union

from croniter import croniter
from pydantic import Field, ValidationError, field_validator, model_validator

import cuberay.platform.spec.shell_template as shell_template
import cuberay.platform.spec.templates as tpl
from cuberay.errors import SpecError
from cuberay.platform.spec.common import API_VERSION, Name, OptionalDuration, SpecModel
from cuberay.platform.spec.documents import one_document, read_documents, require_kind, require_mapping
from cuberay.platform.spec.jobs import JOB_KINDS, load_spec
from cuberay.platform.spec.load import FieldError, field_names, parse_duration, spec_error
from cuberay.platform.spec.workload import DocumentHeader

Param = Union[str, int, float, bool]
_SAMPLE_DATE = "2026-01-01T00:00:00+00:00"


def _cron(value: str) -> str:
    if len(value.split()) != 5 or not croniter.is_valid(value):
        raise ValueError(f"cron {value!r} is not a 5-field cron expression (minute hour day-of-month month "
                         f"day-of-week); write e.g. '0 2 * * *' (02:00 every day) or '*/15 * * * *'")
    return value


class Schedule(SpecModel):
    """When runs are made on their own (CubeStudio's crontab pipelines, times in UTC)."""

    cron: str = Field(description='5-field cron expression in UTC, e.g. "0 2 * * *".')
    start: Union[dt.datetime, None] = Field(
        None, strict=False, description="First time a tick may fall on (ISO 8601; UTC when no offset is given); "
                                        "null = when the pipeline is submitted. A start in the past with catchup "
                                        "backfills every missed tick, oldest first.")
    catchup: bool = Field(True, description="Backfill every tick missed since start (or since the last tick); "
                                            "false = only the latest missed tick runs.")
    depends_on_past: bool = Field(False, description="Start a tick's run only after the previous tick's run "
                                                     "SUCCEEDED; a failure stops the chain until it is re-run.")
    max_active_runs: int = Field(3, ge=1, description="Runs of this pipeline that may be active at once; the "
                                                      "others wait in time order.")
    keep_last: int = Field(0, ge=0, description="Keep only the latest N ticks: older ones still waiting expire "
                                                "and older ones still running are cancelled. 0 = keep all.")

    @field_validator("cron")
    @classmethod
    def _check_cron(cls, v: str) -> str:
        return _cron(v)

    @field_validator("start")
    @classmethod
    def _utc(cls, v: dt.datetime | None) -> dt.datetime | None:
        if v is not None and v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return v


class Step(SpecModel):
    """One step: a job of any kind that runs, inline or from a file, and when it may run."""

    name: Name = Field(description="Step name, unique in the pipeline (a DNS-1123 label).")
    job: dict[str, Any] | None = Field(None, description="The step's job, inline: kind (TrainJob, TuneJob, "
                                       "ServeApp or Task) and spec; metadata is optional (the job is named "
                                       "<pipeline>-<step> and runs in the pipeline's tenant).")
    file: str | None = Field(None, description="Path of a job spec file, relative to the pipeline file (or "
                                               "absolute); read when the pipeline is loaded, which makes the "
                                               "step inline (job set, file unset). Exactly one of job and file.")
    depends_on: list[Name] = Field(default_factory=list, description="Steps that must end first (SUCCEEDED or "
                                                                     "SKIPPED).")
    retries: int = Field(0, ge=0, description="Further attempts after a failure or a timeout.")
    timeout: OptionalDuration = Field(None, description='Limit on each attempt\'s run time (not its wait '
                                                               'in the queue): seconds or "90m", "2h"; null = none.')
    skip: bool = Field(False, description="Do not run this step (it counts as SKIPPED for its dependents).")
    when: Union[bool, str, None] = Field(None, description='Run only if this holds: a Jinja expression over '
                                         'params and upstream outputs, e.g. "steps.eval.outputs.accuracy > 0.9"; '
                                         'false = skip.')

    @property
    def timeout_s(self) -> float | None:
        return None if self.timeout is None else parse_duration(self.timeout)


class PipelineSpec(SpecModel):
    """Steps, shared parameters, parallelism, priority and an optional schedule."""

    steps: list[Step] = Field(min_length=1, description="The steps; order is only the tie-break among ready ones.")
    params: dict[str, Param] = Field(default_factory=dict, description="Parameters for templates "
                                     "({{ params.NAME }}); values may use run_id, execution_date, creator.")
    parallelism: int = Field(1, ge=1, description="Steps of one run that may run at once (CubeStudio's default "
                                                  "is 1). Parallel one-worker steps are placed on different "
                                                  "nodes where they fit.")
    priority: int | None = Field(None, description="Priority of every step's job unless the step sets its own; "
                                                   "null = the tenant's default.")
    schedule: Schedule | None = Field(None, description="Cron schedule; null = runs start only on request.")

    @model_validator(mode="after")
    def _check(self) -> PipelineSpec:
        names = [s.name for s in self.steps]
        seen: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            if step.name in seen:
                raise FieldError(["steps", i, "name"], f"step name {step.name!r} is used by steps {seen[step.name]}"
                                                       f" and {i}; step names must be unique, rename one")
            seen[step.name] = i
        for i, step in enumerate(self.steps):
            for dep in step.depends_on:
                if dep not in seen:
                    close = difflib.get_close_matches(dep, names, n=1)
                    hint = f"did you mean {close[0]!r}?" if close else f"the steps are {', '.join(names)}"
                    raise FieldError(["steps", i, "depends_on"],
                                     f"step {step.name!r} depends on {dep!r}, which is not a step; {hint}")
                if dep == step.name:
                    raise FieldError(["steps", i, "depends_on"], f"step {step.name!r} depends on itself; remove it")
        try:
            graphlib.TopologicalSorter({s.name: s.depends_on for s in self.steps}).prepare()
        except graphlib.CycleError as exc:
            cycle = list(reversed(exc.args[1]))
            raise FieldError(["steps", seen[cycle[0]], "depends_on"],
                             f"steps {' -> '.join(cycle)} form a cycle (each waits for the next); remove one "
                             f"of these depends_on entries") from None
        for key, value in self.params.items():
            if isinstance(value, str):
                _check_refs(value, ["params", key], "parameter " + repr(key), self.params, set(), allow_params=False)
        return self

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    def upstream(self, name: str) -> set[str]:
        """Every step ``name`` waits for, directly or not."""
        direct = {s.name: s.depends_on for s in self.steps}
        out: set[str] = set()
        todo = list(direct[name])
        while todo:
            dep = todo.pop()
            if dep not in out:
                out.add(dep)
                todo.extend(direct[dep])
        return out

    def order(self) -> list[str]:
        """Step names in a dependency order (declaration order among equals)."""
        position = {s.name: i for i, s in enumerate(self.steps)}
        sorter = graphlib.TopologicalSorter({s.name: s.depends_on for s in self.steps})
        sorter.prepare()
        out: list[str] = []
        while sorter.is_active():
            ready = sorted(sorter.get_ready(), key=position.__getitem__)
            out.extend(ready)
            sorter.done(*ready)
        return out


def _check_refs(text: str, path: list[str | int], where: str, params: Mapping[str, Any], upstream: set[str],
                *, allow_params: bool = True, expression: bool = False) -> None:
    try:
        refs = tpl.references(text, expression=expression)
    except tpl.TemplateError as exc:
        raise FieldError(path, f"{where}: {exc}") from None
    for ref in sorted(refs):
        problem = _ref_problem(ref, params, upstream, allow_params=allow_params)
        if problem:
            raise FieldError(path, f"{where}: {problem}")


def _ref_problem(ref: tuple[str, ...], params: Mapping[str, Any], upstream: set[str], *,
                 allow_params: bool) -> str | None:
    root, rest = ref[0], ref[1:]
    allowed = list(tpl.SCALARS) + (["params.NAME", "steps.STEP.outputs.NAME"] if allow_params else [])
    shown = ".".join(ref)
    if root in tpl.SCALARS:
        return None
    if root == "params" and allow_params:
        if rest and rest[0] not in params:
            defined = ", ".join(params) or "none"
            return (f"template variable {shown!r} is undefined: the pipeline has no parameter {rest[0]!r} "
                    f"(defined: {defined}); add it to spec.params")
        return None
    if root == "steps" and allow_params:
        if not rest:
            return None
        if rest[0] not in upstream:
            return (f"template variable {shown!r} reads step {rest[0]!r}, which is not upstream of this step; "
                    f"add it to depends_on (a step's outputs exist only once it has run)")
        if len(rest) > 1 and rest[1] not in tpl.STEP_FIELDS:
            return (f"template variable {shown!r} is undefined: a step has {', '.join(tpl.STEP_FIELDS)}; "
                    f"write steps.{rest[0]}.outputs.NAME")
        return None
    close = difflib.get_close_matches(root, tpl.ROOTS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"template variable {shown!r} is undefined; {hint}use {', '.join(allowed)}"


class Pipeline(DocumentHeader):
    """A DAG of cuberay jobs (CubeStudio's pipelines), run on the platform's queue like any job."""

    kind: Literal["Pipeline"] = Field("Pipeline", description="Pipeline.")
    spec: PipelineSpec = Field(description="Steps, parameters, parallelism, priority, schedule.")

    @model_validator(mode="after")
    def _steps_are_jobs(self) -> Pipeline:
        sample_steps = {s.name: {"outputs": tpl.AnyOutputs(), "dir": "/sample", "state": "SUCCEEDED"}
                        for s in self.spec.steps}
        context = {"run_id": "sample-run", "execution_date": _SAMPLE_DATE, "creator": "user",
                   "pipeline": self.name, "params": self.spec.params, "steps": sample_steps}
        for i, step in enumerate(self.spec.steps):
            where = f"step {step.name!r}"
            if step.job is None:
                raise FieldError(["spec", "steps", i, "job"], f"{where} has no job; set job (an inline spec with "
                                                              f"kind and spec) or file (a spec file's path)")
            upstream = self.spec.upstream(step.name)
            for sub, text in tpl.strings(step.job):
                _check_refs(text, ["spec", "steps", i, "job", *sub], where, self.spec.params, upstream)
            if isinstance(step.when, str):
                if tpl.is_template(step.when):
                    raise FieldError(["spec", "steps", i, "when"], f"{where}: when is an expression, not a "
                                     f"template; write it without {{{{ }}}}, e.g. 'steps.eval.outputs.acc > 0.9'")
                _check_refs(step.when, ["spec", "steps", i, "when"], where, self.spec.params, upstream,
                            expression=True)
            try:
                step_job(self, step, context)
            except SpecError as exc:
                raise FieldError(["spec", "steps", i, "job"],
                                 f"{where}: {exc.path + ': ' if exc.path else ''}{exc.reason}") from None
            except tpl.TemplateError as exc:
                raise FieldError(["spec", "steps", i, "job"], f"{where}: {exc}") from None
        return self


def job_name(pipeline: str, step: str) -> str:
    """The name of a step's jobs: ``<pipeline>-<step>``, shortened with a hash past 63 characters."""
    name = f"{pipeline}-{step}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{name[:56].rstrip('-')}-{digest}"


def step_job(pipeline: Pipeline, step: Step, context: Mapping[str, Any],
             extra: Mapping[str, Any] | None = None) -> Any:
    """The step's job, rendered with ``context`` and validated: named ``<pipeline>-<step>``, in the pipeline's
    tenant, the pipeline's priority unless its own; ``extra`` (env, labels, placement) merged into it.
    Values reach ``command`` as environment variables (:mod:`cuberay.platform.spec.shell_template`)."""
    raw = shell_template.render_job(dict(step.job or {}), context)
    meta = dict(raw.get("metadata") or {})
    if meta.get("tenant") not in (None, pipeline.tenant) and pipeline.tenant is not None:
        raise SpecError(f"the job's tenant {meta['tenant']!r} is not the pipeline's {pipeline.tenant!r}; remove "
                        f"metadata.tenant from the step (steps run in the pipeline's tenant)", path="metadata.tenant")
    kind = raw.get("kind")
    if kind not in JOB_KINDS:
        raise SpecError(f"kind {kind!r} is not a job kind; a step runs one of {', '.join(JOB_KINDS)}", path="kind")
    labels = {**dict(meta.get("labels") or {}), **dict((extra or {}).get("labels") or {})}
    meta.update(name=job_name(pipeline.name, step.name), tenant=pipeline.tenant, labels=labels)
    spec = dict(raw.get("spec") or {})
    if pipeline.spec.priority is not None and spec.get("priority") is None:
        spec["priority"] = pipeline.spec.priority
    for key, value in (extra or {}).items():
        if key == "env":
            spec["env"] = {**dict(spec.get("env") or {}), **value}
        elif key != "labels" and spec.get(key) in (None, "auto"):
            spec[key] = value
    return load_spec({**raw, "apiVersion": raw.get("apiVersion", API_VERSION), "metadata": meta, "spec": spec})


# ---------------------------------------------------------------- loading


def load_pipeline(source: str | Path | Mapping[str, Any] | Pipeline, *, files: bool = True) -> Pipeline:
    """A Pipeline from a path, YAML text or a mapping; step files are read relative to the pipeline file.

    ``files=False`` refuses steps that name a file: the controller loads what a caller sent, and a path in it
    would be read on the controller's machine (the client inlines step files before it sends a pipeline).

    Raises:
        SpecError: anything wrong in the file or its steps, naming the step and the field.
    """
    if isinstance(source, Pipeline):
        return source
    doc = one_document(read_documents(source), "Pipeline")
    data = dict(require_kind(doc, "Pipeline"))
    base = Path(doc.file).parent if doc.file else Path.cwd()
    data["spec"] = _inline_files(data.get("spec"), base, doc.file) if files else _no_files(data.get("spec"))
    try:
        return Pipeline.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, doc, vocabulary=field_names(SpecModel)) from None


def _no_files(spec: Any) -> Any:
    steps = spec.get("steps") if isinstance(spec, Mapping) else None
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        if isinstance(step, Mapping) and step.get("file") is not None:
            raise SpecError("a pipeline sent to the controller carries each step's job inline; a step file is read "
                            "where the pipeline file is: submit it with `cuberay pipeline submit FILE` or "
                            "cuberay.pipelines.submit(path), which inline it", path=f"spec.steps[{i}].file")
    return spec


def _inline_files(spec: Any, base: Path, file: str | None) -> Any:
    if not isinstance(spec, Mapping) or not isinstance(spec.get("steps"), list):
        return spec
    steps = []
    for i, step in enumerate(spec["steps"]):
        if isinstance(step, Mapping) and step.get("file") is not None:
            where = f"spec.steps[{i}].file"
            if step.get("job") is not None:
                raise SpecError("set job (inline) or file, not both", file=file, path=where)
            if not isinstance(step["file"], str):
                raise SpecError(f"file must be a path, got {step['file']!r}", file=file, path=where)
            path = Path(step["file"]).expanduser()
            path = path if path.is_absolute() else base / path
            if not path.is_file():
                raise SpecError(f"no job spec file at {path}; paths are relative to the pipeline file",
                                file=file, path=where)
            job = require_mapping(one_document(read_documents(path), "job"))
            # Resolved: the step becomes inline and ``file`` goes. A loaded Pipeline is self-contained, so its
            # dump (what the client sends, the store keeps and the controller loads again, where the client's
            # files do not exist) is itself a valid pipeline; keeping ``file`` next to the inlined job would
            # make every dump one that this loader refuses ("job or file, not both"). Here, not in the client,
            # because every consumer of a loaded pipeline dumps it (submit, graph, the driver's re-tenanting).
            step = {**{k: v for k, v in step.items() if k != "file"}, "job": dict(job)}
        steps.append(step)
    return {**spec, "steps": steps}


def pipeline_schema() -> dict[str, Any]:
    """JSON Schema of a pipeline file."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **Pipeline.model_json_schema()}
