"""Traffic decisions of the serving router, as pure objects (no Ray, no clock of their own).

* ``WeightedSplit``: which version answers a request. Smooth weighted round robin
  (nginx's), so a 90/10 split is exact over every 10 requests instead of only on
  average; a sticky key instead hashes into the same percentage ranges, so one
  user keeps one version for as long as the weights stay.
* ``MirrorSampler``: which requests are copied to the shadow version, again exact
  rather than random (every 10th for 10 %).
* ``TokenBucket``: the rate limit; says how long to wait when empty (``Retry-After``).
* ``VersionStats``: per-version requests, errors and latencies over a sliding
  window, which the rollout reads to decide whether a step is healthy.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping


class WeightedSplit:
    """Pick a version by percentage weights; deterministic and exact over each cycle."""

    def __init__(self, weights: Mapping[str, float]) -> None:
        live = {name: float(w) for name, w in weights.items() if w > 0}
        if not live:
            raise ValueError(f"no version has a weight above 0 in {dict(weights)}")
        self.weights = live
        self._total = sum(live.values())
        self._current = {name: 0.0 for name in live}
        # Cumulative ranges over [0, total) for sticky keys, in a stable (sorted) order.
        self._ranges: list[tuple[float, str]] = []
        edge = 0.0
        for name in sorted(live):
            edge += live[name]
            self._ranges.append((edge, name))

    def next(self) -> str:
        """The next version in smooth weighted round robin."""
        for name, weight in self.weights.items():
            self._current[name] += weight
        chosen = max(self._current, key=lambda n: self._current[n])
        self._current[chosen] -= self._total
        return chosen

    def for_key(self, key: str) -> str:
        """The version a sticky key maps to: a stable hash into the weight ranges."""
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        point = int.from_bytes(digest, "big") / 2**64 * self._total
        for edge, name in self._ranges:
            if point < edge:
                return name
        return self._ranges[-1][1]

    def pick(self, key: str | None = None) -> str:
        return self.next() if key is None else self.for_key(key)


class MirrorSampler:
    """Say yes to ``percent`` % of calls, spread evenly (an accumulator, not a coin)."""

    def __init__(self, percent: float) -> None:
        if not 0 <= percent <= 100:
            raise ValueError(f"mirror percent {percent} is outside 0..100")
        self.percent = percent
        self._credit = 0.0

    def __call__(self) -> bool:
        self._credit += self.percent
        if self._credit >= 100:
            self._credit -= 100
            return True
        return False


class TokenBucket:
    """``rate`` requests per second on average, bursts up to ``burst``; time is passed in."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"rate limit needs rate > 0 and burst >= 1, got rate={rate}, burst={burst}")
        self.rate, self.burst = float(rate), float(burst)
        self._tokens, self._at = float(burst), now

    def take(self, now: float) -> float:
        """0.0 if the request may pass (a token is spent), else the seconds until one is free."""
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self.rate


def retry_after_header(wait_s: float) -> str:
    """HTTP ``Retry-After`` is whole seconds; never 0, or clients retry at once."""
    return str(max(1, math.ceil(wait_s)))


MAX_SAMPLES = 100_000  # per version: a busy version's window is its last this many requests


@dataclass(slots=True)
class _Sample:
    at: float
    latency_ms: float
    error: bool


@dataclass
class VersionStats:
    """Requests of one version over the last ``window_s`` seconds (at most ``MAX_SAMPLES``), plus running totals."""

    window_s: float = 60.0
    requests: int = 0
    errors: int = 0
    mirrored: int = 0
    _recent: deque = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))

    def record(self, now: float, latency_ms: float, error: bool, mirrored: bool = False) -> None:
        if mirrored:
            self.mirrored += 1
        else:
            self.requests += 1
            self.errors += int(error)
        self._recent.append(_Sample(now, latency_ms, error))
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._recent and self._recent[0].at < now - self.window_s:
            self._recent.popleft()

    def window(self, now: float, since: float | None = None) -> dict:
        """Count, error rate and p50/p99 latency of the samples after ``since`` (default: the window)."""
        self._trim(now)
        start = now - self.window_s if since is None else since
        samples = [s for s in self._recent if s.at >= start]
        latencies = sorted(s.latency_ms for s in samples)
        errors = sum(s.error for s in samples)
        return {"count": len(samples), "errors": errors,
                "error_rate": errors / len(samples) if samples else 0.0,
                "p50_ms": percentile(latencies, 50), "p99_ms": percentile(latencies, 99)}

    def totals(self) -> dict:
        return {"requests": self.requests, "errors": self.errors, "mirrored": self.mirrored}


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values; None when there are none."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class Policy:
    """The router's whole traffic state for one config (``user_config``): split, mirror, limit.

    ``config``: ``{"weights": {version: percent}, "mirror": {"version", "percent"} | None,
    "rate_limit": {"requests_per_s", "burst"} | None, "sticky_header": str | None}``.
    """

    def __init__(self, config: Mapping, now: float) -> None:
        self.config = dict(config)
        self.split = WeightedSplit(config["weights"])
        mirror = config.get("mirror") or None
        self.shadow = mirror["version"] if mirror else None
        self._mirror = MirrorSampler(float(mirror["percent"])) if mirror else None
        limit = config.get("rate_limit") or None
        self.bucket = (TokenBucket(float(limit["requests_per_s"]), float(limit.get("burst") or 1), now)
                       if limit else None)
        self.sticky_header = config.get("sticky_header") or None

    def admit(self, now: float) -> float:
        """0.0 to serve the request, else seconds to wait (answer 429)."""
        return self.bucket.take(now) if self.bucket else 0.0

    def route(self, key: str | None = None) -> tuple[str, str | None]:
        """(version that answers, shadow version to copy the request to or None)."""
        version = self.split.pick(key)
        shadow = self.shadow if self._mirror is not None and self._mirror() else None
        return version, shadow
