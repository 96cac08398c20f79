"""Schema version 3, the schema cuberay shipped before Alembic: creates each of its tables that is missing.

A database from before Alembic has been brought to version 3 by the legacy
column steps (``schema.LEGACY_STEPS``) and may lack the tables that older code
created on demand (``serve_changes``, ``usage_samples``); a new database has none.

Revision ID: 0003
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = None
branch_labels = None
depends_on = None

_NAME = 253
_ID = 255


def _tables() -> dict[str, tuple[tuple, tuple]]:
    """name -> (columns, indexes as (name, columns))."""
    return {
        "schema_version": ((sa.Column("id", sa.Integer, primary_key=True),
                            sa.Column("version", sa.Integer, nullable=False)), ()),
        "tenants": ((sa.Column("name", sa.String(_NAME), primary_key=True),
                     sa.Column("spec", sa.JSON, nullable=False),
                     sa.Column("updated_at", sa.Double, nullable=False)), ()),
        "jobs": ((sa.Column("id", sa.String(_ID), primary_key=True),
                  sa.Column("tenant", sa.String(_NAME), nullable=False),
                  sa.Column("name", sa.String(_NAME), nullable=False),
                  sa.Column("kind", sa.String(32), nullable=False),
                  sa.Column("user", sa.String(_NAME), nullable=False),
                  sa.Column("spec", sa.JSON, nullable=False),
                  sa.Column("state", sa.String(16), nullable=False),
                  sa.Column("priority", sa.Integer, nullable=False),
                  sa.Column("submit_time", sa.Double, nullable=False),
                  sa.Column("seq", sa.Integer, nullable=False),
                  sa.Column("start_time", sa.Double),
                  sa.Column("end_time", sa.Double),
                  sa.Column("attempts", sa.Integer, nullable=False),
                  sa.Column("allocation", sa.JSON(none_as_null=True)),
                  sa.Column("reason", sa.Text, nullable=False),
                  sa.Column("submission_id", sa.String(_ID)),
                  sa.Column("driver", sa.String(16)),
                  sa.Column("attained_gpu_s", sa.Double, nullable=False),
                  sa.Column("gpus", sa.Double, nullable=False),
                  sa.Column("message", sa.Text),
                  sa.Column("checkpoint_time", sa.Double),
                  sa.Column("correction", sa.JSON(none_as_null=True))),
                 (("ix_jobs_tenant_name", ("tenant", "name")), ("ix_jobs_state", ("state",)))),
        "usage_samples": ((sa.Column("job_id", sa.String(_ID), primary_key=True),
                           sa.Column("attempt", sa.Integer, primary_key=True),
                           sa.Column("worker", sa.Integer, primary_key=True),
                           sa.Column("tenant", sa.String(_NAME), nullable=False),
                           sa.Column("name", sa.String(_NAME), nullable=False),
                           sa.Column("time", sa.Double, nullable=False),
                           sa.Column("cpu", sa.Double, nullable=False),
                           sa.Column("memory_gib", sa.Double, nullable=False)),
                          (("ix_usage_tenant_name", ("tenant", "name")),)),
        "events": ((sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                    sa.Column("time", sa.Double, nullable=False),
                    sa.Column("job_id", sa.String(_ID)),
                    sa.Column("kind", sa.String(32), nullable=False),
                    sa.Column("message", sa.Text, nullable=False)),
                   (("ix_events_job_id", ("job_id",)),)),
        "serve_changes": ((sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                           sa.Column("time", sa.Double, nullable=False),
                           sa.Column("app", sa.String(_ID), nullable=False),
                           sa.Column("user", sa.String(_NAME), nullable=False),
                           sa.Column("action", sa.String(32), nullable=False),
                           sa.Column("weights", sa.JSON, nullable=False),
                           sa.Column("note", sa.Text, nullable=False)),
                          (("ix_serve_changes_app", ("app",)),)),
    }


def upgrade() -> None:
    bind = op.get_bind()
    present = set(sa.inspect(bind).get_table_names())
    for name, (columns, indexes) in _tables().items():
        if name in present:
            continue
        op.create_table(name, *columns)
        for index, cols in indexes:
            op.create_index(index, name, list(cols))
    if bind.execute(sa.text("SELECT COUNT(*) FROM schema_version")).scalar() == 0:
        op.execute("INSERT INTO schema_version (id, version) VALUES (1, 3)")


def downgrade() -> None:
    raise NotImplementedError("schema version 3 is the oldest schema cuberay migrates from")
