"""A controller in this process, and the transport to it: the real Controller class on an event loop of its own.

Built with a cluster of the caller's choosing (control/cluster.py), it needs no Ray: the unit tier runs the
client and the CLI against it (``with client.using(InProcess(...))``), so their calls meet the real access rules,
store and admission core. Every call still carries its caller and passes the controller's rules, and crosses the
JSON of the HTTP API on its way in and out.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Mapping

from cuberay.errors import CuberayError
from cuberay.platform.api import Caller, wire


class InProcess:
    """A running in-process controller; ``send`` is the transport (see cuberay/platform/transport/__init__.py)."""

    def __init__(self, platform: Mapping[str, Any], cluster: Any, installer: str | None = None,
                 start_timeout_s: float = 60.0) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="cuberay-in-process", daemon=True)
        self._thread.start()
        self.controller = self._run(self._make(dict(platform), cluster, installer), start_timeout_s)

    @staticmethod
    async def _make(platform: dict[str, Any], cluster: Any, installer: str | None) -> Any:
        from cuberay.platform.control.controller import Controller

        controller = Controller.__new__(Controller)  # its __init__ is a coroutine (a Ray async actor's)
        await Controller.__init__(controller, platform, installer, cluster)
        return controller

    def _run(self, coroutine: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def send(self, method: str, caller: Caller, args: tuple[Any, ...], kwargs: Mapping[str, Any],
             timeout: float) -> Any:
        # Through the JSON of the HTTP API both ways (cuberay/platform/api/wire.py), so every call the unit tier
        # makes also checks that its arguments, answer and refusal survive that transport.
        caller, args, kwargs = wire.decode_call(method, _as_sent(wire.encode_call(caller, args, kwargs)))
        try:
            value = self._run(getattr(self.controller, method)(caller, *args, **kwargs), timeout)
        except CuberayError as err:
            status, body = wire.encode_error(err)
            raise wire.decode_error(status, _as_sent(body)) from None
        return wire.decode_answer(method, _as_sent(wire.encode_answer(method, value)))

    def tick(self, timeout: float = 30.0) -> None:
        """Run one admission tick now (and wait for it): what a test does instead of waiting for the timer."""
        self._run(self.controller._tick(), timeout)

    def close(self) -> None:
        async def stop() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:  # generous: on a loaded 2-core machine the cancelled tasks' cleanup queues behind others
            self._run(stop(), 90.0)
        except TimeoutError:
            raise TimeoutError("the in-process controller's tasks did not end within 90 s of being cancelled; "
                               "still running:\n" + self._pending()) from None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.controller.store.close()

    def _pending(self) -> str:
        """Each task still on the loop, with where it waits (for a close that does not end)."""
        lines = []
        try:
            tasks = list(asyncio.all_tasks(self.loop))
        except RuntimeError:  # the set changed while read from this thread: once more
            tasks = list(asyncio.all_tasks(self.loop))
        for task in tasks:
            frames = task.get_stack(limit=6)
            where = " <- ".join(f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno} {f.f_code.co_name}"
                                for f in reversed(frames))
            lines.append(f"  {task.get_name()}: {where or task!r}")
        return "\n".join(lines) or "  (none: the loop itself is blocked)"


def _as_sent(data: Any) -> Any:
    """``data`` as the other side of an HTTP call reads it: JSON text and back."""
    return json.loads(json.dumps(data))
