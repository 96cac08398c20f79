"""The Ray transport: join the cluster, find the controller actor, call it, and say what Ray's failures mean.

Ray is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from cuberay.errors import PlatformNotRunningError
from cuberay.platform.api import Caller
from cuberay.platform.control.head import CONTROLLER_NAME, NAMESPACE
from cuberay.platform.transport import ray_errors

# The address of the Ray node this process runs on, where several share one host (local clusters): Ray attaches a
# process to the head's raylet when it cannot tell them apart, and a job driver attached there dies with the head,
# taking its workers on other nodes with it. A node started with it set passes it on to its workers and their
# drivers (Ray Jobs' entrypoints); on Kubernetes every pod has an address of its own and needs none.
NODE_IP_ENV = "CUBERAY_NODE_IP"


def connect(address: str | None = None, *, log_to_driver: bool = False) -> Any:
    """Join the Ray cluster (``address``, else RAY_ADDRESS, else "auto") and return the controller handle."""
    import ray

    where = init_ray(address, log_to_driver)
    try:
        return ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    except ValueError:
        raise PlatformNotRunningError(
            f"no cuberay controller on the Ray cluster at {where}; start one with `cuberay up` (local) or "
            f"`cuberay up --address ADDR` (existing cluster)") from None


def init_ray(address: str | None, log_to_driver: bool) -> str:
    """Connect this process to Ray unless it already is; returns where it is connected."""
    import ray

    if ray.is_initialized():
        return ray.get_runtime_context().gcs_address
    from cuberay.platform.control import head as controller_head

    target, head = cluster_address(address)
    if head is not None and target == head["address"]:
        controller_head.use_token_auth()
    target = target or "auto"
    node_ip = os.environ.get(NODE_IP_ENV)
    try:
        ray.init(address=target, namespace=NAMESPACE, log_to_driver=log_to_driver, ignore_reinit_error=True,
                 logging_level=logging.WARNING, **({"_node_ip_address": node_ip} if node_ip else {}))
    except Exception as err:  # noqa: BLE001 - every failure to join is one clear message, never a traceback
        raise ray_errors.init_error(err, target) from None
    if not log_to_driver:
        diagnostics_to_stderr()
    return target


def diagnostics_to_stderr() -> None:
    """Send what Ray's driver prints of the cluster's warnings (a task with infeasible resources, say) to stderr.

    Ray prints them to stdout whatever ``log_to_driver`` says, and a command's stdout is its answer: `cuberay up -o
    json` printed such a line before its JSON.
    """
    from ray._private import worker as ray_worker

    original = ray_worker.print_to_stdstream
    if getattr(original, "cuberay_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> Any:
        return original({**data, "is_err": True}, ignore_prefix)

    to_stderr.cuberay_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


def cluster_address(address: str | None = None) -> tuple[str, dict[str, Any] | None]:
    """The GCS address this process means (``address``, else RAY_ADDRESS, else the head `cuberay up` started;
    "" for none), and that recorded head if it runs. Every transport goes by it, so all agree on the cluster."""
    from cuberay.platform.control import head as controller_head

    target = address or os.environ.get("RAY_ADDRESS") or ""
    if target.startswith(("http://", "https://")):
        target = ""  # a dashboard URL (ray job submit's RAY_ADDRESS) is not a GCS address
    head = controller_head.read_state()
    if not target and head is not None:
        target = head["address"]  # the head `cuberay up` started, not whichever Ray ran last here
    return target, head


class RayTransport:
    """Calls the controller actor of the cluster this process joins."""

    def send(self, method: str, caller: Caller, args: tuple[Any, ...], kwargs: Mapping[str, Any],
             timeout: float) -> Any:
        import ray

        handle = connect()
        try:
            return ray.get(getattr(handle, method).remote(caller, *args, **kwargs), timeout=timeout)
        except ray.exceptions.RayError as err:  # every Ray failure: a CuberayError that says what to do
            raise ray_errors.call_error(err, method, timeout) from None
