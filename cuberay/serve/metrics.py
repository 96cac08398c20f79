"""Per-version serving metrics on Ray's Prometheus endpoint, and the in-memory window the rollout reads.

Prometheus names (Ray prefixes ``ray_``): ``cuberay_serve_requests_total`` and
``cuberay_serve_errors_total`` (tags app, version), ``cuberay_serve_mirrored_total``
(tags app, version = the shadow) and ``cuberay_serve_latency_ms`` (histogram).
"""

from __future__ import annotations

import time

from ray.serve import metrics

from cuberay.platform.spec.serve import MAX_STEP_TIMEOUT_S
from cuberay.serve.traffic import VersionStats

LATENCY_BOUNDARIES_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
TAGS = ("app", "version")
# What a version keeps: a rollout step is judged on the samples since it started, for up to rollout.step_timeout.
KEEP_S = MAX_STEP_TIMEOUT_S


class ServeMetrics:
    """Counts one app's requests per version, both for Prometheus and for ``stats()``."""

    def __init__(self, app: str, window_s: float = KEEP_S) -> None:
        self.app = app
        self.window_s = window_s
        self.versions: dict[str, VersionStats] = {}
        self._requests = metrics.Counter("cuberay_serve_requests", description="Requests answered, per version.",
                                         tag_keys=TAGS)
        self._errors = metrics.Counter("cuberay_serve_errors", description="Requests that failed, per version.",
                                       tag_keys=TAGS)
        self._mirrored = metrics.Counter("cuberay_serve_mirrored", description="Requests copied to a shadow.",
                                         tag_keys=TAGS)
        self._latency = metrics.Histogram("cuberay_serve_latency_ms", description="Latency per version, ms.",
                                          boundaries=LATENCY_BOUNDARIES_MS, tag_keys=TAGS)

    def _of(self, version: str) -> VersionStats:
        if version not in self.versions:
            self.versions[version] = VersionStats(window_s=self.window_s)
        return self.versions[version]

    def record(self, version: str, latency_ms: float, error: bool, mirrored: bool = False) -> None:
        tags = {"app": self.app, "version": version}
        self._of(version).record(time.monotonic(), latency_ms, error, mirrored)
        if mirrored:
            self._mirrored.inc(tags=tags)
            return
        self._requests.inc(tags=tags)
        if error:
            self._errors.inc(tags=tags)
        self._latency.observe(latency_ms, tags=tags)

    def snapshot(self, window_s: float | None = None) -> dict:
        """Per version: running totals and the figures of the last ``window_s`` seconds."""
        now = time.monotonic()
        since = None if window_s is None else now - window_s
        return {name: {**stats.totals(), **stats.window(now, since)} for name, stats in self.versions.items()}
