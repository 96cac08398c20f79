"""The store on a real PostgreSQL server (tests/postgres.py), as on Kubernetes, where the database must outlive
the head pod: every store test that takes a database URL runs here again on PostgreSQL, the migrations upgrade
a database as the first shipped schema (version 3) left it on PostgreSQL, and the paged reads' SQL (counts,
case-insensitive name search with its own escaping) answers as on SQLite."""

from __future__ import annotations

import inspect
import re
from typing import Any, Iterator

import pytest

from cuberay.platform.api.records import JobRecord
from cuberay.platform.control import schema
from cuberay.platform.control.store import Store
from cuberay.platform.control.store_pages import JobFilter
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec
from tests.postgres import PostgresServer
from tests.unit import test_store as unit
from tests.unit.test_store import job, store  # noqa: F401 (store: a fixture, on this module's url)
from tests.unit.test_store_migrations import V3_DUMP, schema_diff

# Every unit test of the store that is given its database (the `url` or `store` fixture) is collected here too,
# where `url` is a fresh PostgreSQL database; tests that build a SQLite file themselves stay in the unit tier.
for _name, _test in vars(unit).items():
    if _name.startswith("test_") and {"url", "store"} & set(inspect.signature(_test).parameters):
        globals()[_name] = _test


@pytest.fixture
def url(postgres: PostgresServer) -> Iterator[str]:
    yield postgres.fresh_url("store")


def test_the_store_runs_on_postgresql_with_psycopg(url: str) -> None:
    with Store(url) as s:
        assert s._engine.dialect.name == "postgresql" and s._engine.dialect.driver == "psycopg"


def v3_on_postgres(server: PostgresServer) -> str:
    """A database as cuberay 3 left it on PostgreSQL: the shipped v3 tables in PostgreSQL's DDL (what
    ``create_all`` compiled there: DOUBLE PRECISION, a quoted "user", SERIAL ids) with the same rows."""
    name = server.create_database("v3")
    sql = V3_DUMP.read_text()
    sql = re.sub(r"\bDOUBLE\b", "DOUBLE PRECISION", sql)
    sql = re.sub(r"^\tuser VARCHAR", '\t"user" VARCHAR', sql, flags=re.M)
    sql = re.sub(r"^\tid INTEGER NOT NULL", "\tid SERIAL NOT NULL", sql, flags=re.M)
    sql = sql.replace("COMMIT;", "SELECT setval(pg_get_serial_sequence('events', 'id'), max(id)) FROM events;\n"
                      "SELECT setval(pg_get_serial_sequence('serve_changes', 'id'), max(id)) FROM serve_changes;\n"
                      "COMMIT;")
    server.psql(sql, database=name)
    return server.url(name)


def test_upgrade_from_the_shipped_version_3_on_postgresql_keeps_queue_and_history(postgres: PostgresServer) -> None:
    url = v3_on_postgres(postgres)
    with Store(url) as s:
        states = {r.id: r.state for r in s.list_jobs()}
        assert states == {"research-hello-gang-1": JobState.SUCCEEDED, "research-hello-gang-2": JobState.RUNNING,
                          "research-hello-gang-3": JobState.QUEUED, "research-hello-gang-4": JobState.PREEMPTED}
        running = s.get_job("research-hello-gang-2")
        assert running.allocation == [{"node_id": "a" * 56}] and running.checkpoint_time == 1004.0
        assert len(s.events(limit=None)) == 7 and s.events("research-hello-gang-4")[-1].kind == "preempted"
        assert s.serve_changes("research-web-1")[0].weights == {"v1": 100.0}
        assert s.tenants()["research"]["members"] == ["alice"]
        assert s.next_seq("research", "hello-gang") == 5
        load_spec(s.get_job("research-hello-gang-3").spec)  # the controller can resume it
        s.add_job(s.get_job("research-hello-gang-3").model_copy(
            update={"id": "research-hello-gang-5", "seq": 5, "request_id": "r-1"}))
        assert s.find_request("alice", "r-1").id == "research-hello-gang-5"
        assert s.add_event("submitted", "again", "research-hello-gang-5").id == 8  # the serial id goes on
        assert schema.current(s._engine) == schema.heads()
    assert schema_diff(url) == []
    with Store(url) as s:  # opening again is a no-op
        assert len(s.list_jobs()) == 5


def test_a_new_postgresql_database_matches_the_models(url: str) -> None:
    assert schema_diff(url) == []
    with Store(url) as s:
        assert schema.current(s._engine) == schema.heads()


def _record(seq: int, **update: Any) -> JobRecord:
    return job(seq).model_copy(update=update)


def test_job_pages_count_filter_and_escape_on_postgresql(url: str) -> None:
    with Store(url) as s:
        s.add_jobs([_record(1, name="Mnist_A", id="vision-Mnist_A-1"),
                    _record(2, name="mnistXa", id="vision-mnistXa-2", submit_time=2000.0),
                    _record(3, name="bert", id="nlp-bert-3", tenant="nlp", user="nina", submit_time=3000.0)],
                   "submitted", ["a", "b", "c"])
        total, page = s.job_page(JobFilter(name="MNIST"), 0, 10)
        assert total == 2 and [r.id for r in page] == ["vision-mnistXa-2", "vision-Mnist_A-1"]  # newest first
        assert s.job_page(JobFilter(name="t_a"), 0, 10)[0] == 1  # '_' is a character, not a wildcard
        assert s.job_page(JobFilter(name="%"), 0, 10)[0] == 0
        assert s.job_page(JobFilter(), 1, 1)[1][0].id == "vision-mnistXa-2"
        assert s.job_page(JobFilter(), 0, 10, visible=({"vision"}, "nina"))[0] == 3  # nina's own nlp job too
        assert s.job_page(JobFilter(), 0, 10, visible=({"vision"}, "zoe"))[0] == 2
        assert s.statistics_due()
        assert s.refresh_statistics() == 3  # ANALYZE jobs in the store's own transaction, as the controller runs it
        s.statistics_refreshed(3, s.jobs_added)
        assert not s.statistics_due()


def test_the_unit_tier_store_tests_are_collected_here() -> None:
    """Guard for the collection loop above: a renamed fixture would silently leave PostgreSQL untested."""
    here = {n for n in globals() if n.startswith("test_")}
    assert {"test_job_round_trip_returns_plain_picklable_records", "test_reopen_keeps_everything",
            "test_update_job_rejects_unknown_ids_fields_and_values"} <= here
    assert len(here) >= 15, sorted(here)
