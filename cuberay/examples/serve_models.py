"""Custom serving versions (engine ``custom``): plain classes that cuberay turns into Serve deployments.

A custom version is called with the request's JSON body and returns JSON.
``Echo`` answers with what it got; ``Failing`` always raises, which is what a
broken release looks like to a rollout (it rolls back by itself).
"""

from __future__ import annotations

from typing import Any


class Echo:
    """Answers ``{"echo": <body>}``."""

    async def __call__(self, payload: Any) -> dict:
        return {"echo": payload}


class Failing:
    """Every request fails: a release with a bug."""

    async def __call__(self, payload: Any) -> dict:
        raise RuntimeError("this version is broken on purpose")
