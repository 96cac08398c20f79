"""`make test`'s runner (tests/run_suite.py) sets up what every tier's processes share."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests import run_suite

REPO = Path(__file__).resolve().parents[2]


def test_the_suite_caches_bytecode_where_the_environment_says_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    sources = [REPO / "cuberay" / "platform" / "runner.py", REPO / "tests" / "support.py"]
    cached = [Path(importlib.util.cache_from_source(str(source))) for source in sources]
    for path in cached:
        path.unlink(missing_ok=True)
    run_suite._cache_bytecode()
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ  # the tiers' processes start from this environment
    for source, path in zip(sources, cached):
        assert path.is_file() and path.stat().st_mtime >= source.stat().st_mtime, path
