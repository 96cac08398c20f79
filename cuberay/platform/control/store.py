"""Persistence of the control plane: tenants, jobs and events in a SQL database.

SQLite under the platform's storage dir by default; any SQLAlchemy URL (e.g.
``postgresql+psycopg://...``) by configuration, so only portable SQL is used.
The controller actor is the single writer: every call is one short transaction
on its own session, and callers get plain pydantic records back, never ORM
objects, so the records pickle across Ray actor boundaries.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable

from sqlalchemy import (
    create_engine,
    event,
    func,
    insert,
    select,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError
from sqlalchemy.orm import sessionmaker
from sqlalchemy.pool import StaticPool

from cuberay.errors import CuberayError, NotFoundError, SpecError
from cuberay.platform.api.records import EventRecord, JobRecord, ServeChangeRecord
from cuberay.platform.control import schema
from cuberay.platform.control.schema import SCHEMA_VERSION, SchemaVersionError  # noqa: F401 (public API)
from cuberay.platform.control.store_pages import JobPages, readable
from cuberay.platform.control.store_trials import TrialRows
from cuberay.platform.control.tables import (
    Base,
    EventRow,
    JobRow,
    ServeChangeRow,
    TenantRow,
    UsageRow,
)
from cuberay.platform.policy.states import JobState

DB_FILENAME = "cuberay.db"


class AmbiguousJobError(SpecError):
    """A job reference (a name) matches more than one job."""


# ---------------------------------------------------------------- records (returned to callers)








_JOB_FIELDS = frozenset(JobRecord.model_fields)
_ROW_ONLY = frozenset({"driver_token"})  # the SHA-256 of the driver's secret (control/guard.py)
_TERMINAL_DONE = (JobState.SUCCEEDED.value, JobState.FAILED.value)


def default_url(storage_dir: str | Path) -> str:
    """SQLite URL of the platform database under ``storage_dir`` (``~`` expanded; dir created)."""
    directory = Path(storage_dir).expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / DB_FILENAME}"


def _make_engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() != "sqlite":
            return create_engine(parsed, pool_pre_ping=True)
        in_memory = parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory"
        engine = create_engine(
            parsed,
            # The controller calls from Ray's worker threads; the session never outlives a call.
            connect_args={"check_same_thread": False},
            # An in-memory database exists per connection, so all sessions must share one.
            poolclass=StaticPool if in_memory else None,
        )
    except (ArgumentError, NoSuchModuleError) as exc:
        raise SpecError(f"database URL {url!r} is not usable: {exc}; write a SQLAlchemy URL such as "
                        f"sqlite:////abs/path/cuberay.db or postgresql+psycopg://user@host/db") from None
    except ModuleNotFoundError as exc:
        raise SpecError(f"database URL {make_url(url).render_as_string(hide_password=True)} needs the Python "
                        f"module {exc.name!r}, which is not installed; install the driver (e.g. "
                        f"`pip install 'cuberay[postgres]'` for postgresql+psycopg://) or use the default "
                        f"SQLite file") from None

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the sqlite3 module, open transactions (below): the module commits before DDL,
        # so a schema upgrade would not be one transaction. SQLAlchemy's documented pysqlite recipe.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")  # readers (CLI) never block the controller
        cursor.execute("PRAGMA busy_timeout=5000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine


class Store(JobPages, TrialRows):
    """The controller's database. One instance per process; each call is one transaction."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._engine = _make_engine(url)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        self._where = self._engine.url.render_as_string(hide_password=True)
        try:
            self._open_schema()
        except BaseException:
            self._engine.dispose()
            raise

    @property
    def masked_url(self) -> str:
        """The database URL with its password masked: what any message or answer may show."""
        return self._where

    def __repr__(self) -> str:
        return f"Store({self._where!r})"

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ schema

    def _open_schema(self) -> None:
        schema.upgrade(self._engine, Base.metadata, self._where)

    # ------------------------------------------------------------ tenants

    def upsert_tenants(self, tenants: dict[str, dict[str, Any]]) -> None:
        """Insert or replace each tenant's spec (a model dump); others stay as they are."""
        now = time.time()
        with self._sessions.begin() as session:
            for name, spec in tenants.items():
                session.merge(TenantRow(name=name, spec=spec, updated_at=now))

    def tenants(self) -> dict[str, dict[str, Any]]:
        """Every stored tenant spec, by name."""
        with self._sessions() as session:
            return {row.name: row.spec for row in session.scalars(select(TenantRow).order_by(TenantRow.name))}

    # ------------------------------------------------------------ jobs

    def next_seq(self, tenant: str, name: str) -> int:
        """1 + the highest sequence number so far for ``tenant``/``name`` (single writer)."""
        with self._sessions() as session:
            top = session.scalar(
                select(func.max(JobRow.seq)).where(JobRow.tenant == tenant, JobRow.name == name))
        return (top or 0) + 1

    def prefix_owner(self, tenant: str, name: str) -> JobRecord | None:
        """A job of another tenant/name pair whose id starts the same: '<tenant>-<name>' (tenant 'a-b', name
        'c' and tenant 'a', name 'b-c' are both 'a-b-c'), which also names its Ray Serve app."""
        prefix = f"{tenant}-{name}"
        query = (select(JobRow).where(JobRow.tenant + "-" + JobRow.name == prefix, JobRow.tenant != tenant)
                 .order_by(JobRow.submit_time.desc()).limit(1))
        with self._sessions() as session:
            row = session.scalar(query)
            return None if row is None else JobRecord.model_validate(row)

    def add_job(self, record: JobRecord, events: Iterable[tuple[str, str]] = (),
                driver_token: str | None = None) -> None:
        """A new job and its events (kind, message), in one transaction; ``driver_token``: its driver's hash."""
        try:
            with self._sessions.begin() as session:
                session.add(JobRow(**_row_values(record), driver_token=driver_token))
                now = _now()
                session.add_all(EventRow(time=now, job_id=record.id, kind=kind, message=message)
                                for kind, message in events)
            self.jobs_added += 1
        except IntegrityError:
            if record.request_id is not None and self.find_request(record.user, record.request_id):
                raise CuberayError(
                    f"user {record.user!r} already submitted request id {record.request_id!r}; look it up "
                    f"with find_request() before adding a job for it") from None
            raise CuberayError(
                f"job id {record.id!r} is already stored; ids come from next_seq(), which must be "
                f"called for every new job") from None

    def add_jobs(self, records: list[JobRecord], event_kind: str, messages: list[str]) -> None:
        """Many new jobs and one event each, in one transaction (a bulk insert: 100k rows take seconds)."""
        now = _now()
        with self._sessions.begin() as session:
            session.execute(insert(JobRow), [_row_values(r) for r in records])
            session.execute(insert(EventRow), [{"time": now, "job_id": r.id, "kind": event_kind, "message": m}
                                                for r, m in zip(records, messages, strict=True)])
        self.jobs_added += len(records)

    def find_request(self, user: str, request_id: str) -> JobRecord | None:
        """The job ``user`` submitted with ``request_id``, if any."""
        with self._sessions() as session:
            row = session.scalar(select(JobRow).where(JobRow.user == user, JobRow.request_id == request_id))
            return None if row is None else JobRecord.model_validate(row)

    def update_job(self, job_id: str, *, event: tuple[str, str] | None = None, **fields: Any) -> JobRecord:
        """Set ``fields`` on one job (validated as a :class:`JobRecord`) and return the new record.

        ``event`` (kind, message) is recorded for the job in the same transaction: a state change and the
        event that explains it are stored together or not at all, with one commit (one ``fsync``) for both.
        """
        row_only = {k: fields.pop(k) for k in _ROW_ONLY & set(fields)}  # stored, never handed to callers
        unknown = sorted(set(fields) - (_JOB_FIELDS - {"id"}))
        if unknown:
            raise TypeError(f"update_job() cannot set {', '.join(unknown)}; settable fields are "
                            f"{', '.join(sorted(_JOB_FIELDS - {'id'}))}")
        with self._sessions.begin() as session:
            row = session.get(JobRow, job_id)
            if row is None:
                raise self._not_found(job_id)
            # Validate the whole record before writing, so a bad value never reaches the table.
            updated = JobRecord.model_validate({**JobRecord.model_validate(row).model_dump(), **fields})
            values = _row_values(updated)
            for key in fields:
                setattr(row, key, values[key])
            for key, value in row_only.items():
                setattr(row, key, value)
            if event is not None:
                session.add(EventRow(time=_now(), job_id=job_id, kind=event[0], message=event[1]))
            return updated

    def get_job(self, job_id: str) -> JobRecord:
        with self._sessions() as session:
            row = session.get(JobRow, job_id)
            if row is None:
                raise self._not_found(job_id)
            return JobRecord.model_validate(row)

    def find_job(self, ref: str) -> JobRecord:
        """The job whose id is ``ref``, else the one job named ``ref`` (see :func:`pick_named`)."""
        try:
            return self.get_job(ref)
        except NotFoundError:
            return pick_named(ref, self.jobs_named(ref))

    def jobs_named(self, name: str) -> list[JobRecord]:
        """Every job called ``name``, oldest first."""
        with self._sessions() as session:
            return [JobRecord.model_validate(r) for r in session.scalars(
                select(JobRow).where(JobRow.name == name).order_by(JobRow.submit_time, JobRow.id))]

    def has_job(self, job_id: str) -> bool:
        with self._sessions() as session:
            return session.get(JobRow, job_id) is not None

    def job_of_token(self, digest: str) -> JobRecord | None:
        """The job whose current driver secret has SHA-256 ``digest`` (control/guard.py), if any."""
        with self._sessions() as session:
            row = session.scalar(select(JobRow).where(JobRow.driver_token == digest))
            return None if row is None else JobRecord.model_validate(row)

    def list_jobs(self, tenant: str | None = None, states: Iterable[JobState | str] | None = None,
                  limit: int | None = None, visible: tuple[set[str], str] | None = None) -> list[JobRecord]:
        """Jobs ordered by submit time; with ``limit``, the most recently submitted ``limit`` of them.

        ``visible`` (tenants, user): only jobs of those tenants or submitted by that user.
        """
        query = select(JobRow)
        if tenant is not None:
            query = query.where(JobRow.tenant == tenant)
        if visible is not None:
            query = query.where(readable(visible))
        if states is not None:
            query = query.where(JobRow.state.in_([JobState(s).value for s in states]))
        return [JobRecord.model_validate(r) for r in self._latest(query, JobRow.submit_time, JobRow.id, limit)]

    def finished_jobs(self, since: float | None = None) -> list[JobRecord]:
        """SUCCEEDED and FAILED jobs (ended at or after ``since`` if given), by submit time."""
        query = select(JobRow).where(JobRow.state.in_(_TERMINAL_DONE))
        if since is not None:
            query = query.where(JobRow.end_time >= since)
        return [JobRecord.model_validate(r) for r in self._latest(query, JobRow.submit_time, JobRow.id, None)]

    # ------------------------------------------------------------ events

    def add_event(self, kind: str, message: str, job_id: str | None = None,
                  time: float | None = None) -> EventRecord:
        row = EventRow(time=_now() if time is None else time, job_id=job_id, kind=kind, message=message)
        with self._sessions.begin() as session:
            session.add(row)
            session.flush()
            return EventRecord.model_validate(row)

    def events(self, job_id: str | None = None, limit: int | None = 100,
               visible: tuple[set[str], str] | None = None) -> list[EventRecord]:
        """The latest ``limit`` events (of one job if given), oldest first.

        ``visible`` (tenants, user): only events of jobs of those tenants or submitted by that user (events
        about no job, such as nodes joining, are left out).
        """
        query = select(EventRow)
        if job_id is not None:
            query = query.where(EventRow.job_id == job_id)
        if visible is not None:
            jobs = select(JobRow.id).where(readable(visible))
            query = query.where(EventRow.job_id.in_(jobs))
        return [EventRecord.model_validate(r) for r in self._latest(query, EventRow.time, EventRow.id, limit)]

    # ------------------------------------------------------------ serving changes

    def add_serve_change(self, app: str, user: str, action: str, weights: dict[str, float],
                         note: str = "") -> ServeChangeRecord:
        row = ServeChangeRow(time=_now(), app=app, user=user, action=action, weights=dict(weights), note=note)
        with self._sessions.begin() as session:
            session.add(row)
            session.flush()
            return ServeChangeRecord.model_validate(row)

    def serve_changes(self, app: str, limit: int | None = 100) -> list[ServeChangeRecord]:
        """The latest ``limit`` traffic changes of one app, oldest first."""
        query = select(ServeChangeRow).where(ServeChangeRow.app == app)
        return [ServeChangeRecord.model_validate(r)
                for r in self._latest(query, ServeChangeRow.time, ServeChangeRow.id, limit)]

    # ------------------------------------------------------------ usage (resource correction)

    def add_usage(self, job_id: str, attempt: int, worker: int, cpu: float, memory_gib: float,
                  when: float | None = None) -> None:
        """One worker's peak of one attempt (a repeated report replaces the earlier one)."""
        job = self.get_job(job_id)
        with self._sessions.begin() as session:
            session.merge(UsageRow(job_id=job_id, attempt=attempt, worker=worker, tenant=job.tenant,
                                    name=job.name, time=_now() if when is None else when, cpu=cpu,
                                    memory_gib=memory_gib))

    def usage_history(self, tenant: str, name: str, since: float, limit: int = 10) -> list[tuple[float, float, float]]:
        """(end time, peak cores, peak GiB) of the newest ``limit`` SUCCEEDED runs of tenant/name ending after
        ``since``: the busiest worker of the attempt that succeeded, newest first."""
        peak = (select(JobRow.end_time, func.max(UsageRow.cpu), func.max(UsageRow.memory_gib))
                .join(JobRow, (JobRow.id == UsageRow.job_id) & (JobRow.attempts == UsageRow.attempt))
                .where(UsageRow.tenant == tenant, UsageRow.name == name,
                       JobRow.state == JobState.SUCCEEDED.value, JobRow.end_time >= since)
                .group_by(JobRow.id, JobRow.end_time).order_by(JobRow.end_time.desc()).limit(limit))
        with self._sessions() as session:
            return [(float(t), float(c), float(m)) for t, c, m in session.execute(peak)]

    # ------------------------------------------------------------ helpers

    def _latest(self, query: Any, key: Any, tiebreak: Any, limit: int | None) -> list[Any]:
        """Rows of ``query`` in ascending ``key`` order, keeping only the last ``limit``."""
        if limit is None:
            query = query.order_by(key, tiebreak)
        else:
            query = query.order_by(key.desc(), tiebreak.desc()).limit(limit)
        with self._sessions() as session:
            rows = list(session.scalars(query))
        return rows if limit is None else rows[::-1]

    def _not_found(self, job_id: str) -> NotFoundError:
        return NotFoundError(f"no job has the id {job_id!r}; `cuberay queue` lists waiting and running jobs "
                             f"and `cuberay history list` ended ones")


def pick_named(ref: str, named: list[JobRecord]) -> JobRecord:
    """The one job among ``named`` (jobs called ``ref``): the unfinished one first, then any.

    Several matches raise :class:`AmbiguousJobError` listing them; none, NotFoundError.
    """
    for candidates in ([r for r in named if not r.state.is_terminal], named):
        if len(candidates) == 1:
            return candidates[0]
        if len(candidates) > 1:
            listing = ", ".join(f"{r.id} ({r.state.value})" for r in candidates)
            raise AmbiguousJobError(
                f"job name {ref!r} matches {len(candidates)} jobs: {listing}; give the full job id")
    raise NotFoundError(f"no job has the id or name {ref!r}; `cuberay queue` lists waiting and running jobs "
                        f"and `cuberay history list` ended ones")


def _row_values(record: JobRecord) -> dict[str, Any]:
    values = record.model_dump()
    values["state"] = record.state.value
    return values


def _now() -> float:
    return time.time()
