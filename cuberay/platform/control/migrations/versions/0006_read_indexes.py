"""The console's reads at size: indexes for a jobs page newest first (all, one kind, one user's unfinished jobs)
and for the events of the last hour.

At 100,000 jobs a jobs page sorted the whole table and the overview read 1,000 events to count the last hour's
(benchmarks/RESULTS.md, "The web console at a 100,000-job backlog"). Also records schema version 6.

Revision ID: 0006
Revises: 0005
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

INDEXES = (
    ("ix_jobs_submit_time", "jobs", ["submit_time", "id"]),      # a page of jobs, newest first
    ("ix_jobs_kind_submit_time", "jobs", ["kind", "submit_time"]),  # ... of some kinds
    ("ix_jobs_user_state", "jobs", ["user", "state"]),           # a user's unfinished jobs (the queue's user filter)
    ("ix_events_time", "events", ["time"]),                       # the events since a time (the overview's counts)
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)
    op.execute("UPDATE schema_version SET version = 6 WHERE id = 1")


def downgrade() -> None:
    for name, table, _ in INDEXES:
        op.drop_index(name, table_name=table)
    op.execute("UPDATE schema_version SET version = 5 WHERE id = 1")
