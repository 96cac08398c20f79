"""Drivers prove who they are: the SHA-256 of each job's current driver secret.

Also records schema version 5 in ``schema_version``, so a cuberay from before it refuses this database
instead of running drivers that cannot authenticate.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("driver_token", sa.String(64), nullable=True))
    op.create_index("ix_jobs_driver_token", "jobs", ["driver_token"])  # a driver's call finds its job by it
    op.execute("UPDATE schema_version SET version = 5 WHERE id = 1")


def downgrade() -> None:
    op.drop_index("ix_jobs_driver_token", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("driver_token")
    op.execute("UPDATE schema_version SET version = 4 WHERE id = 1")
