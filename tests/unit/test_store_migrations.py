"""Store schema upgrades with Alembic: from the schema cuberay shipped as version 3 (a SQL dump written by that
code, tests/unit/data/store_schema_v3.sql), from the older versions 1 and 2, and refusal of newer databases."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData

from cuberay.platform.api.records import JobRecord
from cuberay.platform.control import schema
from cuberay.platform.control import store as store_mod
from cuberay.platform.control import tables as tables_mod
from cuberay.platform.control.store import SchemaVersionError, Store
from cuberay.platform.policy.states import JobState
from cuberay.platform.spec import load_spec

V3_DUMP = Path(__file__).parent / "data" / "store_schema_v3.sql"


def v3_database(tmp_path: Path) -> Path:
    path = tmp_path / "cuberay.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(V3_DUMP.read_text())
    return path


STORE_TABLES = {"schema_version", "tenants", "jobs", "usage_samples", "events", "serve_changes"}


def schema_diff(url: str) -> list:
    """Differences between the migrated database and the store's models (its own tables: another module's tables
    on the same metadata are compared by that module's revision tests)."""
    ours = MetaData()
    for table in tables_mod.Base.metadata.sorted_tables:
        if table.name in STORE_TABLES:
            table.to_metadata(ours)
    with Store(url) as s, s._engine.connect() as conn:
        return [d for d in compare_metadata(MigrationContext.configure(conn), ours)
                if not (isinstance(d, tuple) and d[0] == "remove_table" and d[1].name not in STORE_TABLES)]


def test_a_new_database_is_created_by_the_migrations_and_matches_the_models(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    assert schema_diff(url) == []
    with Store(url) as s:
        assert schema.current(s._engine) == schema.heads()
    with sqlite3.connect(tmp_path / "new.db") as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchone() == (schema.SCHEMA_VERSION,)


def test_upgrade_from_the_shipped_version_3_keeps_queue_and_history(tmp_path: Path) -> None:
    path = v3_database(tmp_path)
    url = f"sqlite:///{path}"
    with Store(url) as s:
        states = {r.id: r.state for r in s.list_jobs()}
        assert states == {"research-hello-gang-1": JobState.SUCCEEDED, "research-hello-gang-2": JobState.RUNNING,
                          "research-hello-gang-3": JobState.QUEUED, "research-hello-gang-4": JobState.PREEMPTED}
        running = s.get_job("research-hello-gang-2")
        assert running.allocation == [{"node_id": "a" * 56}] and running.checkpoint_time == 1004.0
        assert running.request_id is None
        assert [r.id for r in s.finished_jobs()] == ["research-hello-gang-1"]
        assert len(s.events(limit=None)) == 7 and s.events("research-hello-gang-4")[-1].kind == "preempted"
        assert s.serve_changes("research-web-1")[0].weights == {"v1": 100.0}
        assert s.tenants()["research"]["members"] == ["alice"]
        assert s.next_seq("research", "hello-gang") == 5
        load_spec(s.get_job("research-hello-gang-3").spec)  # the controller can resume it
        # the new column works on the upgraded database
        s.add_job(s.get_job("research-hello-gang-3").model_copy(
            update={"id": "research-hello-gang-5", "seq": 5, "request_id": "r-1"}))
        assert s.find_request("alice", "r-1").id == "research-hello-gang-5"
        assert schema.current(s._engine) == schema.heads()
    assert schema_diff(url) == []
    with Store(url) as s:  # opening again is a no-op
        assert len(s.list_jobs()) == 5


@pytest.mark.parametrize("version", [1, 2])
def test_older_pre_alembic_databases_are_upgraded_too(tmp_path: Path, version: int) -> None:
    path = v3_database(tmp_path)
    with sqlite3.connect(path) as conn:  # make it a database as that version wrote it
        conn.execute("ALTER TABLE jobs DROP COLUMN correction")
        if version == 1:
            conn.execute("ALTER TABLE jobs DROP COLUMN checkpoint_time")
        conn.execute("DROP TABLE usage_samples")
        conn.execute("DROP TABLE serve_changes")
        conn.execute("UPDATE schema_version SET version = ?", (version,))
    url = f"sqlite:///{path}"
    with Store(url) as s:
        assert s.get_job("research-hello-gang-3").state == JobState.QUEUED
        assert s.update_job("research-hello-gang-3", checkpoint_time=5.0).checkpoint_time == 5.0
        s.add_usage("research-hello-gang-1", 1, 0, 1.0, 1.0)
    # version 1's step wrote DOUBLE PRECISION, which SQLite reports as REAL: the same storage, another name
    assert [d for d in schema_diff(url) if not (isinstance(d, list) and d[0][0] == "modify_type")] == []


def test_a_database_from_a_newer_cuberay_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    Store(url).close()
    with sqlite3.connect(tmp_path / "new.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'ffff-from-the-future'")
    with pytest.raises(SchemaVersionError, match="revision ffff-from-the-future.*upgrade cuberay"):
        Store(url)


def test_a_failed_upgrade_leaves_the_database_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = v3_database(tmp_path)
    with sqlite3.connect(path) as conn:  # a version 2 database: step 2 runs, then a broken step 3
        conn.execute("ALTER TABLE jobs DROP COLUMN correction")
        conn.execute("UPDATE schema_version SET version = 2")
    monkeypatch.setitem(schema.LEGACY_STEPS, 3, ("ALTER TABLE jobs ADD COLUMN broken NOSUCHSYNTAX (",))
    with pytest.raises(Exception, match="incomplete input"):
        Store(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchone() == (2,)
        assert "correction" not in {r[1] for r in conn.execute("PRAGMA table_info(jobs)")}
        assert conn.execute("SELECT COUNT(*) FROM jobs").fetchone() == (4,)
        assert "alembic_version" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}


def test_request_ids_are_unique_per_user(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'db.db'}") as s:
        base = dict(tenant="t", name="n", kind="Task", spec={}, state=JobState.QUEUED, priority=0,
                    submit_time=1.0)
        s.add_job(JobRecord(id="t-n-1", seq=1, user="alice", request_id="x", **base))
        s.add_job(JobRecord(id="t-n-2", seq=2, user="bob", request_id="x", **base))  # another user's
        s.add_job(JobRecord(id="t-n-3", seq=3, user="alice", **base))
        s.add_job(JobRecord(id="t-n-4", seq=4, user="alice", **base))  # no request id: never a collision
        with pytest.raises(store_mod.CuberayError, match="already submitted request id 'x'"):
            s.add_job(JobRecord(id="t-n-5", seq=5, user="alice", request_id="x", **base))
        assert s.find_request("alice", "x").id == "t-n-1" and s.find_request("carol", "x") is None


def test_prefix_owner_finds_another_pair_with_the_same_id_prefix(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'db.db'}") as s:
        base = dict(kind="Task", user="u", spec={}, state=JobState.SUCCEEDED, priority=0, submit_time=1.0, seq=1)
        s.add_job(JobRecord(id="a-b-c-1", tenant="a-b", name="c", **base))
        assert s.prefix_owner("a", "b-c").tenant == "a-b"  # 'a' + 'b-c' would also be 'a-b-c'
        assert s.prefix_owner("a-b", "c") is None  # the same pair is no clash
        assert s.prefix_owner("a", "b") is None and s.prefix_owner("a", "b-c-d") is None
