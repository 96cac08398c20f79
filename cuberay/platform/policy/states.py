"""Job states: one enum whose members carry their properties.

CLI columns, metric labels and store values all come from here.
"""

from __future__ import annotations

import enum


class JobState(str, enum.Enum):
    """Lifecycle of a cuberay job.

    QUEUED -> ADMITTED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED, or
    RUNNING/ADMITTED -> PREEMPTED -> QUEUED (resumes from its last checkpoint).
    REJECTED jobs never enter the queue.
    """

    QUEUED = "QUEUED"
    ADMITTED = "ADMITTED"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    REJECTED = "REJECTED"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def holds_resources(self) -> bool:
        """True while the ledger holds an allocation for the job."""
        return self in (JobState.ADMITTED, JobState.RUNNING)

    @property
    def is_waiting(self) -> bool:
        return self in (JobState.QUEUED, JobState.PREEMPTED)


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.REJECTED})
