"""The default transport: HTTP to the local head's API server where it serves this process's cluster, else Ray.

A process that has not joined Ray (a CLI command, a script before ``ray.init``) and whose cluster is the head
``cuberay up`` started here (no RAY_ADDRESS naming another) sends its calls to that head's API server, which
answers in milliseconds where joining the cluster as a Ray driver takes seconds. A process already in Ray, a
cluster named elsewhere, or an API server that does not answer: the call goes over Ray, as before.
``CUBERAY_TRANSPORT=ray`` sends every call over Ray (to compare, or to rule the API server out).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping

from cuberay.platform.api import Caller
from cuberay.platform.control import head as controller_head
from cuberay.platform.transport.http import ApiUnreachableError, HttpTransport
from cuberay.platform.transport.ray_call import RayTransport, cluster_address

TRANSPORT_ENV = "CUBERAY_TRANSPORT"


class AutoTransport:
    """Chooses per call (see the module's doc); an API server found unreachable is not tried again here."""

    def __init__(self) -> None:
        self._ray = RayTransport()
        self._unreachable: set[str] = set()

    def send(self, method: str, caller: Caller, args: tuple[Any, ...], kwargs: Mapping[str, Any],
             timeout: float) -> Any:
        http = self.http()
        if http is not None:
            try:
                return http.send(method, caller, args, kwargs, timeout)
            except ApiUnreachableError:
                self._unreachable.add(http.url)  # the head may still be up without it: Ray is the way then
        return self._ray.send(method, caller, args, kwargs, timeout)

    def http(self) -> HttpTransport | None:
        """The HTTP transport this process's next call would use, if any."""
        if os.environ.get(TRANSPORT_ENV, "").strip().lower() == "ray":
            return None
        ray = sys.modules.get("ray")
        if ray is not None and getattr(ray, "is_initialized", lambda: False)():
            return None
        target, head = cluster_address()  # the cluster the Ray transport would join
        url = head.get("api_url") if head is not None and target == head.get("address") else None
        if not url or url in self._unreachable:
            return None
        return HttpTransport(url, controller_head.cluster_token())
