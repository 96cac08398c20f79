"""The elastic driver loop (train/elastic.py): a resize interrupts the run at a checkpoint and restarts it
on the new nodes; the end of a run is never mistaken for a resize. No Ray: ``run_once`` stands in for a
Ray Train run and installs a SIGINT handler as Ray Train's fit() does."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from cuberay.platform import client
from cuberay.platform.api.records import AllocationInfo
from cuberay.train.elastic import run_elastic


class _Aborted(Exception):
    pass


class FakeController:
    """A transport answering ``allocation`` and ``resized`` as the controller does; the test changes ``nodes``."""

    def __init__(self, nodes: list[str]) -> None:
        self.nodes, self.checkpoint_time, self.current = list(nodes), None, True
        self.events: list[tuple] = []
        self.lock = threading.Lock()

    def send(self, method: str, caller: object, args: tuple, kwargs: dict, timeout: float):
        with self.lock:
            if method == "allocation":
                return AllocationInfo(current=self.current, node_ids=list(self.nodes),
                                      checkpoint_time=self.checkpoint_time)
            self.events.append((method, *args))

    @property
    def api(self):
        with client.using(self):
            return client.api()


def _run_until_aborted(seen: list[list[str]], steps: int = 200):
    def run_once(nodes: list[str]) -> dict:
        seen.append(list(nodes))
        aborted = threading.Event()
        previous = signal.signal(signal.SIGINT, lambda *_: aborted.set())  # like Ray Train's handler
        try:
            for _ in range(steps):
                if aborted.is_set():
                    raise _Aborted()  # Ray Train's abort surfaces as SystemExit / an actor error
                time.sleep(0.01)
            return {"metrics": {"world_size": len(nodes)}}
        finally:
            signal.signal(signal.SIGINT, previous)
    return run_once


def test_a_resize_restarts_the_run_on_exactly_the_new_nodes_after_the_next_checkpoint() -> None:
    controller = FakeController(["n1", "n1"])
    seen: list[list[str]] = []
    run_once = _run_until_aborted(seen, steps=300)
    runs_before_checkpoint: list[int] = []

    def grow_then_checkpoint() -> None:
        time.sleep(0.1)
        controller.nodes = ["n1", "n1", "n2", "n2"]
        time.sleep(0.3)  # no checkpoint yet: the run must go on meanwhile
        runs_before_checkpoint.append(len(seen))
        controller.checkpoint_time = time.time()

    threading.Thread(target=grow_then_checkpoint, daemon=True).start()
    said: list[str] = []
    result = run_elastic(run_once, job_id="j", attempt=1, node_ids=["n1", "n1"], api=controller.api,
                         say=said.append, poll_s=0.02)
    assert seen == [["n1", "n1"], ["n1", "n1", "n2", "n2"]]
    assert runs_before_checkpoint == [1]  # restarted at the checkpoint boundary, not before
    assert result == {"metrics": {"world_size": 4}}
    assert controller.events[0][:4] == ("resized", "j", 1, 4)
    assert "restarted with 4 worker(s) (was 2)" in said[0]


def test_without_a_resize_the_run_is_left_alone_and_its_errors_propagate() -> None:
    controller = FakeController(["n1"])

    def fails(nodes: list[str]) -> dict:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_elastic(fails, job_id="j", attempt=1, node_ids=["n1"], api=controller.api, say=print, poll_s=0.01)
    seen: list[list[str]] = []
    assert run_elastic(_run_until_aborted(seen, steps=20), job_id="j", attempt=1, node_ids=["n1"],
                       api=controller.api, say=print, poll_s=0.01) == {"metrics": {"world_size": 1}}
    assert seen == [["n1"]] and controller.events == []


def test_a_preempted_attempt_is_not_resized() -> None:
    controller = FakeController(["n1"])
    controller.current = False
    controller.nodes = ["n1", "n2"]  # stale: the attempt is no longer the job's
    seen: list[list[str]] = []
    run_elastic(_run_until_aborted(seen, steps=30), job_id="j", attempt=1, node_ids=["n1"], api=controller.api,
                say=print, poll_s=0.01)
    assert seen == [["n1"]]
