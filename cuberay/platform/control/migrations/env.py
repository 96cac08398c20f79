"""Alembic environment: runs on the connection ``schema.upgrade`` opened (no alembic.ini, no URL here)."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=context.config.attributes.get("metadata"),
                  render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
