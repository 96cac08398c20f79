"""The controller actor's concurrency groups: Ray runs each group's methods on a thread and event loop of its own."""

from __future__ import annotations

from cuberay.platform.api.rules import READS

# The actor's concurrency groups and their slots (install.py creates it with them); the rest run on the loop.
# Reads run on a thread of their own, off the admission loop (control/snapshot.py). One group only: Ray starts
# each group's loop in a thread whose target reads the loop variable late, so with two groups the first one's
# loop could go unrun and every call in it hang (seen as a ping that never answered, and "this event loop is
# already running" in the controller's log). Log reads share the group; their file reads run in a pool of their
# own, so followers of long logs never take the other reads' threads (control/logs.py).
CONCURRENCY_GROUPS = {READS: 48}
