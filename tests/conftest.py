"""Test tiers: unit (no Ray), integration (one real local Ray cluster), e2e (opt-in).

Each test is marked with its tier from the folder it lives in, so
``pytest -m "not integration"`` works, and a run over all of ``tests/`` runs
the fast tier first. ``make test`` runs each tier in its own process, two lanes side by side
(tests/run_suite.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis's per-example deadline is a timing check, and on a shared 2-core machine it fails by load, not by
# code; speed targets live in benchmarks/. Examples still run, and still fail on wrong answers.
settings.register_profile("cuberay", deadline=None)
settings.load_profile("cuberay")

TESTS = Path(__file__).resolve().parent
REPO_ROOT = TESTS.parent

# Order of the tiers within one pytest run: cheapest first.
TIER_ORDER = {"unit": 0, "integration": 1, "e2e": 2}


def _tier(item: pytest.Item) -> str | None:
    try:
        rel = Path(str(item.path)).resolve().relative_to(TESTS)
    except ValueError:
        return None
    return rel.parts[0] if len(rel.parts) > 1 else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = _tier(item)
        if tier in ("integration", "e2e"):
            item.add_marker(getattr(pytest.mark, tier))
        if item.get_closest_marker("own_ray") and "ray_cluster" in getattr(item, "fixturenames", ()):
            # make test runs own_ray tests in a process without the session cluster (tests/run_suite.py)
            raise pytest.UsageError(f"{item.nodeid} is marked own_ray but uses the session cluster (ray_cluster): "
                                    f"drop the mark, or the fixture")
        if item.get_closest_marker("own_ray") and item.get_closest_marker("second_lane"):
            # tests/run_suite.py runs each mark in a pytest process of its own: the test would run twice
            raise pytest.UsageError(f"{item.nodeid} is marked both own_ray and second_lane: keep one")
    # Stable sort: keeps file order inside a tier.
    items.sort(key=lambda item: TIER_ORDER.get(_tier(item) or "", len(TIER_ORDER)))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root (where pyproject.toml and configs/ live)."""
    return REPO_ROOT
