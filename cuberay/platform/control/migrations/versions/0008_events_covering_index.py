"""The overview's counts of the last hour from an index alone: the events' time index also holds each event's kind
and job, so counting the hour's events (100,000 at a deep backlog) reads no table row.

An index only: a cuberay from before it reads and writes everything as before, so the schema version older
cuberays check stays 6.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_events_time", table_name="events")
    op.create_index("ix_events_time_kind_job", "events", ["time", "kind", "job_id"])


def downgrade() -> None:
    op.drop_index("ix_events_time_kind_job", table_name="events")
    op.create_index("ix_events_time", "events", ["time"])
