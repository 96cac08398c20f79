"""The planner statistics the controller keeps fresh: without them SQLite sorts the whole jobs table to serve one
page to a member of every tenant (control/planner_stats.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cuberay.platform.api.records import JobRecord
from cuberay.platform.control import planner_stats
from cuberay.platform.control.planner_stats import StatisticsKeeper
from cuberay.platform.control.store import Store, default_url
from cuberay.platform.policy.states import JobState

# What a Jobs page asks for a member of both tenants (store_pages.job_page), as SQLite gets it.
PAGE = ("SELECT jobs.id FROM jobs WHERE jobs.tenant IN ('bulk', 'probe') OR jobs.user = 'bench' "
        "ORDER BY jobs.submit_time DESC, jobs.id DESC LIMIT 50 OFFSET 500")


def add(store: Store, first: int, count: int) -> None:
    spec = {"kind": "Task", "metadata": {"name": "t"}, "spec": {"workers": 1, "command": "true"}}
    store.add_jobs([JobRecord(id=f"bulk-t-{i}", tenant="probe" if i % 100 == 0 else "bulk", name="t", kind="Task",
                              user="bench", spec=spec, state=JobState.QUEUED, priority=0, submit_time=float(i), seq=i)
                    for i in range(first, first + count)], "submitted", ["s"] * count)


def plan(store: Store) -> str:
    with store._engine.connect() as conn:
        return " | ".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + PAGE))


def test_a_refresh_lets_a_page_walk_the_time_index_instead_of_sorting_the_table(tmp_path: Path) -> None:
    with Store(default_url(tmp_path)) as store:
        add(store, 0, 1_000)
        assert "TEMP B-TREE" in plan(store)  # no statistics: every job read and sorted for one page
        assert store.refresh_statistics()
        assert "TEMP B-TREE" not in plan(store) and "ix_jobs_submit_time" in plan(store), plan(store)


def test_statistics_are_refreshed_at_the_first_call_then_when_the_jobs_double(tmp_path: Path) -> None:
    with Store(default_url(tmp_path)) as store:
        add(store, 0, 600)
        assert store.refresh_statistics() and not store.refresh_statistics()
        add(store, 600, 599)
        assert not store.refresh_statistics()
        add(store, 1_199, 1)
        assert store.refresh_statistics()


def test_the_keeper_checks_at_most_once_a_minute_and_counts_refreshes(tmp_path: Path) -> None:
    async def ticks() -> StatisticsKeeper:
        with Store(default_url(tmp_path)) as store:
            keeper = StatisticsKeeper(store)
            for now in (0.0, 1.0, 2.0, planner_stats.CHECK_EVERY_S + 0.5):
                keeper.tend(now)
                await keeper._task
            return keeper

    keeper = asyncio.run(ticks())
    assert keeper.refreshes == 1 and keeper.checked_at == planner_stats.CHECK_EVERY_S + 0.5
