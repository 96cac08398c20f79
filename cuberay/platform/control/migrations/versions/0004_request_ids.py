"""Client-supplied request ids make submit idempotent: one job per (user, request id).

Also records schema version 4 in ``schema_version``, so a cuberay from before
Alembic refuses this database instead of writing jobs without the new column.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("request_id", sa.String(255), nullable=True))
    # NULLs never collide in a unique index (SQLite, PostgreSQL, MySQL): jobs without a request id are free.
    op.create_index("ux_jobs_user_request", "jobs", ["user", "request_id"], unique=True)
    op.execute("UPDATE schema_version SET version = 4 WHERE id = 1")


def downgrade() -> None:
    op.drop_index("ux_jobs_user_request", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("request_id")
    op.execute("UPDATE schema_version SET version = 3 WHERE id = 1")
