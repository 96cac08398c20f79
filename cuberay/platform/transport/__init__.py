"""How the client reaches the controller: a transport carries each call of the typed API.

A transport has one method, ``send(method, caller, args, kwargs, timeout)``: the Ray actor call today
(:mod:`.ray_call`), HTTP for the console's API, or a controller in the same process for tests. Every one
carries the caller, so every answer passes the controller's access rules. :class:`~.remote.Remote` is the
typed face over a transport: ``client.api().status(job_id)``.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from cuberay.platform.api import Caller


class Transport(Protocol):
    def send(self, method: str, caller: Caller, args: tuple[Any, ...], kwargs: Mapping[str, Any],
             timeout: float) -> Any:
        """Call ``method`` of the controller as ``caller``; CuberayError (the controller's own, or what the
        transport's failure means) when it fails."""
        ...
