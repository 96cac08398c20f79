"""The store against a real database: SQLite in tmp_path, plus any URL in
CUBERAY_TEST_DATABASE_URL (e.g. a scratch PostgreSQL) when that is set."""

from __future__ import annotations

import os
import pickle
import sqlite3
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

from cuberay.errors import CuberayError, NotFoundError, SpecError
from cuberay.platform.api.records import EventRecord, JobRecord
from cuberay.platform.control import pipeline_store  # noqa: F401 - its tables are on the store's metadata
from cuberay.platform.control import tables as tables_mod
from cuberay.platform.control.store import SCHEMA_VERSION, AmbiguousJobError, SchemaVersionError, Store, default_url
from cuberay.platform.policy.states import JobState

EXTERNAL_URL = os.environ.get("CUBERAY_TEST_DATABASE_URL")
# The external backend runs only when configured, so the unit tier shows no skip noise.
BACKENDS = ["sqlite"] + (["external"] if EXTERNAL_URL else [])


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield default_url(tmp_path / "storage")
        return
    assert EXTERNAL_URL
    yield EXTERNAL_URL
    with Store(EXTERNAL_URL) as s:  # leave the scratch database empty for the next test
        tables_mod.Base.metadata.drop_all(s._engine)
        with s._engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with Store(url) as s:
        yield s


def job(seq: int = 1, *, tenant: str = "vision", name: str = "mnist-ddp", submit: float = 1000.0,
        state: JobState = JobState.QUEUED, **extra: Any) -> JobRecord:
    return JobRecord(
        id=f"{tenant}-{name}-{seq}", tenant=tenant, name=name, kind="TrainJob", user="alice",
        spec={"kind": "TrainJob", "metadata": {"name": name},
              "spec": {"workers": 2, "resources": {"cpu": "2", "memory": "8Gi", "gpu": "1(V100)"}}},
        state=state, priority=5, submit_time=submit, seq=seq, **extra)


def test_job_round_trip_returns_plain_picklable_records(store: Store) -> None:
    record = job(allocation=[{"node_id": "n1", "gpu_ids": [0]}, {"node_id": "n2", "gpu_ids": [1]}],
                 start_time=1001.5, attempts=1, reason="admitted: fits on n1,n2", driver="launcher",
                 submission_id="raysubmit_abc", gpus=2.0, attained_gpu_s=12.5)
    store.add_job(record)

    got = store.get_job(record.id)

    assert got == record
    assert type(got) is JobRecord and got.state is JobState.QUEUED
    assert pickle.loads(pickle.dumps(got)) == record


def test_update_job_sets_fields_and_persists(store: Store) -> None:
    store.add_job(job())

    updated = store.update_job("vision-mnist-ddp-1", state=JobState.RUNNING, start_time=5.0,
                               allocation=[{"node_id": "n1"}], attempts=1)
    assert updated.state is JobState.RUNNING and updated.allocation == [{"node_id": "n1"}]
    assert store.get_job("vision-mnist-ddp-1") == updated

    store.update_job("vision-mnist-ddp-1", state="SUCCEEDED", allocation=None, end_time=9.0, message="ok")
    done = store.get_job("vision-mnist-ddp-1")
    assert (done.state, done.allocation, done.end_time, done.message) == (JobState.SUCCEEDED, None, 9.0, "ok")


def test_update_job_rejects_unknown_ids_fields_and_values(store: Store) -> None:
    store.add_job(job())
    with pytest.raises(NotFoundError, match=r"'nope'.*cuberay queue"):
        store.update_job("nope", state=JobState.FAILED)
    with pytest.raises(TypeError, match="cannot set colour"):
        store.update_job("vision-mnist-ddp-1", colour="red")
    with pytest.raises(TypeError, match="cannot set id"):
        store.update_job("vision-mnist-ddp-1", id="other")
    with pytest.raises(ValueError):
        store.update_job("vision-mnist-ddp-1", state="SLEEPING")
    assert store.get_job("vision-mnist-ddp-1").state is JobState.QUEUED


def test_get_job_unknown_id_says_how_to_find_ids(store: Store) -> None:
    with pytest.raises(NotFoundError, match=r"'vision-x-9'.*`cuberay queue`"):
        store.get_job("vision-x-9")


def test_add_job_twice_is_an_error(store: Store) -> None:
    store.add_job(job())
    with pytest.raises(CuberayError, match="already stored"):
        store.add_job(job())


def test_list_jobs_orders_filters_and_limits(store: Store) -> None:
    store.add_job(job(1, submit=30.0, state=JobState.RUNNING))
    store.add_job(job(2, submit=10.0))
    store.add_job(job(1, tenant="nlp", name="bert", submit=20.0, state=JobState.SUCCEEDED))
    store.add_job(job(3, submit=40.0, state=JobState.PREEMPTED))

    assert [r.id for r in store.list_jobs()] == [
        "vision-mnist-ddp-2", "nlp-bert-1", "vision-mnist-ddp-1", "vision-mnist-ddp-3"]
    assert [r.id for r in store.list_jobs(tenant="nlp")] == ["nlp-bert-1"]
    assert [r.id for r in store.list_jobs(states=[JobState.QUEUED, JobState.PREEMPTED])] == [
        "vision-mnist-ddp-2", "vision-mnist-ddp-3"]
    assert [r.id for r in store.list_jobs(tenant="vision", states=["RUNNING"])] == ["vision-mnist-ddp-1"]
    assert [r.id for r in store.list_jobs(limit=2)] == ["vision-mnist-ddp-1", "vision-mnist-ddp-3"]
    assert store.list_jobs(states=[]) == []


def test_find_job_by_id_and_by_unique_name(store: Store) -> None:
    store.add_job(job(1, state=JobState.SUCCEEDED))
    store.add_job(job(2, state=JobState.RUNNING))
    store.add_job(job(1, name="resnet", state=JobState.FAILED))

    assert store.find_job("vision-mnist-ddp-1").state is JobState.SUCCEEDED
    assert store.find_job("mnist-ddp").id == "vision-mnist-ddp-2"  # the unfinished one wins
    assert store.find_job("resnet").id == "vision-resnet-1"  # only finished ones: unique among all
    with pytest.raises(NotFoundError, match=r"'gpt'.*cuberay queue"):
        store.find_job("gpt")


def test_find_job_ambiguous_names_list_the_candidates(store: Store) -> None:
    store.add_job(job(1, state=JobState.QUEUED))
    store.add_job(job(2, state=JobState.RUNNING))
    store.add_job(job(1, name="resnet", state=JobState.SUCCEEDED))
    store.add_job(job(2, name="resnet", state=JobState.CANCELLED, submit=2000.0))

    with pytest.raises(AmbiguousJobError, match=r"matches 2 jobs: vision-mnist-ddp-1 \(QUEUED\), "
                                                r"vision-mnist-ddp-2 \(RUNNING\); give the full job id"):
        store.find_job("mnist-ddp")
    with pytest.raises(SpecError, match="vision-resnet-1 .*vision-resnet-2"):
        store.find_job("resnet")


def test_next_seq_counts_per_tenant_and_name(store: Store) -> None:
    assert store.next_seq("vision", "mnist-ddp") == 1
    store.add_job(job(1))
    store.add_job(job(2))
    store.add_job(job(7, name="resnet"))
    assert store.next_seq("vision", "mnist-ddp") == 3
    assert store.next_seq("vision", "resnet") == 8
    assert store.next_seq("nlp", "mnist-ddp") == 1


def test_add_jobs_stores_many_with_one_event_each_or_none(store: Store) -> None:
    store.add_jobs([job(seq) for seq in range(1, 1001)], "submitted", [f"copy {i}" for i in range(1000)])
    assert store.next_seq("vision", "mnist-ddp") == 1001
    assert store.get_job("vision-mnist-ddp-500") == job(500)
    assert [(e.kind, e.message) for e in store.events("vision-mnist-ddp-7")] == [("submitted", "copy 6")]
    with pytest.raises(Exception):  # one id already stored: the whole batch is refused, nothing half-added
        store.add_jobs([job(1001), job(1000)], "submitted", ["new", "again"])
    assert store.next_seq("vision", "mnist-ddp") == 1001 and store.events("vision-mnist-ddp-1001") == []


def test_events_round_trip_filter_and_keep_the_latest(store: Store) -> None:
    store.add_event("node_joined", "node n1 joined with GPU=4", time=1.0)
    first = store.add_event("submitted", "submitted by alice", job_id="vision-mnist-ddp-1", time=2.0)
    store.add_event("admitted", "placed on n1", job_id="vision-mnist-ddp-1", time=3.0)
    store.add_event("submitted", "submitted by bob", job_id="nlp-bert-1", time=3.0)

    assert first == EventRecord(id=first.id, time=2.0, job_id="vision-mnist-ddp-1", kind="submitted",
                                message="submitted by alice")
    assert [e.kind for e in store.events()] == ["node_joined", "submitted", "admitted", "submitted"]
    assert [e.message for e in store.events(job_id="vision-mnist-ddp-1")] == [
        "submitted by alice", "placed on n1"]
    assert [e.message for e in store.events(limit=2)] == ["placed on n1", "submitted by bob"]
    stamped = store.add_event("node_lost", "node n1 lost")
    assert stamped.time > 1e9 and stamped.job_id is None


def test_finished_jobs_are_succeeded_and_failed_only(store: Store) -> None:
    store.add_job(job(1, state=JobState.SUCCEEDED, start_time=1.0, end_time=50.0))
    store.add_job(job(2, state=JobState.FAILED, start_time=1.0, end_time=150.0))
    store.add_job(job(3, state=JobState.CANCELLED, start_time=1.0, end_time=150.0))
    store.add_job(job(4, state=JobState.RUNNING, start_time=1.0))
    store.add_job(job(5, state=JobState.REJECTED))

    assert [r.id for r in store.finished_jobs()] == ["vision-mnist-ddp-1", "vision-mnist-ddp-2"]
    assert [r.id for r in store.finished_jobs(since=100.0)] == ["vision-mnist-ddp-2"]


def test_tenants_upsert(store: Store) -> None:
    store.upsert_tenants({"vision": {"max": {"gpu": 8}}, "nlp": {"max": {"gpu": 4}}})
    store.upsert_tenants({"vision": {"max": {"gpu": 16}}})
    assert store.tenants() == {"nlp": {"max": {"gpu": 4}}, "vision": {"max": {"gpu": 16}}}


def test_reopen_keeps_everything(url: str) -> None:
    with Store(url) as first:
        first.upsert_tenants({"vision": {"guaranteed": {"gpu": 4}}})
        first.add_job(job(1, state=JobState.RUNNING, allocation=[{"node_id": "n1"}]))
        first.add_event("started", "running", job_id="vision-mnist-ddp-1", time=5.0)

    with Store(url) as again:
        assert again.get_job("vision-mnist-ddp-1").allocation == [{"node_id": "n1"}]
        assert again.list_jobs(states=[JobState.RUNNING])[0].id == "vision-mnist-ddp-1"
        assert [e.message for e in again.events()] == ["running"]
        assert again.tenants() == {"vision": {"guaranteed": {"gpu": 4}}}
        assert again.next_seq("vision", "mnist-ddp") == 2


def test_schema_version_mismatch_names_database_versions_and_fix(tmp_path: Path) -> None:
    url = default_url(tmp_path)
    Store(url).close()
    with sqlite3.connect(tmp_path / "cuberay.db") as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))

    with pytest.raises(SchemaVersionError) as caught:
        Store(url)
    text = str(caught.value)
    assert str(tmp_path / "cuberay.db") in text
    assert f"schema version {SCHEMA_VERSION + 1}; this cuberay expects {SCHEMA_VERSION}" in text
    assert "platform.spec.database" in text
    assert isinstance(caught.value, CuberayError)


def test_foreign_database_with_our_table_names_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY)")
    with pytest.raises(SchemaVersionError, match="no schema_version table.*new file"):
        Store(f"sqlite:///{path}")


def test_default_url_expands_home_and_uses_wal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    url = default_url("~/cuberay-storage/nested")
    path = tmp_path / "cuberay-storage" / "nested" / "cuberay.db"
    assert url == f"sqlite:///{path}"
    Store(url).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_in_memory_sqlite_shares_one_database_across_calls() -> None:
    with Store("sqlite://") as s:
        s.add_job(job())
        assert s.get_job("vision-mnist-ddp-1").name == "mnist-ddp"


@pytest.mark.parametrize("dialect", [postgresql.dialect(), mysql.dialect()], ids=["postgresql", "mysql"])
def test_schema_compiles_for_other_databases(dialect: Any) -> None:
    """No SQLite-only DDL: every table and index compiles for PostgreSQL and MySQL."""
    for table in tables_mod.Base.metadata.sorted_tables:
        ddl = str(CreateTable(table).compile(dialect=dialect))
        assert table.name in ddl
        for index in table.indexes:
            str(CreateIndex(index).compile(dialect=dialect))
    assert {"schema_version", "tenants", "jobs", "events", "serve_changes", "usage_samples", "pipelines",
            "pipeline_runs", "pipeline_steps", "trials"} == set(tables_mod.Base.metadata.tables)


def test_unusable_database_urls_say_how_to_write_one() -> None:
    with pytest.raises(SpecError, match="'not a url' is not usable.*sqlite:////abs/path"):
        Store("not a url")
    with pytest.raises(SpecError, match="'nosuchdb://h/db' is not usable"):
        Store("nosuchdb://h/db")


def test_serve_changes_record_who_when_what_per_app(url: str) -> None:
    with Store(url) as s:
        s.add_serve_change("vision-web-1", "alice", "deploy", {"v1": 90, "v2": 10})
        s.add_serve_change("vision-other-1", "bob", "deploy", {"v1": 100})
        s.add_serve_change("vision-web-1", "cuberay", "rollback", {"v1": 90, "v2": 10}, "automatic rollback: errors")
    with Store(url) as s:  # persisted, and an existing database gets the table without a migration
        changes = s.serve_changes("vision-web-1")
    assert [(c.user, c.action, c.weights) for c in changes] == [
        ("alice", "deploy", {"v1": 90, "v2": 10}), ("cuberay", "rollback", {"v1": 90, "v2": 10})]
    assert changes[0].time <= changes[1].time and changes[1].note.startswith("automatic rollback")
    assert pickle.loads(pickle.dumps(changes[0])) == changes[0]


def test_usage_history_is_the_peak_worker_of_succeeded_runs_newest_first(tmp_path: Path) -> None:
    with Store(default_url(tmp_path)) as s:
        for seq, (state, end) in enumerate([(JobState.SUCCEEDED, 100.0), (JobState.FAILED, 200.0),
                                            (JobState.SUCCEEDED, 300.0), (JobState.SUCCEEDED, 5.0)], start=1):
            s.add_job(job(seq))
            s.update_job(f"vision-mnist-ddp-{seq}", state=state, end_time=end, attempts=1)
            s.add_usage(f"vision-mnist-ddp-{seq}", 1, 0, float(seq), 10.0 * seq)
            s.add_usage(f"vision-mnist-ddp-{seq}", 1, 1, 0.5, 1.0)
        s.add_usage("vision-mnist-ddp-3", 0, 0, 99.0, 99.0)  # an earlier, failed attempt: not counted
        assert s.usage_history("vision", "mnist-ddp", since=50.0) == [(300.0, 3.0, 30.0), (100.0, 1.0, 10.0)]
        assert s.usage_history("vision", "mnist-ddp", since=0.0, limit=1) == [(300.0, 3.0, 30.0)]
        assert s.usage_history("vision", "other", since=0.0) == []
