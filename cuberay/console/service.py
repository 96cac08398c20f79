"""The API server on the head: a detached actor that serves cuberay/console/app.py and calls the controller.

It runs beside the controller (pinned to the head node, no CPUs of the cluster's), restarted by Ray like the
controller (``max_restarts=-1``) on the same port, and goes with it (``cuberay down``, or the controller's
uninstall). Every request is one call of the controller actor with its caller; the controller's declared
concurrency groups still apply, so reads answer from the published snapshot and never wait for admission.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cuberay.errors import PlatformNotRunningError
from cuberay.platform.api import Caller
from cuberay.platform.control.cluster import RayCluster
from cuberay.platform.control.head import API_NAME, CONTROLLER_NAME, NAMESPACE
from cuberay.platform.control.ids import CONSOLE_URL_KEY
from cuberay.platform.transport import ray_errors

CALL_TIMEOUT_S = 600.0  # the server's own limit on one call; a client gives up sooner, at its own timeout
START_TIMEOUT_S = 60.0


class ApiServer:
    """The actor's body (``ray.remote`` is applied by :func:`start`): an aiohttp site on ``host:port``."""

    async def __init__(self, host: str, port: int, token: str) -> None:
        from aiohttp import web

        from cuberay.console.app import make_app

        self._controller: Any = None
        self._runner = web.AppRunner(make_app(self._send, token), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        self._url = f"http://{host}:{port}"
        # Links to a job's page (the Ray Jobs' metadata) name the address a browser uses: on every interface,
        # that is a port forwarded to this machine's 127.0.0.1.
        link = f"http://127.0.0.1:{port}" if host == "0.0.0.0" else self._url
        await asyncio.to_thread(RayCluster().kv_put, CONSOLE_URL_KEY, link.encode())

    def url(self) -> str:
        return self._url

    async def _send(self, method: str, caller: Caller, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        handle = self._handle()
        try:
            ref = getattr(handle, method).remote(caller, *args, **kwargs)
            return await asyncio.wait_for(ref, CALL_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise ray_errors.call_error(ray.exceptions.GetTimeoutError(), method, CALL_TIMEOUT_S) from None
        except ray.exceptions.RayError as err:
            if isinstance(err, ray.exceptions.RayActorError):
                self._controller = None  # a reinstalled controller is another actor: look it up again next time
            raise ray_errors.call_error(err, method, CALL_TIMEOUT_S) from None

    def _handle(self) -> Any:
        if self._controller is None:
            try:
                self._controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
            except ValueError:
                raise PlatformNotRunningError("the cuberay controller is not running on this cluster; start it "
                                              "with `cuberay up`") from None
        return self._controller


def start(node_id: str, port: int, token: str, host: str = "127.0.0.1") -> str:
    """The API server on ``node_id``, created if it is not running (then it keeps its port); returns its URL."""
    actor = ray.remote(ApiServer).options(
        name=API_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, num_cpus=0,
        max_restarts=-1, max_task_retries=0, max_concurrency=1000,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
    handle = actor.remote(host, port, token)
    try:
        return str(ray.get(handle.url.remote(), timeout=START_TIMEOUT_S))
    except ray.exceptions.RayError as err:
        raise PlatformNotRunningError(f"the cuberay API server did not start on {host}:{port} ({type(err).__name__}: "
                                      f"{str(err).splitlines()[0][:300] if str(err) else ''}); its log is in the Ray "
                                      f"dashboard (Actors tab, {API_NAME})") from None
