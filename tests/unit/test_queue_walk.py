"""The whole queue read a page at a time while jobs end and are admitted between the reads: no job that is still
there at the end is lost or listed twice (cuberay/platform/transport/queue_walk.py)."""

from __future__ import annotations

from typing import Callable

from cuberay.platform.api.records import QueueEntry, QueuePage
from cuberay.platform.policy.states import JobState
from cuberay.platform.transport import queue_walk


def entry(job_id: str, running: bool) -> QueueEntry:
    return QueueEntry(job_id=job_id, tenant="a", name=job_id, kind="Task",
                      state=JobState.RUNNING if running else JobState.QUEUED, position=None, reason="",
                      gpus=0.0, workers=1, age_s=0.0)


class MovingQueue:
    """A queue_page over running and waiting ids; after the n-th call, ``moves[n]`` changes the queue."""

    def __init__(self, running: list[str], waiting: list[str], moves: list[Callable[["MovingQueue"], None]]) -> None:
        self.running, self.waiting, self.moves, self.calls = running, waiting, moves, 0

    def queue_page(self, tenant: str | None = None, state: str | None = None, offset: int = 0,
                   limit: int = 50) -> QueuePage:
        rows = [entry(j, True) for j in self.running]
        if state != "running":
            rows += [entry(j, False) for j in self.waiting]
        page = QueuePage(total=len(rows), offset=offset, entries=rows[offset:offset + limit], users={}, ticks=0)
        if self.calls < len(self.moves):
            self.moves[self.calls](self)
        self.calls += 1
        return page

    def end(self, job_id: str) -> None:
        for rows in (self.running, self.waiting):
            if job_id in rows:
                rows.remove(job_id)

    def admit(self, job_id: str) -> None:
        self.waiting.remove(job_id)
        self.running.append(job_id)


def walked(queue: MovingQueue) -> list[str]:
    ids = [e.job_id for e in queue_walk.walk(queue, page=3, overlap=1)]
    assert len(ids) == len(set(ids)), f"listed twice: {ids}"
    return ids


def test_a_job_ending_ahead_of_the_next_page_shifts_no_row_past_the_walk() -> None:
    queue = MovingQueue(["r1"], [f"w{i}" for i in range(1, 7)], [lambda q: q.end("w1")])
    ids = walked(queue)
    assert ["r1", "w2", "w3", "w4", "w5", "w6"] == [i for i in ids if i != "w1"]  # w3 was at the boundary


def test_a_job_admitted_from_the_unread_part_is_listed_as_running_and_an_ended_one_is_not() -> None:
    queue = MovingQueue(["r1"], [f"w{i}" for i in range(1, 7)],
                        [lambda q: (q.end("r1"), q.admit("w5")), lambda q: q.end("w1")])
    ids = walked(queue)
    assert ids[0] == "w5" and "r1" not in ids  # running rows are read again at the end
    assert {"w2", "w3", "w4", "w6"} <= set(ids)


def test_a_walk_from_an_offset_starts_there() -> None:
    queue = MovingQueue(["r1"], [f"w{i}" for i in range(1, 7)], [])
    assert [e.job_id for e in queue_walk.walk(queue, offset=4, page=3, overlap=1)] == ["w4", "w5", "w6"]
