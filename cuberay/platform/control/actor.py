"""The controller's Ray actor: a front with one method per endpoint, in a module that imports little.

Ray builds every handle to an actor from the actor's class, which it loads in the process that takes the handle:
``ray.get_actor`` imports the class's module. The controller's own module brings in the store (SQLAlchemy), the
admission policy, serving and pipelines, 0.85 s on 2 cores, and every job's driver takes the controller's handle
before its work starts. So the class Ray knows is this front. It builds the controller in the actor's own process
and hands each call to it unchanged: the controller's endpoint admits the caller, as it always did.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

import ray

from cuberay.platform.api import ENDPOINTS, SIGNATURES


class ControllerActor:
    """What ``install`` runs as the named, detached actor: the controller (``self.controller``) behind it."""

    async def __init__(self, platform: Mapping[str, Any], installer: str | None = None,
                       small_runner: Callable[[str], Any] | None = None) -> None:
        from cuberay.platform.control.controller import Controller  # here, in the actor's process only

        self.controller = Controller.__new__(Controller)
        await Controller.__init__(self.controller, platform, installer, small_runner=small_runner)


def _front(name: str) -> Callable[..., Any]:
    """The actor method ``name``: the same parameters as the controller's endpoint, on the same thread."""

    async def call(self: ControllerActor, caller: Any, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.controller, name)(caller, *args, **kwargs)

    call.__name__ = name
    call.__qualname__ = f"{ControllerActor.__name__}.{name}"
    call.__doc__ = ENDPOINTS[name].summary
    # Ray binds each call's arguments to the method's signature: the protocol's, with the caller first.
    first = [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in ("self", "caller")]
    call.__signature__ = SIGNATURES[name].replace(  # type: ignore[attr-defined]
        parameters=[*first, *SIGNATURES[name].parameters.values()])
    group = ENDPOINTS[name].concurrency_group
    return ray.method(concurrency_group=group)(call) if group else call


for _name in ENDPOINTS:
    setattr(ControllerActor, _name, _front(_name))
