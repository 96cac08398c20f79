"""``client.call_through_restart``: which failures it waits out, and for how long (no Ray: ``_call`` is replaced
by a stand-in controller; tests/integration/test_crash.py kills the real one)."""

from __future__ import annotations

import time

import pytest

from cuberay.errors import ControllerRestartingError, PlatformNotRunningError
from cuberay.platform import client


class Controller:
    """Answers after ``down`` failed calls, each failing with ``error``."""

    def __init__(self, down: int, error: Exception) -> None:
        self.down, self.error, self.calls = down, error, 0

    def __call__(self, method: str, *args: object) -> tuple:
        self.calls += 1
        if self.calls <= self.down:
            raise self.error
        return method, args


def test_a_restart_is_waited_out_and_the_call_repeated(monkeypatch) -> None:
    controller = Controller(2, ControllerRestartingError("restarting"))
    monkeypatch.setattr(client, "_call", controller)
    assert client.call_through_restart("status", "a-x-1") == ("status", ("a-x-1",))
    assert controller.calls == 3


def test_no_controller_at_all_fails_at_once(monkeypatch) -> None:
    controller = Controller(5, PlatformNotRunningError("no cuberay controller on the Ray cluster"))
    monkeypatch.setattr(client, "_call", controller)
    with pytest.raises(PlatformNotRunningError, match="no cuberay controller"):
        client.call_through_restart("status", "a-x-1")
    assert controller.calls == 1


def test_a_controller_that_stays_away_fails_after_the_wait(monkeypatch) -> None:
    monkeypatch.setattr(client, "_call", Controller(10**6, ControllerRestartingError("restarting")))
    started = time.monotonic()
    with pytest.raises(ControllerRestartingError, match=r"still unreachable after 1s"):
        client.call_through_restart("status", "a-x-1", wait_s=1.0)
    assert 0.9 < time.monotonic() - started < 3.0
