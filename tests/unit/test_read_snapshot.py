"""The snapshot the controller's reads are served from: one tick's state, unaffected by the ticks after it."""

from __future__ import annotations

import pytest

from cuberay.platform.api.records import JobRecord
from cuberay.platform.control import snapshot as snapshots
from cuberay.platform.control.snapshot import NOT_ORDERED, take
from cuberay.platform.policy.order import queue_order
from cuberay.platform.policy.states import JobState
from tests.unit.helpers import cluster, cycle, job, state, submit


def test_snapshot_holds_one_ticks_order_reasons_and_allocations() -> None:
    st = state(cluster(nodes=2, gpus=4))
    submit(st, job("big", gpus=4, workers=2), job("wait1", gpus=4, workers=1, t=1), job("wait2", gpus=2, workers=1, t=2))
    c = cycle(st)
    waits = dict(c.waits)
    snap = take(st, waits, [], ticks=7)

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


def test_a_queue_page_comes_from_the_snapshot_running_then_order() -> None:
    st = state(cluster(nodes=1, gpus=4))
    submit(st, job("run", gpus=4, workers=1), job("next", gpus=4, workers=1, t=1))
    cycle(st)
    snap = take(st, {"next": "no room"}, [], ticks=1)
    assert [j.id for j in snap.order] == ["next"] and snap.positions == {"next": 1}
    assert listed(snap, {}, None) == []  # no records: nothing shown
    listed_now = listed(snap, {r.id: r for r in (record("run", JobState.RUNNING), record("next"))}, None)
    assert [(e.job_id, e.position, e.reason) for e in listed_now][1:] == [("next", 1, "no room")]
    assert listed_now[0].job_id == "run" and listed_now[0].position is None
    assert snap.queue_page(lambda ids: {}, None, None, None, 0, 10)[0] == 2  # counted from the snapshot alone


def listed(snap: snapshots.Snapshot, records: dict[str, JobRecord], tenant: str | None) -> list:
    """Every entry of ``snap``'s queue (of ``tenant``) with ``records`` as the store holds them."""
    return snap.queue_page(lambda ids: {i: records[i] for i in ids if i in records}, tenant, None, None, 0, 1000)[1]


def record(job_id: str, state: JobState = JobState.QUEUED, tenant: str = "a") -> JobRecord:
    return JobRecord(id=job_id, tenant=tenant, name=job_id, kind="Task", user="u", spec={}, state=state,
                     priority=0, submit_time=0.0, seq=1)


def test_a_deep_queue_keeps_its_order_until_reordering_is_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ORDER_ALWAYS jobs the order is reused while young: jobs admitted since drop out by their stored
    state, jobs queued since are listed after it without a position, and a due re-ordering places them."""
    monkeypatch.setattr(snapshots, "ORDER_ALWAYS", 1)
    monkeypatch.setattr(snapshots, "ORDER_SHARE", 1e-9)  # never due again on its own
    st = state(cluster(nodes=1, gpus=4))
    submit(st, job("run", gpus=4, workers=1), job("w1", gpus=4, workers=1, t=1), job("w2", gpus=4, workers=1, t=2),
           job("other", tenant="b", gpus=4, workers=1, t=3))
    cycle(st)
    first = take(st, {}, [], ticks=1)
    assert [j.id for j in first.order] == ["other", "w1", "w2"]  # tenant b holds nothing: it goes first
    st.finish("run")
    cycle(st, 1)
    assert set(st.running) == {"w1"}  # a's share is back to nothing and w1 is older
    submit(st, job("late", gpus=4, workers=1, t=4))
    second = take(st, {}, [], ticks=2, previous=first)
    assert second.order is first.order and [j.id for j in second.unordered] == ["late"]
    records = {r.id: r for r in (record("w1", JobState.ADMITTED), record("other", tenant="b"), record("w2"),
                                 record("late"))}
    every = listed(second, records, None)
    assert [(e.job_id, e.position) for e in every] == [("w1", None), ("other", 1), ("w2", 3), ("late", None)]
    assert every[-1].reason == NOT_ORDERED
    mine = listed(second, {k: v for k, v in records.items() if v.tenant == "a"}, "a")
    assert [(e.job_id, e.position) for e in mine] == [("w1", None), ("w2", 3), ("late", None)]

    monkeypatch.setattr(snapshots, "ORDER_SHARE", 1e9)  # due at once
    third = take(st, {}, [], ticks=3, previous=second)
    assert {j.id for j in third.order} == {"other", "w2", "late"} and third.unordered == ()


def test_the_queue_counts_each_tenants_jobs_and_knows_its_newest() -> None:
    st = state(cluster(nodes=1, gpus=4))
    submit(st, job("run", gpus=4, workers=1))
    cycle(st)  # the node is full: the rest wait
    submit(st, job("a1", gpus=4, workers=1), job("a2", gpus=4, workers=1, t=1), job("b1", tenant="b", gpus=4, workers=1, t=2))
    before = st.queue.adds
    submit(st, job("b2", tenant="b", gpus=4, workers=1, t=3))
    st.queue.remove("a1")
    assert (st.queue.count("a"), st.queue.count("b"), st.queue.count("c")) == (1, 2, 0)
    assert [j.id for j in st.queue.latest(st.queue.adds - before)] == ["b2"]
    assert [j.id for j in st.queue.latest(10)] == ["b2", "b1", "a2"]
