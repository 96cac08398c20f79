"""The controller's and the small-job runner's wait: a cancellation always ends the loop built on it.

Python 3.11's ``asyncio.wait_for`` swallows a cancel that comes just after the awaited event is set: the loop
below then runs on (with ``wait_for`` in place of ``wait_set`` each of the first three cases hangs), and an
in-process controller's close waited its full 90 s on such a loop on CI.
"""

from __future__ import annotations

import asyncio

import pytest

from cuberay.platform.control.aio import wait_set


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
def test_a_loop_on_wait_set_ends_when_cancelled_just_after_a_wake(turns: int) -> None:
    async def trial() -> str:
        wake = asyncio.Event()

        async def loop() -> None:
            while True:
                await wait_set(wake, 10.0)
                wake.clear()

        task = asyncio.create_task(loop())
        await asyncio.sleep(0)
        wake.set()
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), 2.0)
        except asyncio.CancelledError:
            return "cancelled"
        except asyncio.TimeoutError:
            task.cancel()
            return "still running"
        return "returned"

    assert asyncio.run(trial()) == "cancelled"


def test_wait_set_says_whether_the_event_came() -> None:
    async def both() -> tuple[bool, bool]:
        event = asyncio.Event()
        missed = await wait_set(event, 0.01)
        asyncio.get_running_loop().call_later(0.01, event.set)
        return missed, await wait_set(event, 5.0)

    assert asyncio.run(both()) == (False, True)
