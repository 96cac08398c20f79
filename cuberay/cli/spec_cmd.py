"""``cuberay spec validate|schema``: check spec files offline and export their JSON Schema."""

from __future__ import annotations

import enum
import getpass
import json
from pathlib import Path
from typing import Any, Optional

import typer
import yaml

from cuberay.cli import app
from cuberay.cli.output import Format, emit, error_console
from cuberay.errors import CuberayError, SpecError
from cuberay.platform.policy.fit import check_job
from cuberay.platform.spec import (
    Platform,
    job_schema,
    load_documents,
    load_platform,
    platform_schema,
)
from cuberay.platform.spec.resources import format_resources

spec_app = typer.Typer(help="Validate job and platform files; export their JSON Schema for editors.",
                       no_args_is_help=True)
app.add_typer(spec_app, name="spec")


class SchemaKind(str, enum.Enum):
    job = "job"
    platform = "platform"


@spec_app.command("validate")
def validate(
    files: list[Path] = typer.Argument(..., metavar="FILE...", help="Job or platform YAML files (kind decides)."),
    platform: Optional[Path] = typer.Option(
        None, "--platform", "-p", metavar="FILE",
        help="Platform file: also check each job's tenant exists and that the job could ever fit the tenant's "
             "max quota and the node pools (exit 3 if not)."),
    tenant: Optional[str] = typer.Option(None, "--tenant", "-t",
                                         help="Tenant for jobs (overrides metadata.tenant; needs --platform)."),
    output: Format = typer.Option(Format.table, "--output", "-o", "--format", help="table | json | yaml."),
) -> None:
    """Validate FILEs; print one "ok:" line per document. Exit 2 on a spec error, 3 if a job can never fit."""
    plat = load_platform(platform) if platform else None
    if tenant and plat is None:
        raise SpecError("--tenant needs --platform FILE to check the tenant against")
    records: list[dict[str, Any]] = []
    failures: list[CuberayError] = []
    for file in files:
        try:
            records += [_record(doc, str(file), plat, tenant) for doc in load_documents(file)]
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


def _record(doc: Any, file: str, plat: Platform | None, tenant: str | None) -> dict[str, Any]:
    if isinstance(doc, Platform):
        tenants = ", ".join(t.name for t in doc.tenants)
        pools = len(doc.spec.node_pools)
        summary = f"Platform {doc.metadata.name}, {len(doc.tenants)} tenants: {tenants}; {pools} node pools"
        return {"file": file, "kind": "Platform", "name": doc.metadata.name, "summary": summary}
    if plat is not None:
        if tenant:
            doc = doc.with_tenant(tenant)
        elif doc.tenant is None:  # as at submit: the user's only tenant
            doc = doc.with_tenant(plat.resolve_tenant(getpass.getuser()).name)
        check_job(plat, doc, file=file)
    workers = str(doc.min_workers) if doc.min_workers == doc.max_workers else f"{doc.min_workers}-{doc.max_workers}"
    per_worker = format_resources(doc.worker_request().resources)
    where = f" in {doc.tenant}" if doc.tenant else ""
    return {"file": file, "kind": doc.kind, "name": doc.name, "tenant": doc.tenant, "workers": workers,
            "per_worker": per_worker, "summary": f"{doc.kind} {doc.name}{where}, {workers} workers x {per_worker}"}


@spec_app.command("schema")
def schema(
    kind: SchemaKind = typer.Option(SchemaKind.job, "--kind", "-k", help="job (any job kind) or platform."),
    output: Optional[str] = typer.Option(
        None, "--output", "-o", metavar="FORMAT|FILE",
        help="json (default) or yaml to stdout, or a file path (.json, or .yaml/.yml for YAML)."),
) -> None:
    """Print the JSON Schema of job or platform files (for yaml-language-server and other editors)."""
    data = job_schema() if kind == SchemaKind.job else platform_schema()
    target = output or "json"
    if target == Format.table.value:
        raise SpecError("a schema cannot be a table; use -o json, -o yaml or -o FILE")
    as_yaml = target == "yaml" or target.endswith((".yaml", ".yml"))
    text = yaml.safe_dump(data, sort_keys=False) if as_yaml else json.dumps(data, indent=2) + "\n"
    if target in ("json", "yaml"):
        print(text, end="")
        return
    path = Path(target)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot write {target}: {exc.strerror}; pick a writable path") from None
    error_console().print(f"wrote the {kind.value} schema to {path}", highlight=False)
