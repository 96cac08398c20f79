"""A search's trials as its driver reports them: the console's Tune page and `cuberay tune trials` read them.

A table only: a cuberay from before it reads and writes everything else as before, so the schema version
older cuberays check stays 6.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "trials",
        sa.Column("job_id", sa.String(255), primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True),
        sa.Column("trial_id", sa.String(255), primary_key=True),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("value", sa.Double, nullable=True),
        sa.Column("iterations", sa.Integer, nullable=False),
        sa.Column("history", sa.JSON, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("time", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("trials")
