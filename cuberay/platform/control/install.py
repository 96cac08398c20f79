"""Deploying the controller: a detached, named actor pinned to the head node, like Ray Serve's controller.

``install`` creates it (or returns the running one) and waits until it
answers; ``uninstall`` kills it without restart. Jobs live in the store, so a
new controller picks them up where the old one left them.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Mapping

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cuberay.errors import CuberayError, PlatformNotRunningError
from cuberay.platform.api import Caller
from cuberay.platform.control import reloading, small
from cuberay.platform.control.actor import ControllerActor
from cuberay.platform.control.cluster import RayCluster
from cuberay.platform.control.groups import CONCURRENCY_GROUPS
from cuberay.platform.control.head import API_NAME, CONTROLLER_NAME, NAMESPACE
from cuberay.platform.control.ids import CONSOLE_URL_KEY


def head_node_id() -> str:
    for node in ray.nodes():
        if node["Alive"] and "node:__internal_head__" in node["Resources"]:
            return node["NodeID"]
    raise PlatformNotRunningError("the Ray cluster has no alive head node; restart it (`cuberay up`)")


def find() -> Any | None:
    """The controller's handle, or None if it is not running."""
    try:
        return ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    except ValueError:
        return None


def install(platform: Mapping[str, Any], *, installer: str, replace: bool = False, timeout_s: float = 120.0,
            small_runner: Callable[[str], Any] | None = None) -> Any:
    """Create the detached controller on the head node (or return the running one); waits until it answers.

    ``installer`` (who starts it) is one of the platform's admins (docs/security.md). ``small_runner`` creates the
    small jobs' runner on a node (:func:`cuberay.runtime.small_runner.runner`); the controller calls it when its
    platform runs small jobs, and so does a controller Ray restarts (it gets the same arguments).
    """
    if replace:
        uninstall(timeout_s=timeout_s)
    if find() is None:  # a fresh controller starts from ``platform``, not from an earlier one's live reload
        reloading.clear(RayCluster())
    actor = ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(ControllerActor).options(
        name=CONTROLLER_NAME, namespace=NAMESPACE, lifetime="detached", num_cpus=0,
        max_restarts=-1, max_task_retries=0, max_concurrency=1000, get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(head_node_id(), soft=False))
    handle = actor.remote(dict(platform), installer, small_runner)
    try:
        ray.get(handle.ping.remote(Caller(user=installer)), timeout=timeout_s)
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        raise (cause if isinstance(cause, CuberayError) else err) from None
    except ray.exceptions.RayActorError as err:
        raise PlatformNotRunningError(f"the cuberay controller could not start: {err}; read its log in the "
                                      f"Ray dashboard (Actors tab, {CONTROLLER_NAME})") from None
    return handle


def uninstall(timeout_s: float = 60.0) -> bool:
    """Kill the controller (no restart); True if one was running. Jobs keep their state in the store."""
    handle = find()
    if handle is None:
        return False
    ray.kill(handle, no_restart=True)
    small.remove_runner()  # the small jobs' runner goes with its controller, and so does the API server
    with contextlib.suppress(ValueError):
        ray.kill(ray.get_actor(API_NAME, namespace=NAMESPACE), no_restart=True)
    RayCluster().kv_del(CONSOLE_URL_KEY)  # no console now: jobs started later link to none
    deadline = time.monotonic() + timeout_s
    while find() is not None:  # the name is freed once the GCS has marked the actor dead
        if time.monotonic() > deadline:
            raise PlatformNotRunningError(f"the controller {CONTROLLER_NAME} did not stop within {timeout_s}s")
        time.sleep(0.1)
    return True
