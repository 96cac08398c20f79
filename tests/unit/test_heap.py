"""The controller's heap keeper: a deep queue's objects are frozen out of the cycle collector, and let go when the
queue is empty again."""

from __future__ import annotations

import gc
import weakref

import pytest

from cuberay.platform.control import heap
from cuberay.platform.control.heap import HeapKeeper
from tests.unit.helpers import cluster, job, state, submit


@pytest.fixture(autouse=True)
def _unfrozen():
    yield
    gc.unfreeze()


def test_a_deep_queue_is_frozen_once_per_batch_and_unfrozen_when_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "FREEZE_EVERY_ADDS", 3)
    st = state(cluster(nodes=1, gpus=4))
    keeper = HeapKeeper()
    submit(st, job("j1", gpus=4, workers=1), job("j2", gpus=4, workers=1, t=1))
    keeper.tend(st.queue)
    assert keeper.freezes == 0 and gc.get_freeze_count() == 0  # a shallow queue: nothing to gain

    submit(st, job("j3", gpus=4, workers=1, t=2))
    keeper.tend(st.queue)
    assert keeper.freezes == 1 and gc.get_freeze_count() > 0
    keeper.tend(st.queue)
    assert keeper.freezes == 1  # nothing new arrived

    for j in ("j1", "j2", "j3"):
        st.queue.remove(j)
    keeper.tend(st.queue)
    assert keeper.frozen_at_adds is None and gc.get_freeze_count() == 0


class Backlog:
    """The two things the keeper reads of a queue: how many wait, and how many were ever queued."""

    def __init__(self, waiting: int) -> None:
        self.waiting = self.adds = waiting

    def __len__(self) -> int:
        return self.waiting


class Cycle:
    def __init__(self) -> None:
        self.me = self  # dies only by a cycle collection, never by reference count


def test_under_a_backlog_that_never_empties_the_frozen_heap_is_released_every_period(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "FREEZE_EVERY_ADDS", 3)
    monkeypatch.setattr(heap, "RELEASE_EVERY_S", 60.0)
    keeper, backlog = HeapKeeper(), Backlog(5)
    garbage = Cycle()
    dead = weakref.ref(garbage)
    keeper.tend(backlog, now=0.0)
    assert keeper.freezes == 1 and gc.get_freeze_count() > 0

    del garbage  # garbage now, but frozen: the collector does not look at it
    gc.collect()
    assert dead() is not None
    keeper.tend(backlog, now=59.0)
    assert keeper.releases == 0 and dead() is not None

    backlog.adds += 1  # a trickle that never empties the queue
    keeper.tend(backlog, now=60.0)
    assert keeper.releases == 1 and dead() is None, "cyclic garbage frozen under a backlog was never collected"
    assert gc.get_freeze_count() > 0 and keeper.frozen_at_adds == backlog.adds  # what lives is frozen again

    keeper.tend(backlog, now=119.0)
    assert keeper.releases == 1  # one release per period, counted from the last
    keeper.tend(backlog, now=120.0)
    assert keeper.releases == 2 and keeper.last_release_s < 5


def test_a_backlog_growing_at_every_tick_is_released_on_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "FREEZE_EVERY_ADDS", 3)
    monkeypatch.setattr(heap, "RELEASE_EVERY_S", 60.0)
    keeper, backlog = HeapKeeper(), Backlog(3)
    releases = []
    for t in range(0, 130, 10):  # three more jobs every ten seconds: each tick has a freeze's worth of new ones
        keeper.tend(backlog, now=float(t))
        releases.append(keeper.releases)
        backlog.waiting += 3
        backlog.adds += 3
    assert releases == [0] * 6 + [1] * 6 + [2]  # at 60 s and 120 s, not put off by the freezes
    assert keeper.freezes == 13 - 2
