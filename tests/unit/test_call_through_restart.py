"""The typed API waits out a controller restart when asked to: which failures it waits out, and for how long.

No Ray: the transport is a stand-in controller that fails a number of calls; tests/integration/test_crash.py
kills the real one.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from cuberay.errors import ControllerRestartingError, PlatformNotRunningError
from cuberay.platform import client


class Controller:
    """A transport whose controller answers after ``down`` failed calls, each failing with ``error``."""

    def __init__(self, down: int, error: Exception) -> None:
        self.down, self.error, self.calls = down, error, 0

    def send(self, method: str, caller: Any, args: tuple, kwargs: dict, timeout: float) -> tuple:
        self.calls += 1
        if self.calls <= self.down:
            raise self.error
        return method, args, caller.user


def test_a_restart_is_waited_out_and_the_call_repeated() -> None:
    controller = Controller(2, ControllerRestartingError("restarting"))
    with client.using(controller), client.acting_as("ann"):
        assert client.driver_api().status("a-x-1") == ("status", ("a-x-1",), "ann")
    assert controller.calls == 3


def test_without_a_wait_a_restart_fails_at_once() -> None:
    controller = Controller(2, ControllerRestartingError("restarting"))
    with client.using(controller), pytest.raises(ControllerRestartingError, match="restarting"):
        client.api().status("a-x-1")
    assert controller.calls == 1


def test_no_controller_at_all_fails_at_once() -> None:
    controller = Controller(5, PlatformNotRunningError("no cuberay controller on the Ray cluster"))
    with client.using(controller), pytest.raises(PlatformNotRunningError, match="no cuberay controller"):
        client.driver_api().status("a-x-1")
    assert controller.calls == 1


def test_a_controller_that_stays_away_fails_after_the_wait() -> None:
    started = time.monotonic()
    with client.using(Controller(10**6, ControllerRestartingError("restarting"))), \
            pytest.raises(ControllerRestartingError, match=r"still unreachable after 1s"):
        client.api(restart_wait_s=1.0).status("a-x-1")
    assert 0.9 < time.monotonic() - started < 3.0


def test_a_call_the_protocol_does_not_allow_fails_before_it_is_sent() -> None:
    controller = Controller(0, RuntimeError("never"))
    with client.using(controller):
        with pytest.raises(TypeError):
            client.api().status()  # ref missing
        with pytest.raises(TypeError):
            client.api().cancel("a-x-1", "why", "one too many")
        with pytest.raises(AttributeError, match="no method 'statsu'"):
            client.api().statsu("a-x-1")
    assert controller.calls == 0
