"""The controller's heap keeper: a deep queue's objects are frozen out of the cycle collector, and let go when the
queue is empty again."""

from __future__ import annotations

import gc

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
