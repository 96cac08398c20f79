"""Job commands: ``submit``, ``run``, ``queue``, ``status``, ``logs``, ``cancel``, ``history export``.

Shaped like ``ray job``: submit prints the job id and a "Next steps" block,
``--wait`` follows the job and exits 1 only if it FAILED (a CANCELLED job
exits 0, as a STOPPED Ray Job does). Every command reads the platform through
``cuberay.platform.client``; the caller is ``CUBERAY_USER`` or the login name.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

import typer

from cuberay.cli import app, progress, views
from cuberay.cli.output import Format, emit, error_console, out_option, output_option
from cuberay.errors import CuberayError, NotFoundError, SpecError
from cuberay.platform import client
from cuberay.platform.api.records import MAX_PAGE, JobRecord
from cuberay.platform.policy.states import JobState

if TYPE_CHECKING:
    from cuberay.platform.spec import Platform


def _tenant() -> Any:
    return typer.Option(None, "--tenant", "-t", help="Tenant to submit to (default: the spec's, else your only one).")


@app.command()
def submit(
    file: Path = typer.Argument(..., metavar="FILE", help="Job spec (YAML) of any job kind."),
    wait: bool = typer.Option(False, "--wait", "-w",
                              help="Follow the job until it ends; exit 1 if it FAILED, 0 if it SUCCEEDED or was "
                                   "CANCELLED."),
    tenant: Optional[str] = _tenant(),
    request_id: Optional[str] = typer.Option(
        None, "--request-id", metavar="ID",
        help="Your own id for this submission: submitting again with the same id prints the same job, so a "
             "submit whose answer was lost is safe to retry."),
    count: int = typer.Option(
        1, "--count", "-n", min=1, metavar="N",
        help="Queue N copies of the job in one call (ids <tenant>-<name>-<seq>, consecutive); prints the "
             "first and last id. Not with --wait or --request-id."),
    output: Format = output_option(),
) -> None:
    """Queue the job in FILE and print its id. Exit 2 on a spec error, 3 if admission refuses it."""
    if count > 1:
        _submit_copies(file, count, tenant, wait=wait, request_id=request_id)
        return
    ref = client.submit(file, tenant, user=client.current_user(), request_id=request_id)
    record = announce_and_follow(ref, output, wait, chosen=lambda: client.tenant_choice(file, tenant))
    if record is None:
        return
    if output != Format.table:
        emit(record, output)
    else:
        print(f"Job '{ref.id}' {JobState(record.state).value.lower()}")
    raise_for_end(record)


def _submit_copies(file: Path, count: int, tenant: str | None, *, wait: bool, request_id: str | None) -> None:
    if wait or request_id:
        raise SpecError("--count takes neither --wait nor --request-id (they follow or name one job); follow the "
                        "copies with `cuberay queue`, or submit one job at a time")
    refs = client.submit_copies(file, count, tenant, user=client.current_user())
    where = placed(refs[0].tenant, lambda: client.tenant_choice(file, tenant))
    print(f"Queued {len(refs)} jobs: {refs[0].id} .. {refs[-1].id} in {where}")


def announce_and_follow(ref: Any, output: Format, wait: bool,
                        chosen: Callable[[], Mapping[str, str]] | None = None) -> JobRecord | None:
    """Say the job was submitted, to which tenant and why (``chosen()``: "tenant vision (CUBERAY_TENANT)"), and
    whether its resources were corrected; with ``wait``, follow it to its end.

    Returns the final record when waiting, else None (the record was printed for ``-o json|yaml``).
    """
    err = error_console()
    if output == Format.table:
        record = client.status(ref.id)
        if ref.repeat:
            print(f"Job '{ref.id}' was submitted before with this request id: nothing new was queued "
                  f"(it is {record.state.value.lower()})")
        else:
            print(f"Job '{ref.id}' submitted" + (f" to {placed(ref.tenant, chosen)}" if chosen is not None else ""))
        correction = record.correction
        if correction:
            from cuberay.platform.control.correcting import describe

            err.print(f"note: {describe(correction)}", highlight=False, soft_wrap=True)
        err.print(next_steps(ref.id, ref.tenant), highlight=False)
    if not wait:
        if output != Format.table:
            emit(client.status(ref.id), output)
        return None
    return progress.watch(ref.id, err)


def placed(tenant: str, chosen: Callable[[], Mapping[str, str]]) -> str:
    """"tenant vision (CUBERAY_TENANT)": where a submitted job went and why. The reason is asked after the submit,
    so it is said only when it names the job's tenant (a repeated request id returns an earlier job, which may be
    elsewhere), and never fails the command: the job is queued already."""
    try:
        choice = chosen()
    except CuberayError:
        return f"tenant {tenant}"
    return choice["text"] if choice.get("tenant") == tenant else f"tenant {tenant}"


def next_steps(job_id: str, tenant: str) -> str:
    """The block ``ray job submit`` prints, with cuberay's commands."""
    rule = "-" * 40
    return (f"{rule}\nNext steps\n{rule}\n"
            f"  Query the status of the job:\n    cuberay status {job_id}\n"
            f"  Follow its logs:\n    cuberay logs {job_id} -f\n"
            f"  See where it is in the queue:\n    cuberay queue --tenant {tenant}\n"
            f"  Cancel it:\n    cuberay cancel {job_id}")


def raise_for_end(record: JobRecord) -> None:
    """Map a terminal record to the exit code: FAILED -> 1, REJECTED -> 3, else 0."""
    progress.raise_for_end(record, "job", f"read its log with `cuberay logs {record.id}`")


@app.command()
def run(
    file: Path = typer.Argument(..., metavar="FILE", help="Job spec (YAML) to run in this process."),
    tenant: Optional[str] = _tenant(),
) -> None:
    """Be the job's driver: register FILE, wait in the queue, then run it here.

    For `ray job submit -- cuberay run job.yaml`: the Ray Job is the driver; it
    prints its queue position and why it waits until admitted, then runs with
    the allocation the controller chose. It always waits (it is the job's driver): it returns when the job
    ends, exit 1 if it FAILED.
    """
    def on_wait(entry: client.QueueEntry | None, record: JobRecord) -> None:
        # Plain lines: a Ray Job's log is a file, not a terminal.
        print(f"{record.id}: {progress.waiting_line(record, entry)}", flush=True)

    from cuberay.platform import runner  # the job driver's module: only this command needs it

    record = runner.run_file(file, tenant, user=client.current_user(), on_wait=on_wait)
    print(f"Job '{record.id}' {JobState(record.state).value.lower()}", flush=True)
    raise_for_end(record)


TABLE_ROWS = 100  # a table shows this many queue rows unless --limit says otherwise


@app.command()
def queue(
    tenant: Optional[str] = typer.Option(None, "--tenant", "-t", help="Only this tenant."),
    limit: Optional[int] = typer.Option(
        None, "--limit", "-n", min=1, max=MAX_PAGE,
        help=f"Rows to show, 1-{MAX_PAGE} (default: {TABLE_ROWS} in a table, every row with -o json/yaml)."),
    offset: int = typer.Option(0, "--offset", min=0, help="Rows to skip first: the next page starts at offset+limit."),
    output: Format = output_option(),
) -> None:
    """Running and waiting jobs, running first, then waiting ones in admission order with position and reason."""
    if limit is None and output != Format.table:
        emit(views.plain(client.queue(tenant, offset)), output)  # a script's read: every row from offset
        return
    shown = limit or TABLE_ROWS
    page = client.queue_page(tenant, offset, shown)
    if offset and offset >= page.total:
        raise SpecError(f"--offset {offset} is past the end of the queue ({page.total:,} rows"
                        f"{f' in tenant {tenant}' if tenant else ''}): give an offset from 0 to {max(page.total - 1, 0)}")
    if output != Format.table:
        emit(views.plain(page.entries), output)
        return
    if not page.entries:
        error_console().print("no running or waiting jobs" + (f" in tenant {tenant}" if tenant else ""))
        return
    emit(views.queue_rows(page.entries), output, columns=views.QUEUE_COLUMNS)
    if offset + shown < page.total:
        more = f"--offset {offset + shown}" + (f" --limit {shown}" if limit else "")
        error_console().print(f"rows {offset + 1:,}-{offset + len(page.entries):,} of {page.total:,}: "
                              f"{more} for the next {shown}, -o json for every row")


@app.command()
def status(
    job: str = typer.Argument(..., metavar="JOB", help="Job id (or a unique job name)."),
    output: Format = output_option(),
) -> None:
    """A job's state, reason and message. Exit 4 if there is no such job."""
    record = client.status(job)
    if output != Format.table:
        emit(record, output)
        return
    emit(views.job_detail(record), output, columns=("field", "value"))


@app.command()
def logs(
    job: str = typer.Argument(..., metavar="JOB", help="Job id (or a unique job name)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the job ends."),
) -> None:
    """The job's log, every attempt oldest first (a Ray Job's log, or a small job's file); -f follows it."""
    for chunk in client.logs(job, follow=follow):
        sys.stdout.write(chunk)
        sys.stdout.flush()


@app.command()
def cancel(
    job: str = typer.Argument(..., metavar="JOB", help="Job id (or a unique job name)."),
    output: Format = output_option(),
) -> None:
    """Cancel a waiting or running job (its resources are freed). Exit 4 if there is no such job."""
    ended = client.status(job).state.is_terminal  # asked first: a cancelled job's record reads the same after
    record = client.cancel(job)
    if output != Format.table:
        emit(record, output)
        return
    state = JobState(record.state)
    if ended:
        print(f"Job '{record.id}' had already ended ({state.value.lower()}): nothing to cancel")
        return
    print(f"Job '{record.id}' {state.value.lower()}")


history_app = typer.Typer(help="The platform's finished jobs: list them, or export them as a trace.",
                          no_args_is_help=True)
app.add_typer(history_app, name="history")


@history_app.command("list")
def history_list(
    tenant: Optional[str] = typer.Option(None, "--tenant", "-t", help="Only this tenant."),
    limit: int = typer.Option(20, "--limit", "-n", min=1, max=MAX_PAGE, help="How many, the most recently submitted."),
    output: Format = output_option(),
) -> None:
    """Ended jobs you may read (succeeded, failed, cancelled, rejected), newest last: the ids `status` and
    `logs` take. Running and waiting jobs: `cuberay queue`."""
    ended = [state for state in JobState if state.is_terminal]
    records = client.api().list_jobs(tenant, [state.value for state in ended], limit)
    if output != Format.table:
        emit(records, output)
        return
    if not records:
        error_console().print("no ended jobs you may read" + (f" in tenant {tenant}" if tenant else ""))
        return
    emit([views.job_row(r) for r in records], output, columns=views.JOB_COLUMNS)


@history_app.command("export")
def history_export(
    out: Optional[Path] = out_option("CSV file to write (default: stdout).", metavar="FILE"),
    platform: Optional[Path] = typer.Option(
        None, "--platform", "-p", metavar="FILE",
        help="Platform file whose database to read (default: configs/platform.yaml, as `cuberay up`)."),
) -> None:
    """Write finished jobs as a trace in the simulator's generic CSV format (replay with `cuberay sim`); reads
    the platform's database, no controller needed."""
    from cuberay.platform.control.history import export_trace
    from cuberay.platform.control.store import Store
    from cuberay.platform.spec import load_platform  # every job kind's models: only this command reads a platform

    url = _database_url(load_platform(client.find_platform_file(platform)))
    with Store(url) as store:
        records = store.finished_jobs()
    if out is None:
        count = export_trace(records, sys.stdout)
    else:
        try:
            with open(out, "w", encoding="utf-8", newline="") as handle:
                count = export_trace(records, handle)
        except OSError as exc:
            raise SpecError(f"cannot write {out}: {exc.strerror}; pick a writable --out path") from None
    error_console().print(f"exported {count} finished job(s)" + ("" if out is None else f" to {out}"),
                          highlight=False)


def _database_url(plat: Platform) -> str:
    """The platform's database URL; a SQLite file that is not there means the platform never ran."""
    from sqlalchemy.engine import make_url

    url = plat.database_url()
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        db = Path(parsed.database).expanduser()
        if not db.is_file():
            raise NotFoundError(f"no platform database at {db}: the platform has not run with this "
                                f"platform file yet; run `cuberay up` first or pass the right --platform")
        url = f"sqlite:///{db}"
    return url
