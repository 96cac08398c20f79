"""``cuberay spec validate|schema``: check spec files offline and export their JSON Schema."""

from __future__ import annotations

import enum
import getpass
import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional

import typer
import yaml

from cuberay import kinds
from cuberay.cli import app
from cuberay.cli.importable import import_paths, import_problem
from cuberay.cli.output import Format, emit, error_console, out_option, output_option, write_text
from cuberay.errors import CuberayError, SpecError
from cuberay.platform.api import TENANT_ENV, USER_ENV
from cuberay.platform.policy.fit import check_job
from cuberay.platform.spec import (
    Platform,
    job_schema,
    load_documents,
    load_platform,
    platform_schema,
)
from cuberay.platform.spec.documents import read_documents
from cuberay.platform.spec.resources import format_resources

spec_app = typer.Typer(help="Validate job and platform files; export their JSON Schema for editors.",
                       no_args_is_help=True)
app.add_typer(spec_app, name="spec")


class SchemaKind(str, enum.Enum):
    job = "job"
    platform = "platform"
    pipeline = "pipeline"


@spec_app.command("validate")
def validate(
    files: list[Path] = typer.Argument(..., metavar="FILE...",
                                       help="Job, platform or simulator cluster YAML files (the content decides)."),
    platform: Optional[Path] = typer.Option(
        None, "--platform", "-p", metavar="FILE",
        help="Platform file: also check each job's tenant exists and that the job could ever fit the tenant's "
             "max quota and the node pools (exit 3 if not)."),
    tenant: Optional[str] = typer.Option(None, "--tenant", "-t",
                                         help="Tenant for jobs (overrides metadata.tenant; needs --platform)."),
    import_check: bool = typer.Option(
        True, "--import-check/--no-import-check",
        help="Check that each entrypoint/import_path module can be found here and defines the name "
             "(--no-import-check: for specs whose code lives on another machine)."),
    output: Format = output_option(),
) -> None:
    """Validate FILEs; print one "ok:" line per document. Exit 2 on a spec error, 3 if a job can never fit."""
    plat = load_platform(platform) if platform else None
    if tenant and plat is None:
        raise SpecError("--tenant needs --platform FILE to check the tenant against")
    records: list[dict[str, Any]] = []
    failures: list[CuberayError] = []
    for file in files:
        try:
            records += _file_records(file, plat, tenant, import_check)
        except CuberayError as exc:
            failures.append(exc)
    if output == Format.table:
        for rec in records:
            print(f"ok: {rec['file']} ({rec['summary']})")
    else:
        emit(records, output)
    for exc in failures[:-1]:
        error_console().print(f"[bold red]error:[/] {exc}", markup=True, highlight=False, soft_wrap=True)
    if failures:  # the CLI prints the last one and exits with its code (2 spec, 3 admission)
        raise failures[-1]


def _file_records(file: Path, plat: Platform | None, tenant: str | None, import_check: bool) -> list[dict[str, Any]]:
    if _is_cluster_file(file):
        return [_cluster_record(file)]
    if _is_pipeline_file(file):
        return [_pipeline_record(file)]
    return [_record(doc, str(file), plat, tenant, import_check) for doc in load_documents(file)]


def _is_cluster_file(file: Path) -> bool:
    """A simulator cluster file (``nodes: [...]``, no kind), as ``cuberay sim --cluster`` reads."""
    docs = read_documents(file)
    return len(docs) == 1 and isinstance(docs[0].data, Mapping) and "kind" not in docs[0].data \
        and "nodes" in docs[0].data


def _is_pipeline_file(file: Path) -> bool:
    docs = read_documents(file)
    return len(docs) == 1 and isinstance(docs[0].data, Mapping) and docs[0].data.get("kind") == "Pipeline"


def _pipeline_record(file: Path) -> dict[str, Any]:
    from cuberay.platform.spec.pipeline import load_pipeline

    pipe = load_pipeline(file)
    when = f", cron {pipe.spec.schedule.cron!r}" if pipe.spec.schedule else ""
    return {"file": str(file), "kind": "Pipeline", "name": pipe.name, "tenant": pipe.tenant,
            "summary": f"Pipeline {pipe.name}, {len(pipe.spec.steps)} steps, parallelism {pipe.spec.parallelism}"
                       f"{when}"}


def _cluster_record(file: Path) -> dict[str, Any]:
    from cuberay.platform.sim.cluster import load_cluster

    nodes = load_cluster(file)
    gpus = sum(n.capacity.get("GPU", 0.0) for n in nodes)
    return {"file": str(file), "kind": "Cluster", "name": file.stem,
            "summary": f"cluster for `cuberay sim`, {len(nodes)} nodes, {gpus:g} GPUs"}


def _record(doc: Any, file: str, plat: Platform | None, tenant: str | None, import_check: bool) -> dict[str, Any]:
    if isinstance(doc, Platform):
        tenants = ", ".join(t.name for t in doc.tenants)
        pools = len(doc.spec.node_pools)
        summary = f"Platform {doc.metadata.name}, {len(doc.tenants)} tenants: {tenants}; {pools} node pools"
        return {"file": file, "kind": "Platform", "name": doc.metadata.name, "summary": summary}
    found: list[str] = []
    if import_check:
        check_imports(doc, file)
        try:
            hook = kinds.of(doc.kind).code_found
            found = kinds.load_object(hook, f"the {doc.kind} code check")(doc) if hook else []
        except SpecError as exc:
            raise SpecError(str(exc), file=file) from exc
    resolved = None
    if plat is not None:
        if tenant:
            doc = doc.with_tenant(tenant)
        elif doc.tenant is None:  # as at submit: CUBERAY_TENANT, the platform file's defaults, the only tenant
            user = os.environ.get(USER_ENV) or getpass.getuser()
            chosen = plat.choose_tenant(user, preferred=os.environ.get(TENANT_ENV) or None)
            doc, resolved = doc.with_tenant(chosen.tenant.name), chosen.text
        check_job(plat, doc, file=file)
    workers = str(doc.min_workers) if doc.min_workers == doc.max_workers else f"{doc.min_workers}-{doc.max_workers}"
    per_worker = format_resources(doc.worker_request().resources)
    where = f" in {resolved}" if resolved else f" in {doc.tenant}" if doc.tenant else ""
    summary = f"{doc.kind} {doc.name}{where}, {workers} workers x {per_worker}"
    summary += "".join(f", {name} {count} x {format_resources(request.resources)}"
                       for name, request, count, _ in doc.role_requests())
    return {"file": file, "kind": doc.kind, "name": doc.name, "tenant": doc.tenant, "workers": workers,
            "per_worker": per_worker, "summary": "; ".join([summary, *found]), "code": found}


def check_imports(job: Any, file: str | None = None) -> None:
    """SpecError naming the field when an entrypoint/import_path of ``job`` cannot be imported here."""
    for field, target in import_paths(job.model_dump(mode="json"), kinds.of(job.kind).import_fields):
        problem = import_problem(target)
        if problem:
            raise SpecError(f"{target!r}: {problem}. Fix the path (package.module:name), install the package "
                            f"that provides it, or run from the directory that holds it; pass --no-import-check "
                            f"if this spec is meant for another machine", file=file, path=field)


@spec_app.command("schema")
def schema(
    kind: SchemaKind = typer.Option(SchemaKind.job, "--kind", "-k", help="job (any job kind), platform or "
                                                                         "pipeline."),
    output: Optional[Format] = output_option(
        None, help="json or yaml (default: json, or YAML for an --out file named .yaml/.yml); no table form."),
    out: Optional[Path] = out_option("Write the schema to this file instead of stdout.", metavar="FILE"),
) -> None:
    """Print the JSON Schema of job or platform files (for yaml-language-server and other editors)."""
    if kind == SchemaKind.pipeline:
        from cuberay.platform.spec.pipeline import pipeline_schema

        data = pipeline_schema()
    else:
        data = job_schema() if kind == SchemaKind.job else platform_schema()
    if output == Format.table:
        raise SpecError("a schema cannot be a table; use -o json or -o yaml (and --out FILE to write a file)")
    if output is None:
        output = Format.yaml if out is not None and out.suffix in (".yaml", ".yml") else Format.json
    as_yaml = output == Format.yaml
    text = yaml.safe_dump(data, sort_keys=False) if as_yaml else json.dumps(data, indent=2) + "\n"
    if out is None:
        print(text, end="")
        return
    write_text(out, text)
    error_console().print(f"wrote the {kind.value} schema to {out}", highlight=False)
