"""Bringing a control-plane database to this cuberay's schema: Alembic revisions in ``migrations/``.

Every database a :class:`~cuberay.platform.control.store.Store` opens is upgraded
to all Alembic heads (several modules may add their own tables, each with its
own revision). A database from before Alembic carries a ``schema_version`` row
(1, 2 or 3): its columns are first brought to version 3 by the legacy steps
below, then the baseline revision ``0003`` adds the tables it lacks and the
later revisions run as for any database. Queue and history stay in place.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, inspect, text
from sqlalchemy.engine import Engine

from cuberay.errors import CuberayError

# The number older cuberays read from the schema_version table: they refuse a database above their own.
SCHEMA_VERSION = 6
# Column steps of the pre-Alembic schema: key N takes a database from version N to N+1, in one transaction.
LEGACY_STEPS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE jobs ADD COLUMN checkpoint_time DOUBLE PRECISION",),  # last checkpoint a run reported
    2: ("ALTER TABLE jobs ADD COLUMN correction JSON",),  # requested vs corrected resources, and why
}
MIGRATIONS = Path(__file__).with_name("migrations")


class SchemaVersionError(CuberayError):
    """The database was written by a cuberay with another schema, or by something else."""

    exit_code = 1


def config(metadata: MetaData | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["metadata"] = metadata
    return cfg


def heads() -> set[str]:
    """The newest revision of each migration branch this cuberay knows."""
    return set(ScriptDirectory.from_config(config()).get_heads())


def upgrade(engine: Engine, metadata: MetaData, where: str) -> None:
    """Upgrade the database behind ``engine`` to every head; SchemaVersionError if it is not ours or newer."""
    present = set(inspect(engine).get_table_names())
    if "alembic_version" not in present and "schema_version" not in present and present & set(metadata.tables):
        raise SchemaVersionError(
            f"database {where} has tables {', '.join(sorted(present & set(metadata.tables)))} but no "
            f"schema_version table, so it was not written by cuberay; point platform.spec.database at a new "
            f"file or an empty database")
    with engine.begin() as conn:
        _refuse_newer(conn, where, present)
        if "alembic_version" not in present and "schema_version" in present:
            _legacy_steps(conn, where)
        cfg = config(metadata)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "heads")


def current(engine: Engine) -> set[str]:
    """The revisions the database is at (empty for a database without Alembic's table)."""
    with engine.connect() as conn:
        return set(MigrationContext.configure(conn).get_current_heads())


def _refuse_newer(conn, where: str, present: set[str]) -> None:
    if "schema_version" in present:
        version = conn.execute(text("SELECT version FROM schema_version WHERE id = 1")).scalar()
        if version is not None and version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"database {where} has schema version {version}; this cuberay expects {SCHEMA_VERSION}. "
                f"Upgrade cuberay, or point platform.spec.database at a new file")
    if "alembic_version" in present:
        unknown = [rev for rev in MigrationContext.configure(conn).get_current_heads() if not _known(rev)]
        if unknown:
            raise SchemaVersionError(
                f"database {where} is at schema revision {', '.join(unknown)}, which this cuberay does not "
                f"know (a newer cuberay wrote it); upgrade cuberay, or point platform.spec.database at a new file")


def _known(revision: str) -> bool:
    try:
        return ScriptDirectory.from_config(config()).get_revision(revision) is not None
    except Exception:  # noqa: BLE001 - Alembic's CommandError / ResolutionError both mean "not one of ours"
        return False


def _legacy_steps(conn, where: str) -> None:
    version = conn.execute(text("SELECT version FROM schema_version WHERE id = 1")).scalar()
    if version is None or version < min(LEGACY_STEPS):
        raise SchemaVersionError(
            f"database {where} has schema version {version}, older than any this cuberay can upgrade; "
            f"point platform.spec.database at a new file")
    while version in LEGACY_STEPS:
        for statement in LEGACY_STEPS[version]:
            conn.exec_driver_sql(statement)
        version += 1
        conn.execute(text("UPDATE schema_version SET version = :v WHERE id = 1"), {"v": version})
