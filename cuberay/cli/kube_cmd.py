"""``cuberay kube render|render-job|validate|apply|status|delete``: the platform on Kubernetes (KubeRay).

``render`` writes one RayCluster per tenant with its Kueue or Volcano quota objects,
``render-job`` a RayJob or RayService for one job spec; both validate what they write.
``validate`` checks any manifests (hand-written too) against the shipped CRD schemas and the
operator-only rules; ``apply``/``status``/``delete`` talk to the cluster of the kubeconfig.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from cuberay.cli import app
from cuberay.cli.output import Format, emit, error_console
from cuberay.errors import SpecError

kube_app = typer.Typer(help="Run the platform on Kubernetes: a KubeRay cluster per tenant, Kueue or Volcano quotas.",
                       no_args_is_help=True)
app.add_typer(kube_app, name="kube")

OUTPUT_HELP = "table | json | yaml."


def _options(scheduler: str, image: Optional[str], autoscaling: bool, redis: Optional[str],
             redis_secret: Optional[str]) -> Any:
    from cuberay.kuberay.labels import DEFAULT_IMAGE, Scheduler
    from cuberay.kuberay.render_cluster import RenderOptions

    try:
        sched = Scheduler(scheduler)
    except ValueError:
        raise SpecError(f"--scheduler {scheduler!r}: use kueue, volcano or none") from None
    return RenderOptions(scheduler=sched, image=image or DEFAULT_IMAGE, autoscaling=autoscaling,
                         redis_address=redis, redis_password_secret=redis_secret)


def _scheduler() -> Any:
    return typer.Option("kueue", "--scheduler", "-s", help="Quota and gang mechanism: kueue | volcano | none.")


def _image() -> Any:
    return typer.Option(None, "--image", help="Ray image with cuberay (default: the repository Dockerfile's, "
                                              "cuberay:<version>).")


def _check(manifests: list[Any]) -> None:
    from cuberay.kuberay.validate import errors, validate_objects

    problems = errors(validate_objects([m.obj for m in manifests]))
    if problems:
        raise SpecError("the rendered manifests break rules:\n  " + "\n  ".join(map(str, problems)))


@kube_app.command("render")
def render(
    platform: Path = typer.Option(..., "--platform", "-p", metavar="FILE", help="Platform file (tenants, pools)."),
    scheduler: str = _scheduler(),
    image: Optional[str] = _image(),
    out: Optional[Path] = typer.Option(None, "--out", metavar="DIR",
                                       help="Write the files here (one per tenant, cluster.yaml, README.md)."),
    output: Format = typer.Option(Format.table, "--output", "-o",
                                  help="What to print: table (the objects), yaml (the manifests, commented), json."),
    autoscaling: bool = typer.Option(True, "--autoscaling/--no-autoscaling",
                                     help="Ray autoscaler v2 between minReplicas and maxReplicas."),
    redis: Optional[str] = typer.Option(None, "--redis", metavar="HOST:PORT",
                                        help="GCS fault tolerance with this external Redis."),
    redis_secret: Optional[str] = typer.Option(None, "--redis-password-secret", metavar="NAME",
                                               help="Secret (key 'password') in each tenant namespace."),
) -> None:
    """Render a RayCluster per tenant plus the quota objects of the scheduler; exit 2 if a rule is broken."""
    from cuberay.kuberay.manifest import to_yaml, write_files
    from cuberay.kuberay.render import all_manifests, render_platform
    from cuberay.platform.spec import load_platform

    files = render_platform(load_platform(platform), _options(scheduler, image, autoscaling, redis, redis_secret))
    _check(all_manifests(files))
    if out is not None:
        written = write_files(files, out)
        error_console().print(f"wrote {len(written)} files to {out}: {', '.join(p.name for p in written)}. "
                              f"Next: `cuberay kube apply {out}` (cluster.yaml first).", highlight=False)
    _print(files, output, to_yaml)
    if output == Format.table:
        from cuberay.kuberay.render_cluster import CONSOLE_PORT

        error_console().print(f"Each tenant's head serves cuberay's web console and HTTP API on port {CONSOLE_PORT} "
                              f"(container port 'console', in its head Service too): `kubectl -n TENANT "
                              f"port-forward svc/TENANT-head-svc {CONSOLE_PORT}`, then open "
                              f"http://127.0.0.1:{CONSOLE_PORT}/.", highlight=False, soft_wrap=True)


def _print(files: dict[str, Any], output: Format, to_yaml: Any) -> None:
    """The rendered objects: a table of them, or the manifests as YAML (with comments) or JSON."""
    manifests = [(name, m) for name, content in files.items() if not isinstance(content, str) for m in content]
    if output == Format.yaml:
        print(to_yaml([m for _, m in manifests]), end="")
    elif output == Format.json:
        emit([m.obj for _, m in manifests], output)
    else:
        emit([{"file": name, "kind": m.kind, "namespace": m.namespace or "", "name": m.name}
              for name, m in manifests], output, columns=["file", "kind", "namespace", "name"])


@kube_app.command("quotas")
def quotas(
    platform: Path = typer.Option(..., "--platform", "-p", metavar="FILE", help="Platform file (tenants, pools)."),
    output: Format = typer.Option(Format.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Each tenant's quota per node pool (what Kueue flavors and worker groups get), and the worker replicas."""
    from cuberay.kuberay.quantities import pool_fabric, quantities
    from cuberay.platform.policy.pool_shares import platform_shares
    from cuberay.platform.spec import load_platform

    def text(vector: Any, pool: Any) -> str:
        return ", ".join(f"{k} {v}" for k, v in quantities(vector, pool_fabric(pool)).items()) or "-"

    rows = [{"tenant": s.tenant, "pool": s.pool.name, "guaranteed": text(s.guaranteed, s.pool),
             "max": text(s.max, s.pool), "min_replicas": s.min_replicas, "max_replicas": s.max_replicas,
             "source": "pool_quotas" if s.explicit else "split by capacity"}
            for shares in platform_shares(load_platform(platform)).values() for s in shares]
    emit(rows, output, columns=list(rows[0]) if rows else None)


@kube_app.command("render-job")
def render_job(
    file: Path = typer.Argument(..., metavar="JOB.yaml", help="A job spec of a kind with a Kubernetes form."),
    platform: Path = typer.Option(..., "--platform", "-p", metavar="FILE", help="Platform file."),
    tenant: Optional[str] = typer.Option(None, "--tenant", "-t", help="Tenant (default: the spec's)."),
    scheduler: str = _scheduler(),
    image: Optional[str] = _image(),
    out: Optional[Path] = typer.Option(None, "--out", metavar="FILE", help="Write the manifests (YAML) here."),
    output: Format = typer.Option(Format.table, "--output", "-o",
                                  help="What to print: table (the objects), yaml (the manifests, commented), json."),
) -> None:
    """Render a job in its kind's Kubernetes form: a RayJob (TrainJob, Task) or a RayService (ServeApp); exit 2 on a
    spec error (or a kind without one), 3 if it cannot fit."""
    from cuberay.kuberay.manifest import to_yaml
    from cuberay.kuberay.render_job import render_job as render
    from cuberay.platform.spec import load_platform, load_spec

    job = load_spec(file)
    if tenant:
        job = job.with_tenant(tenant)
    manifests = render(load_platform(platform), job, _options(scheduler, image, job.min_workers != job.max_workers,
                                                              None, None))
    _check(manifests)
    if out is not None:
        out.write_text(to_yaml(manifests), encoding="utf-8")
        error_console().print(f"wrote {out}. Next: `cuberay kube apply {out}`.", highlight=False)
    _print({out.name if out else "-": manifests}, output, to_yaml)


def _objects(target: Path) -> list[dict[str, Any]]:
    from cuberay.kuberay.validate import (
        errors,
        load_objects,
        manifest_files,
        validate_objects,
    )

    objs: list[dict[str, Any]] = []
    problems = []
    for path in manifest_files(target):
        found = load_objects(path)
        problems += errors(validate_objects(found, str(path)))
        objs += found
    if problems:
        raise SpecError(f"{len(problems)} problems; fix them first (`cuberay kube validate {target}`):\n  " +
                        "\n  ".join(map(str, problems)))
    return objs


@kube_app.command("validate")
def validate(
    targets: list[Path] = typer.Argument(..., metavar="FILE|DIR...", help="Manifests (YAML), or directories."),
    output: Format = typer.Option(Format.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Check manifests against the KubeRay, Kueue, Volcano and Kubernetes schemas (unknown fields are errors)
    and the rules only the operators enforce. Exit 2 if any is broken."""
    from cuberay.kuberay.validate import errors, validate_path

    count, problems = 0, []
    for target in targets:
        n, found = validate_path(target)
        count, problems = count + n, problems + found
    if output != Format.table:
        emit([p.__dict__ for p in problems], output)
    else:
        for problem in problems:
            print(f"{problem.severity}: {problem}")
    bad = errors(problems)
    if bad:
        raise SpecError(f"{len(bad)} of the {count} objects' checks failed")
    error_console().print(f"ok: {count} objects valid", highlight=False)


def _kube(kubeconfig: Optional[Path], context: Optional[str]) -> Any:
    from cuberay.kuberay.kube_client import Kube, api_client

    return Kube(api_client(str(kubeconfig) if kubeconfig else None, context))


def _kubeconfig() -> Any:
    return typer.Option(None, "--kubeconfig", metavar="FILE", help="Kubeconfig (default: $KUBECONFIG, ~/.kube/config).")


def _context() -> Any:
    return typer.Option(None, "--context", help="Kubeconfig context (default: the current one).")


@kube_app.command("apply")
def apply(
    target: Path = typer.Argument(..., metavar="FILE|DIR", help="Manifests, e.g. the directory `render --out` wrote."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Let the API server check everything, store nothing."),
    kubeconfig: Optional[Path] = _kubeconfig(),
    context: Optional[str] = _context(),
    output: Format = typer.Option(Format.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Server-side apply (field manager cuberay) of validated manifests; applying again changes nothing."""
    from cuberay.kuberay.kube_client import order

    kube = _kube(kubeconfig, context)
    rows = []
    for obj in order(_objects(target)):
        kube.apply(obj, dry_run=dry_run)
        rows.append(_row(obj, "checked (dry run)" if dry_run else "applied"))
    emit(rows, output, columns=["kind", "namespace", "name", "result"])


def _row(obj: dict[str, Any], result: str) -> dict[str, str]:
    meta = obj["metadata"]
    return {"kind": obj["kind"], "namespace": meta.get("namespace") or "", "name": meta["name"], "result": result}


@kube_app.command("status")
def status(
    target: Path = typer.Argument(..., metavar="FILE|DIR", help="The manifests that were applied."),
    kubeconfig: Optional[Path] = _kubeconfig(),
    context: Optional[str] = _context(),
    output: Format = typer.Option(Format.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """State and conditions of the RayClusters, RayJobs and RayServices (present/absent for the rest)."""
    from cuberay.kuberay.kube_client import order, status_row

    kube = _kube(kubeconfig, context)
    rows = [status_row(obj, kube.get(obj)) for obj in order(_objects(target))]
    emit(rows, output, columns=["kind", "namespace", "name", "state", "detail"])


@kube_app.command("delete")
def delete(
    target: Path = typer.Argument(..., metavar="FILE|DIR", help="The manifests to delete."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Let the API server check, delete nothing."),
    kubeconfig: Optional[Path] = _kubeconfig(),
    context: Optional[str] = _context(),
    output: Format = typer.Option(Format.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Delete the objects, namespaced ones first; objects already gone are skipped."""
    from cuberay.kuberay.kube_client import order

    kube = _kube(kubeconfig, context)
    rows = []
    for obj in reversed(order(_objects(target))):
        gone = kube.delete(obj, dry_run=dry_run)
        rows.append(_row(obj, ("would be deleted" if dry_run else "deleted") if gone else "not found"))
    emit(rows, output, columns=["kind", "namespace", "name", "result"])
