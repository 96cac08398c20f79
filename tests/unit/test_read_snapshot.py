"""The snapshot the controller's reads are served from: one tick's state, unaffected by the ticks after it."""

from __future__ import annotations

from cuberay.platform.control import convert as conv
from cuberay.platform.control.snapshot import take
from cuberay.platform.policy.admission import queue_order
from tests.unit.helpers import cluster, cycle, job, state, submit


def test_snapshot_holds_one_ticks_order_reasons_and_allocations() -> None:
    st = state(cluster(nodes=2, gpus=4))
    submit(st, job("big", gpus=4, workers=2), job("wait1", gpus=4, workers=1, t=1), job("wait2", gpus=2, workers=1, t=2))
    c = cycle(st)
    waits = dict(c.waits)
    snap = take(st, waits, queue_order(st), [], ticks=7)

    assert set(snap.allocations) == {"big"} and len(snap.allocations["big"]) == 2
    assert [j.id for j in snap.order] == [j.id for j in queue_order(st)]
    assert snap.positions == {j.id: i for i, j in enumerate(queue_order(st), 1)}
    assert snap.waits == waits and snap.ticks == 7
    assert {n["node_id"] for n in snap.nodes} == {"n0", "n1"}

    # The loop moves on: the published snapshot does not.
    st.finish("big")
    waits.clear()
    cycle(st, 1)
    assert set(snap.allocations) == {"big"} and snap.waits and [r.job.id for r in snap.running] == ["big"]
    assert all(n["free"].get("GPU", 0.0) == 0.0 for n in snap.nodes)


def test_queue_entries_come_from_the_snapshot_running_and_order() -> None:
    st = state(cluster(nodes=1, gpus=4))
    submit(st, job("run", gpus=4, workers=1), job("next", gpus=4, workers=1, t=1))
    cycle(st)
    snap = take(st, {"next": "no room"}, queue_order(st), [], ticks=1)
    assert [j.id for j in snap.order] == ["next"] and snap.positions == {"next": 1}
    assert conv.queue_entries(snap.running, snap.order, {}, snap.waits, None) == []  # no records: nothing shown
