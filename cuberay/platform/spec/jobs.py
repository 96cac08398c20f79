"""Reading spec files: the job kinds as one tagged union, the platform file, JSON Schemas.

Files look like Kubernetes objects::

    apiVersion: cuberay.io/v1alpha1
    kind: TrainJob            # TrainJob | TuneJob | ServeApp | Task | Platform
    metadata: {name: mnist-ddp, tenant: vision}
    spec: {workers: 2, resources: {cpu: "1", memory: 2Gi}, entrypoint: "pkg.mod:train_func"}
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, Mapping, Union

from pydantic import Field, TypeAdapter, ValidationError

from cuberay.errors import SpecError
from cuberay.platform.spec.common import SpecModel
from cuberay.platform.spec.documents import Document, one_document, read_documents, require_kind, require_mapping
from cuberay.platform.spec.load import field_names, spec_error
from cuberay.platform.spec.platform_file import Platform
from cuberay.platform.spec.serve import ServeApp
from cuberay.platform.spec.train import Task, TrainJob
from cuberay.platform.spec.tune import TuneJob
from cuberay.platform.spec.workload import JobBase

Job = Annotated[Union[TrainJob, TuneJob, ServeApp, Task], Field(discriminator="kind")]
# The model of each job kind, by its name: the built-in ones, and those registered at run time (cuberay.kinds
# registers every kind's model here, so a plugin's documents load like the built-in ones).
JOB_KINDS: dict[str, type[JobBase]] = {"TrainJob": TrainJob, "TuneJob": TuneJob, "ServeApp": ServeApp, "Task": Task}
_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def register_model(model: type[JobBase]) -> None:
    """Load documents whose kind is ``model``'s ``kind`` literal into ``model`` (a JobBase subclass).

    Raises SpecError when the name already belongs to another model.
    """
    name = model.model_fields["kind"].default
    if not isinstance(name, str) or not name:
        raise SpecError(f"{model.__qualname__} has no kind name; declare kind: Literal[\"MyKind\"] = "
                        f"Field(\"MyKind\", ...) on the model", path="kind")
    held = JOB_KINDS.get(name)
    if held is not None and held is not model and \
            (held.__module__, held.__qualname__) != (model.__module__, model.__qualname__):
        raise SpecError(f"kind {name!r} already loads into {held.__module__}.{held.__qualname__}, not "
                        f"{model.__module__}.{model.__qualname__}; a kind name belongs to one model", path="kind")
    JOB_KINDS[name] = model


# ---------------------------------------------------------------- loading

def _job_from(doc: Document) -> Job:
    data = require_mapping(doc)
    kind = data.get("kind")
    if kind == "Platform":
        raise SpecError("this is a Platform file, not a job; pass it with --platform (or use load_platform)",
                        file=doc.file, path="kind")
    if kind == "Pipeline":
        raise SpecError("this is a Pipeline file, not a job; submit it with `cuberay pipeline submit` (or load it "
                        "with load_pipeline)", file=doc.file, path="kind")
    if not isinstance(kind, str) or kind not in JOB_KINDS:
        close = difflib.get_close_matches(str(kind), JOB_KINDS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(JOB_KINDS)}"
        what = "the document has no kind" if kind is None else f"kind {kind!r} is not a job kind"
        raise SpecError(f"{what}; {hint}", file=doc.file, path="kind")
    try:
        return JOB_KINDS[kind].model_validate(data, context={"file": doc.file})  # type: ignore[return-value]
    except ValidationError as exc:  # (context: a TuneJob reads files beside the spec)
        raise spec_error(exc, doc, vocabulary=field_names(SpecModel)) from None


def _platform_from(doc: Document) -> Platform:
    data = require_kind(doc, "Platform")
    try:
        return Platform.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, doc, vocabulary=field_names(SpecModel)) from None


def load_spec(source: str | Path | Mapping[str, Any] | JobBase) -> Job:
    """One job from a path, YAML text or a mapping (a Job passes through).

    Raises:
        SpecError: invalid YAML, unknown kind or field, a bad value (names file, field path, line and fix).
    """
    if isinstance(source, JobBase):
        return source  # type: ignore[return-value]
    return _job_from(one_document(read_documents(source), "job"))


def load_specs(source: str | Path | Mapping[str, Any]) -> list[Job]:
    """Every job of a multi-document file (``---`` separated); names must be unique per tenant."""
    docs = load_documents(source)
    for i, doc in enumerate(docs):
        if isinstance(doc, Platform):
            raise SpecError(f"document {i + 1} is a Platform; keep jobs and the platform in separate files",
                            path="kind")
    return docs  # type: ignore[return-value]


def load_platform(source: str | Path | Mapping[str, Any]) -> Platform:
    """The platform file (tenants, quotas, node pools)."""
    return _platform_from(one_document(read_documents(source), "Platform"))


def load_documents(source: str | Path | Mapping[str, Any]) -> list[Job | Platform]:
    """Every document of a file, each a job or a Platform by its kind (for ``cuberay spec validate``).

    Names must be unique per tenant within the file.
    """
    docs = read_documents(source)
    out: list[Job | Platform] = []
    first: dict[tuple[str, str | None, str], int] = {}
    for i, doc in enumerate(docs):
        is_platform = isinstance(doc.data, Mapping) and doc.data.get("kind") == "Platform"
        obj = _platform_from(doc) if is_platform else _job_from(doc)
        key = ("Platform" if is_platform else "job", getattr(obj, "tenant", None), obj.metadata.name)
        if key in first:
            raise SpecError(f"name {key[2]!r} is used by documents {first[key] + 1} and {i + 1}; names must be "
                            f"unique per tenant, rename one", file=doc.file, path="metadata.name")
        first[key] = i
        out.append(obj)
    return out


def job_schema() -> dict[str, Any]:
    """JSON Schema of a job file (any kind registered here), for editors (yaml-language-server)."""
    jobs: TypeAdapter[Any] = TypeAdapter(Annotated[Union[tuple(JOB_KINDS.values())], Field(discriminator="kind")])
    return {"$schema": _SCHEMA_DIALECT, "title": "cuberay job", **jobs.json_schema()}


def platform_schema() -> dict[str, Any]:
    """JSON Schema of the platform file."""
    return {"$schema": _SCHEMA_DIALECT, **Platform.model_json_schema()}
