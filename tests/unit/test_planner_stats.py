"""The planner statistics the controller keeps fresh: without them SQLite sorts the whole jobs table to serve one
page to a member of every tenant (control/planner_stats.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cuberay.platform.api.records import JobRecord
from cuberay.platform.control import planner_stats
from cuberay.platform.control.planner_stats import StatisticsKeeper
from cuberay.platform.control.store import Store, default_url
from cuberay.platform.policy.states import JobState

# What a Jobs page asks for a member of both tenants (store_pages.job_page), as SQLite gets it.
PAGE = ("SELECT jobs.id FROM jobs WHERE jobs.tenant IN ('bulk', 'probe') OR jobs.user = 'bench' "
        "ORDER BY jobs.submit_time DESC, jobs.id DESC LIMIT 50 OFFSET 500")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(default_url(tmp_path)) as s:
        yield s


def add(store: Store, first: int, count: int) -> None:
    spec = {"kind": "Task", "metadata": {"name": "t"}, "spec": {"workers": 1, "command": "true"}}
    store.add_jobs([JobRecord(id=f"bulk-t-{i}", tenant="probe" if i % 100 == 0 else "bulk", name="t", kind="Task",
                              user="bench", spec=spec, state=JobState.QUEUED, priority=0, submit_time=float(i), seq=i)
                    for i in range(first, first + count)], "submitted", ["s"] * count)


def plan(store: Store) -> str:
    with store._engine.connect() as conn:
        return " | ".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + PAGE))


def test_a_refresh_lets_a_page_walk_the_time_index_instead_of_sorting_the_table(store: Store) -> None:
    add(store, 0, 1_000)
    assert "TEMP B-TREE" in plan(store)  # no statistics: every job read and sorted for one page
    store.refresh_statistics()
    assert "TEMP B-TREE" not in plan(store) and "ix_jobs_submit_time" in plan(store), plan(store)


def test_statistics_are_due_at_first_then_each_time_this_process_doubles_the_jobs(store: Store) -> None:
    add(store, 0, 600)
    assert store.statistics_due()
    added = store.jobs_added
    store.statistics_refreshed(store.refresh_statistics(), added)
    assert not store.statistics_due() and store.jobs_added == 0
    add(store, 600, 599)
    assert not store.statistics_due()
    add(store, 1_199, 1)
    assert store.statistics_due()


def test_the_keeper_refreshes_when_due_and_backs_off_after_a_failure(store: Store, monkeypatch) -> None:  # noqa: ANN001
    async def tick(keeper: StatisticsKeeper, now: float) -> None:
        keeper.tend(now)
        if keeper._task is not None:
            await asyncio.gather(keeper._task, return_exceptions=True)

    async def run() -> StatisticsKeeper:
        keeper = StatisticsKeeper(store)
        await tick(keeper, 0.0)
        await tick(keeper, 1.0)  # not due again: nothing added
        assert keeper.refreshes == 1
        add(store, 0, 300)
        monkeypatch.setattr(store, "refresh_statistics", lambda: 1 / 0)
        await tick(keeper, 2.0)
        assert keeper.failed_at is not None and keeper.refreshes == 1
        monkeypatch.undo()
        await tick(keeper, 3.0)  # backing off
        assert keeper.refreshes == 1
        keeper.failed_at -= planner_stats.RETRY_AFTER_S
        await tick(keeper, 4.0)
        return keeper

    keeper = asyncio.run(run())
    assert keeper.refreshes == 2 and keeper.failed_at is None and not store.statistics_due()


def test_beside_a_database_that_allows_it_the_refresh_runs_in_a_thread() -> None:
    import threading

    class Postgres:  # what the keeper asks of a PostgreSQL store
        statistics_in_thread = True
        jobs_added = 7
        ran_in: str | None = None
        recorded: tuple[int, int] | None = None

        def statistics_due(self) -> bool:
            return self.ran_in is None

        def refresh_statistics(self) -> int:
            self.ran_in = threading.current_thread().name
            return 1_000

        def statistics_refreshed(self, rows: int, added: int) -> None:
            self.recorded = (rows, added)

    async def run() -> StatisticsKeeper:
        keeper = StatisticsKeeper(Postgres())
        keeper.tend(0.0)
        await keeper._task
        return keeper

    keeper = asyncio.run(run())
    assert keeper.refreshes == 1 and keeper.store.ran_in != threading.main_thread().name
    assert keeper.store.recorded == (1_000, 7)  # recorded on the loop, with the count taken before the thread ran
