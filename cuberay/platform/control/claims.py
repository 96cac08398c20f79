"""Names only one active job may hold at a time (a Serve route, a Serve app name), checked at submit.

A job kind says what it claims (``JobBase.claims()``); the controller keeps which job holds each claim, so a
submit is checked against the active jobs in one step under the submit lock, on every path (the Python API,
`cuberay submit`, `cuberay serve deploy`), without reading their specs. A holder that is no longer active
(finished, cancelled) frees its claims the next time someone asks for them; a restarted controller rebuilds
the index from the store's active jobs.
"""

from __future__ import annotations

from typing import Callable, Iterable

from cuberay.errors import NotFoundError
from cuberay.platform.control.store import JobRecord
from cuberay.platform.spec.workload import Claim

Key = tuple[str, str]


class Claims:
    """Claim -> the id of the job that holds it."""

    def __init__(self) -> None:
        self._holders: dict[Key, str] = {}

    def hold(self, job_id: str, claims: Iterable[Claim]) -> None:
        for claim in claims:
            self._holders[(claim.what, claim.value)] = job_id

    def clash(self, claims: Iterable[Claim], job: Callable[[str], JobRecord]) -> str | None:
        """Why one of ``claims`` is taken (by an active job, ``job`` reads its record), or None when all are free."""
        for claim in claims:
            key = (claim.what, claim.value)
            holder = self._holders.get(key)
            if holder is None:
                continue
            try:
                rec = job(holder)
            except NotFoundError:  # a database reset under a live controller
                rec = None
            if rec is None or rec.state.is_terminal:
                del self._holders[key]
                continue
            return (f"{claim.what} {claim.value!r} is already taken by {rec.kind} {rec.name!r} ({rec.id}, "
                    f"{rec.state.value}); {claim.fix}")
        return None
