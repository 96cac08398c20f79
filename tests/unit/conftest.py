"""Unit tier: pure code only. Ray must not start here.

Two guards, neither of which imports Ray itself (importing it costs a second
and is exactly what the pure core must not need):

* if ``ray`` is already imported when a test starts, ``ray.init`` is replaced
  by a function that raises, so the test fails at the offending call;
* after every test, if ``ray`` got imported meanwhile and a Ray session is now
  up that was not up before, the session is shut down and the test fails.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import pytest

BANNED = "Unit tests must not start Ray; put this test in tests/integration"


def _banned_init(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise RuntimeError(BANNED)


def _ray_is_up() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and hasattr(ray, "is_initialized") and ray.is_initialized())


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch: pytest.MonkeyPatch):
    ray = sys.modules.get("ray")
    if ray is not None and hasattr(ray, "init"):
        monkeypatch.setattr(ray, "init", _banned_init)
    # A run over all of tests/ may already hold the integration cluster; only a
    # session that this test started is its fault.
    was_up = _ray_is_up()
    yield
    if not was_up and _ray_is_up():
        sys.modules["ray"].shutdown()
        pytest.fail(BANNED, pytrace=False)
