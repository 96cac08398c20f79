"""The typed controller API over a transport: each method of ``ControllerAPI``, checked before it is sent.

A call is bound to the protocol's signature here, so a wrong call fails at once with Python's own TypeError,
with no cluster involved. ``restart_wait_s`` > 0 waits out a controller restart (Ray restarts a controller that
died and it recovers from its store, but meanwhile every call to it fails): the call is repeated for up to that
long, and no controller at all still fails at once. Only for calls that may be repeated: reads, and reports the
controller takes once per attempt.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from cuberay.errors import ControllerRestartingError
from cuberay.platform.api import SIGNATURES, Caller
from cuberay.platform.transport import Transport


class Remote:
    """A ``ControllerAPI`` whose methods send their calls through ``transport`` as ``caller()``."""

    def __init__(self, transport: Transport, caller: Callable[[], Caller], *, restart_wait_s: float = 0.0,
                 timeout: float = 120.0) -> None:
        self._transport = transport
        self._caller = caller
        self._restart_wait_s = restart_wait_s
        self._timeout = timeout

    def __getattr__(self, name: str) -> Callable[..., Any]:
        signature = SIGNATURES.get(name)
        if signature is None:
            raise AttributeError(f"the controller has no method {name!r}; its methods are in "
                                 f"cuberay/platform/api/protocol.py")

        def call(*args: Any, **kwargs: Any) -> Any:
            signature.bind(*args, **kwargs)  # a call the protocol does not allow fails here
            return self._send(name, args, kwargs)

        call.__name__ = name
        return call

    def _send(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        deadline = time.monotonic() + self._restart_wait_s
        pause = 0.5
        while True:
            try:
                return self._transport.send(name, self._caller(), args, kwargs, self._timeout)
            except ControllerRestartingError as err:
                left = deadline - time.monotonic()
                if left <= 0:
                    if self._restart_wait_s > 0:
                        raise ControllerRestartingError(
                            f"{err} (still unreachable after {self._restart_wait_s:.0f}s)") from None
                    raise
                time.sleep(min(pause, left))
                pause = min(pause * 2, 5.0)
