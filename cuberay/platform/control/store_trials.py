"""A search's trials in the store: what its driver reports, what the Tune page and `cuberay tune trials` read.

A mixin of :class:`cuberay.platform.control.store.Store`. A driver reports only the trials that changed; each
is one row per (job, attempt, trial), replaced in place, so a search of any length costs one row a trial.
"""

from __future__ import annotations

import time
from typing import Iterable

from sqlalchemy import func, select

from cuberay.platform.api.records import TrialInfo
from cuberay.platform.control.tables import TrialRow

HISTORY_MAX = 500  # reported values kept per trial: a curve, not a log (a long trial keeps its last ones)


class TrialRows:
    """Trial rows; the store supplies ``_sessions``."""

    def put_trials(self, job_id: str, attempt: int, trials: Iterable[TrialInfo]) -> None:
        """Record (or replace) these trials of one attempt of ``job_id``."""
        now = time.time()
        with self._sessions.begin() as session:  # type: ignore[attr-defined]
            for t in trials:
                session.merge(TrialRow(job_id=job_id, attempt=attempt, trial_id=t.trial_id, idx=t.index,
                                       state=t.state, config=dict(t.config), value=t.value,
                                       iterations=t.iterations, history=list(t.history[-HISTORY_MAX:]),
                                       error=t.error, time=now))

    def trials(self, job_id: str) -> tuple[int, list[TrialInfo]]:
        """The latest attempt of ``job_id`` that reported trials, and its trials by index; (0, []) for none."""
        with self._sessions() as session:  # type: ignore[attr-defined]
            attempt = session.scalar(select(func.max(TrialRow.attempt)).where(TrialRow.job_id == job_id))
        return (0, []) if attempt is None else (attempt, self.trials_of(job_id, attempt))

    def trials_of(self, job_id: str, attempt: int) -> list[TrialInfo]:
        """The trials attempt ``attempt`` of ``job_id`` reported, by index."""
        with self._sessions() as session:  # type: ignore[attr-defined]
            rows = session.scalars(select(TrialRow).where(TrialRow.job_id == job_id, TrialRow.attempt == attempt)
                                   .order_by(TrialRow.idx, TrialRow.trial_id))
            return [TrialInfo(trial_id=r.trial_id, index=r.idx, state=r.state, config=r.config, value=r.value,
                              iterations=r.iterations, history=r.history, error=r.error) for r in rows]
