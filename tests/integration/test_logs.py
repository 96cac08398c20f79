"""``cuberay logs``: attempts told apart, followed from an offset, and served off the admission loop."""

from __future__ import annotations

import re
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

from cuberay.platform import client
from cuberay.platform.policy.states import JobState
from tests.integration.test_small_jobs import small_jobs_on
from tests.support import wait_for

LINE = re.compile(r"attempt-(\d) line (\d{4})")
MARKER = "--- cuberay: attempt 2 started ---"
FIRST, SECOND = 30, 600  # the second attempt's log outgrows the first's at once


def two_attempts(tmp_path: Path) -> dict[str, Any]:
    """A one-worker Task whose first attempt prints FIRST lines and fails, and whose second prints SECOND."""
    marker, script = tmp_path / "first-ran", tmp_path / "two_attempts.py"
    script.write_text(textwrap.dedent(f"""\
        import os, sys, time
        first = not os.path.exists({str(marker)!r})
        open({str(marker)!r}, "a").close()
        for i in range({FIRST} if first else {SECOND}):
            print(f"attempt-{{1 if first else 2}} line {{i:04d}}", flush=True)
            if first or i % 100 == 99:
                time.sleep(0.05)
        sys.exit(1 if first else 0)
    """))
    return {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
            "metadata": {"name": f"twice-{uuid.uuid4().hex[:6]}", "tenant": "a"},
            "spec": {"workers": 1, "resources": {"cpu": "100m"}, "max_failures": 1,
                     "command": f"{sys.executable} {script}"}}


class Follower(threading.Thread):
    """``logs -f`` in a thread (a follow that never ends fails the test instead of hanging it).

    A slow one stops reading after its first line until ``go`` is set, as a follower that polls seldom, or
    writes to a slow terminal, does: a new attempt's log may then be longer than the old one when it is first
    seen.
    """

    def __init__(self, job_id: str, slow: bool = False) -> None:
        super().__init__(daemon=True)
        self.job_id, self.slow = job_id, slow
        self.pieces: list[str] = []
        self.failed: list[BaseException] = []
        self.first_line, self.go = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            for piece in client.logs(self.job_id, follow=True, poll_s=0.3):
                self.pieces.append(piece)
                if LINE.search(piece) and not self.first_line.is_set():
                    self.first_line.set()
                    if self.slow:
                        self.go.wait(300)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            self.failed.append(err)

    def text(self, timeout_s: float) -> str:
        self.go.set()
        self.join(timeout_s)
        assert not self.is_alive(), f"logs -f did not end within {timeout_s}s: {''.join(self.pieces)[-2000:]}"
        assert not self.failed, self.failed
        return "".join(self.pieces)


def lines_and_markers(text: str) -> list[str]:
    return [m.group(0) if (m := LINE.search(line)) else line for line in text.splitlines()
            if LINE.search(line) or line.startswith("--- ")]


@pytest.mark.parametrize("small", [False, True], ids=["ray-job", "small-job"])
def test_follow_gets_every_line_of_both_attempts_once_in_order(platform, tmp_path: Path, small: bool) -> None:
    if small:
        small_jobs_on(platform)
    ref = client.submit(two_attempts(tmp_path), "a")
    eager, slow = Follower(ref.id), Follower(ref.id, slow=True)
    eager.start()
    slow.start()
    assert slow.first_line.wait(120), "the first attempt's first line never came"
    record = wait_for(lambda: (r := client.status(ref.id)).state.is_terminal and r, 180, "the job to end")
    assert (record.state, record.attempts) == (JobState.SUCCEEDED, 2), record
    expected = [f"attempt-1 line {i:04d}" for i in range(FIRST)] + [MARKER] + \
               [f"attempt-2 line {i:04d}" for i in range(SECOND)]
    for who, follower in (("eager", eager), ("slow", slow)):
        seen = lines_and_markers(follower.text(60))
        first_difference = next((i for i, (a, b) in enumerate(zip(seen, expected)) if a != b), None)
        assert seen == expected, f"{who} follower: {len(seen)} lines, not {len(expected)}; first difference " \
                                 f"at {first_difference}: {seen[first_difference or 0:][:3]}"
    # Without -f: both attempts, each after its marker.
    whole = "".join(client.logs(ref.id))
    assert whole.index("--- attempt 1 ---") < whole.index("attempt-1 line 0029") < whole.index("--- attempt 2 ---") \
        < whole.index("attempt-2 line 0599"), whole[:500]
    if not small:  # a Ray Job driver's log is read from Ray's file on the head, from the offset
        sid = record.submission_id
        # the controller behind the actor's front (control/actor.py)
        read = lambda actor: actor.controller.drivers.launcher.driver_log(sid)  # noqa: E731
        path = ray.get(client.connect().__ray_call__.remote(read))
        assert path is not None and path.is_file() and "attempt-2 line 0599" in path.read_text(), path


def hold_admission(controller: Any, seconds: float) -> None:
    """Make the controller's next tick a slow one: it takes the admission lock and blocks the admission loop
    for ``seconds``, as an admission cycle over a deep queue does."""
    def schedule(actor: Any, seconds: float) -> None:
        self = actor.controller  # the controller behind the actor's front (control/actor.py)

        async def slow_tick() -> None:
            async with self._lock:
                time.sleep(seconds)

        loop = self._task.get_loop()
        loop.call_soon_threadsafe(lambda: loop.create_task(slow_tick()))

    ray.get(controller.__ray_call__.remote(schedule, seconds), timeout=60)


def test_logs_answer_while_a_tick_holds_the_admission_loop(platform) -> None:
    command = f"{sys.executable} -c \"print('hello from the log', flush=True)\""
    ref = client.submit({"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
                         "metadata": {"name": f"hello-{uuid.uuid4().hex[:6]}", "tenant": "a"},
                         "spec": {"workers": 1, "resources": {"cpu": "100m"}, "command": command}}, "a")
    wait_for(lambda: client.status(ref.id).state.is_terminal, 120, "the job to end")
    controller = client.connect()
    hold_s = 10.0
    hold_admission(controller, hold_s)
    blocked = controller.dashboard_url.remote(client.caller())  # a call on the admission loop: it waits for the slow tick
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(blocked, timeout=2)
    started = time.monotonic()
    text = "".join(client.logs(ref.id))
    took = time.monotonic() - started
    assert "hello from the log" in text, text
    assert took < 5, f"logs took {took:.1f}s while a tick held the admission loop for {hold_s:g}s"
    # And the logs came while the tick still held the loop: the call on it has not been answered yet.
    ready, _ = ray.wait([blocked], timeout=0)
    assert not ready, "the slow tick was over before the logs came: nothing was tested"
    ray.get(blocked, timeout=60)  # the loop is back before the fixture cleans up
