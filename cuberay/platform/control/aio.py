"""Waiting on an asyncio event with a timeout, in a way a cancellation always ends.

``asyncio.wait_for`` before Python 3.12 can swallow a cancellation that arrives just as the awaited event is
set: the caller then carries on as if nothing happened, and a loop built on it outlives its cancel (an
in-process controller's close waited 90 s on such a loop). ``asyncio.wait`` leaves the cancellation alone.
"""

from __future__ import annotations

import asyncio


async def wait_set(event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass; True if it was set. A cancellation propagates."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=max(0.0, timeout))
        return waiter in done
    finally:
        waiter.cancel()
