"""What the console reads at any backlog, in SQL: one page of the jobs table, and counts of recent events.

A mixin of :class:`cuberay.platform.control.store.Store`. The count and the page are two queries in one
transaction, so the page and its "n in all" agree; only the page's rows are turned into records, so a read
costs one page of records however many jobs the table holds. Indexes (migration 0006) keep the sort and the
"since" bounds off a scan of the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from sqlalchemy import func, select, text

from cuberay.errors import SpecError
from cuberay.platform.api.records import MAX_PAGE, JobRecord
from cuberay.platform.control.tables import EventRow, JobRow
from cuberay.platform.policy.states import JobState

STATS_FIRST_ADDS = 250  # after the first refresh, the next once this many jobs are added (or the table doubles)


@dataclass(frozen=True)
class QueueRow:
    """What a queue line shows of a stored job: its record's columns without the spec and the bookkeeping (a page
    of 1,000 of them reads in a fifth of the time whole records take)."""

    id: str
    tenant: str
    name: str
    kind: str
    user: str
    state: JobState
    submit_time: float
    reason: str


@dataclass(frozen=True)
class JobFilter:
    """What a Jobs page asks for; every field left None matches everything."""

    tenant: str | None = None
    user: str | None = None
    kinds: tuple[str, ...] | None = None
    states: tuple[str, ...] | None = None
    name: str | None = None              # a part of the job's name or id, in any case
    since: float | None = None           # submitted at or after (epoch s)


def check_page(offset: int, limit: int) -> None:
    """Refuse a page outside what the tables serve, saying what was asked and what may be."""
    if not isinstance(offset, int) or offset < 0:
        raise SpecError(f"offset {offset!r} is not a row: give a whole number from 0 (the first row)")
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise SpecError(f"limit {limit!r} is not a page size: give 1 to {MAX_PAGE} rows per call, and page on "
                        f"with offset")


class JobPages:
    """Paged reads of the jobs table; the Store supplies ``_sessions``."""

    _sessions: Any
    _engine: Any
    jobs_added = 0                  # jobs this process added since its last refresh of the planner statistics
    _stats_rows: int | None = None  # jobs in the table at that refresh (None: none yet)

    @property
    def statistics_in_thread(self) -> bool:
        """Whether a refresh may run beside the controller's writes: not on SQLite (control/planner_stats.py)."""
        return self._engine.dialect.name != "sqlite"

    def statistics_due(self) -> bool:
        """True if this process never refreshed the planner statistics, or has since doubled the jobs table."""
        return self._stats_rows is None or self.jobs_added >= max(self._stats_rows, STATS_FIRST_ADDS)

    def refresh_statistics(self) -> int:
        """Refresh the query planner's statistics of the jobs table (``ANALYZE jobs``); how many jobs it holds.
        Without them SQLite sorts the whole jobs table to serve a page (control/planner_stats.py)."""
        with self._sessions() as session:
            session.execute(text("ANALYZE jobs"))
            rows = session.scalar(select(func.count()).select_from(JobRow)) or 0
            session.commit()
        return rows

    def statistics_refreshed(self, rows: int, added: int) -> None:
        """Record a refresh that counted ``rows`` jobs, started when ``jobs_added`` was ``added`` (call it from
        the thread that adds jobs: the counter is that thread's)."""
        self._stats_rows, self.jobs_added = rows, self.jobs_added - added

    def job_page(self, wanted: JobFilter, offset: int, limit: int,
                 visible: tuple[set[str], str] | None = None) -> tuple[int, list[JobRecord]]:
        """(how many jobs match, the ``limit`` of them from ``offset`` on, newest first)."""
        check_page(offset, limit)
        where = list(_conditions(wanted, visible))
        count = _counted(where)
        page = (select(JobRow).where(*where).order_by(JobRow.submit_time.desc(), JobRow.id.desc())
                .offset(offset).limit(limit))
        with self._sessions() as session:
            total = session.scalar(count) or 0
            rows = list(session.scalars(page))
        return total, [JobRecord.model_validate(r) for r in rows]

    def count_jobs(self, wanted: JobFilter, visible: tuple[set[str], str] | None = None) -> int:
        """How many jobs match ``wanted`` (of those ``visible``): the count a page reports, without the page."""
        with self._sessions() as session:
            return session.scalar(_counted(list(_conditions(wanted, visible)))) or 0

    def event_counts(self, since: float, visible: tuple[set[str], str] | None = None) -> dict[str, int]:
        """How many events of each kind happened at or after ``since`` (of the jobs ``visible`` only, if given)."""
        query = select(EventRow.kind, func.count()).where(EventRow.time >= since).group_by(EventRow.kind)
        if visible is not None:
            # A join, not `job_id IN (the readable jobs)`: that set is built whole first, 100,000 ids for a member
            # of a deep backlog's tenant; the join looks each of the hour's events' job up by its key.
            query = query.join(JobRow, JobRow.id == EventRow.job_id).where(readable(visible))
        with self._sessions() as session:
            return {kind: int(n) for kind, n in session.execute(query)}

    def queue_rows(self, ids: list[str]) -> dict[str, QueueRow]:
        """What a queue line shows of ``ids`` (those that exist), by id: one query for a page's rows."""
        if not ids:
            return {}
        columns = (JobRow.id, JobRow.tenant, JobRow.name, JobRow.kind, JobRow.user, JobRow.state,
                   JobRow.submit_time, JobRow.reason)
        with self._sessions() as session:
            rows = list(session.execute(select(*columns).where(JobRow.id.in_(ids))))
        return {r.id: QueueRow(r.id, r.tenant, r.name, r.kind, r.user, JobState(r.state), r.submit_time,
                               r.reason or "") for r in rows}


def readable(visible: tuple[set[str], str]) -> Any:
    """The SQL condition of what ``visible`` (tenants, user) may read: jobs of those tenants, or the user's own."""
    tenants, user = visible
    return JobRow.tenant.in_(sorted(tenants)) | (JobRow.user == user)


def readable_by(visible: tuple[set[str], str] | None, rec: JobRecord | QueueRow) -> bool:
    """:func:`readable` for one record already read (None: everything is readable)."""
    return visible is None or rec.tenant in visible[0] or rec.user == visible[1]


def _counted(where: list[Any]) -> Any:
    """The count of the jobs that meet ``where``."""
    return select(func.count()).select_from(JobRow).where(*where)


def _conditions(wanted: JobFilter, visible: tuple[set[str], str] | None) -> Iterable[Any]:
    if visible is not None:
        yield readable(visible)
    if wanted.tenant:
        yield JobRow.tenant == wanted.tenant
    if wanted.user:
        yield JobRow.user == wanted.user
    if wanted.kinds:
        yield JobRow.kind.in_(list(wanted.kinds))
    if wanted.states:
        yield JobRow.state.in_([_state(s) for s in wanted.states])
    if wanted.name:
        # autoescape: a name's own % or _ is a character to find, not a wildcard
        yield JobRow.name.icontains(wanted.name, autoescape=True) | JobRow.id.icontains(wanted.name, autoescape=True)
    if wanted.since is not None:
        yield JobRow.submit_time >= wanted.since


def _state(name: str) -> str:
    try:
        return JobState(name).value
    except ValueError:
        raise SpecError(f"state {name!r} is not a job state: use one of "
                        f"{', '.join(s.value for s in JobState)}") from None
