"""Alembic migrations of the control-plane database (run by ``cuberay.platform.control.schema``).

A new table or column gets a revision in ``versions/`` whose ``down_revision`` is
the current head; ``Store`` upgrades every database it opens to all heads, so a
module that adds its own tables to the store's metadata adds its own revision.
"""
