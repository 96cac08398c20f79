"""The wrapper every public controller method wears: its declared rule is checked before its body runs.

``@endpoint`` looks the method up in ``cuberay.platform.api.ENDPOINTS`` (a method missing there fails at
import), makes the first argument of the actor method the :class:`~cuberay.platform.api.Caller`, admits it
through the controller's :class:`~cuberay.platform.control.guard.Guard` and calls the body with the
:class:`~cuberay.platform.control.guard.Principal` in its place (the body's ``who`` parameter). Methods
declared ``reads`` run on the actor's reads thread (control/snapshot.py).
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable

import ray

from cuberay.platform.api import ENDPOINTS, SIGNATURES, Endpoint
from cuberay.platform.control.groups import CONCURRENCY_GROUPS

ATTRIBUTE = "__cuberay_endpoint__"
# The reads give the interpreter up at every SQLite step and socket call; each time they get it back only when the
# loop's thread is made to drop it, after CPython's switch interval (5 ms by default). While the loop computes
# (ordering a deep queue: 0.6 s at 100,000 jobs) a page read waited that long dozens of times: 106 ms p50 for a
# read of 0.4 ms (benchmarks/bench_convoy.py). A shorter interval bounds that wait; the loop pays a few more
# switches, only while a read runs beside it.
SWITCH_INTERVAL_S = 0.0005


def share_the_interpreter() -> None:
    """Let the reads thread in often while the loop computes (call in the actor's own process: it is process-wide)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def endpoint(fn: Callable[..., Any]) -> Callable[..., Any]:
    declared = ENDPOINTS.get(fn.__name__)
    if declared is None:
        raise TypeError(f"controller method {fn.__name__} has no entry in cuberay/platform/api/endpoints.py; "
                        f"declare its access rule there")
    sig = inspect.signature(fn)
    names = list(sig.parameters)
    if names[:2] != ["self", "who"]:
        raise TypeError(f"controller method {fn.__name__} must take (self, who, ...), not ({', '.join(names)})")
    if declared.concurrency_group not in (None, *CONCURRENCY_GROUPS):
        raise TypeError(f"{fn.__name__} names concurrency group {declared.concurrency_group!r}; the actor has "
                        f"{', '.join(CONCURRENCY_GROUPS)}")
    param = declared.rule.param
    _same_parameters(fn.__name__, list(sig.parameters.values())[2:])

    @functools.wraps(fn)
    async def call(self: Any, caller: Any, *args: Any, **kwargs: Any) -> Any:
        target = None
        if param is not None:
            bound = sig.bind(self, None, *args, **kwargs)
            bound.apply_defaults()
            target = bound.arguments[param]
        who = self.guard.admit(declared, caller, target)
        return await fn(self, who, *args, **kwargs)

    del call.__wrapped__  # Ray reads the signature: callers pass the caller where the body has ``who``
    params = list(sig.parameters.values())
    call.__signature__ = sig.replace(parameters=[params[0], params[1].replace(name="caller"), *params[2:]])
    setattr(call, ATTRIBUTE, declared)
    if declared.concurrency_group:
        call = ray.method(concurrency_group=declared.concurrency_group)(call)
    return call


def _same_parameters(name: str, params: list[inspect.Parameter]) -> None:
    """The body takes what the protocol (cuberay/platform/api/protocol.py) says every caller sends."""
    mine = [(p.name, p.default) for p in params]
    theirs = [(p.name, p.default) for p in SIGNATURES[name].parameters.values()]
    if mine != theirs:
        raise TypeError(f"controller method {name} takes {mine}, the protocol says {theirs}; change one of them")


def declared(method: Any) -> Endpoint | None:
    """The endpoint a controller method serves, or None if it is not wrapped."""
    return getattr(method, ATTRIBUTE, None)


def delegate(target: type, component: str, cls: type) -> list[str]:
    """Give ``target`` (the controller) an endpoint for every method of ``cls`` the protocol declares: each admits
    the caller and hands the call, with its Principal, to the component at ``self.<component>``. Returns the
    names added."""
    added = []
    for name in ENDPOINTS:
        method = cls.__dict__.get(name)
        if method is None:
            continue
        if name in target.__dict__:
            raise TypeError(f"{name} is both {target.__name__}'s own method and {cls.__name__}'s")
        setattr(target, name, endpoint(_forward(component, method)))
        added.append(name)
    return added


def _forward(component: str, method: Callable[..., Any]) -> Callable[..., Any]:
    name = method.__name__

    async def forward(self: Any, who: Any, *args: Any, **kwargs: Any) -> Any:
        return await getattr(getattr(self, component), name)(who, *args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    forward.__doc__ = method.__doc__
    forward.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return forward
