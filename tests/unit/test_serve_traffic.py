"""The serving router's pure traffic decisions: split, sticky keys, mirror, rate limit, stats."""

from __future__ import annotations

from collections import Counter

import pytest

from cuberay.serve.traffic import (
    MirrorSampler,
    Policy,
    TokenBucket,
    VersionStats,
    WeightedSplit,
    percentile,
    retry_after_header,
)


def test_weighted_split_is_exact_over_each_cycle() -> None:
    split = WeightedSplit({"v1": 90, "v2": 10})
    counts = Counter(split.next() for _ in range(2000))
    assert counts == {"v1": 1800, "v2": 200}
    # smooth: v2 never gets two in a row at 90/10
    picks = [split.next() for _ in range(100)]
    assert all(not (a == b == "v2") for a, b in zip(picks, picks[1:]))


def test_zero_weights_get_nothing_and_all_zero_is_refused() -> None:
    split = WeightedSplit({"v1": 100, "v2": 0})
    assert {split.next() for _ in range(50)} == {"v1"}
    with pytest.raises(ValueError, match="no version"):
        WeightedSplit({"v1": 0})


def test_sticky_keys_keep_their_version_and_follow_the_weights() -> None:
    split = WeightedSplit({"a": 70, "b": 30})
    assert all(split.for_key("user-7") == split.for_key("user-7") for _ in range(5))
    counts = Counter(split.for_key(f"user-{i}") for i in range(4000))
    assert abs(counts["a"] / 4000 - 0.7) < 0.03


def test_mirror_sampler_takes_the_exact_share() -> None:
    sample = MirrorSampler(10)
    assert sum(sample() for _ in range(1000)) == 100
    assert sum(MirrorSampler(0)() for _ in range(100)) == 0
    with pytest.raises(ValueError):
        MirrorSampler(120)


def test_token_bucket_bursts_then_refills_and_says_how_long_to_wait() -> None:
    bucket = TokenBucket(rate=2, burst=3, now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = bucket.take(0.0)
    assert wait == pytest.approx(0.5)
    assert retry_after_header(wait) == "1"
    assert bucket.take(0.5) == 0.0  # one token came back after 1/rate seconds
    assert bucket.take(0.5) > 0


def test_policy_routes_mirrors_and_limits_from_one_config() -> None:
    policy = Policy({"weights": {"v1": 90, "v2": 10}, "mirror": {"version": "v2", "percent": 10},
                     "rate_limit": {"requests_per_s": 1, "burst": 5}}, now=0.0)
    routes = [policy.route() for _ in range(100)]
    assert Counter(v for v, _ in routes) == {"v1": 90, "v2": 10}
    assert sum(s == "v2" for _, s in routes) == 10
    assert [policy.admit(0.0) == 0.0 for _ in range(6)] == [True] * 5 + [False]
    assert Policy({"weights": {"v1": 100}}, now=0.0).admit(0.0) == 0.0  # no limit set


def test_version_stats_window_error_rate_and_p99() -> None:
    stats = VersionStats(window_s=10)
    for i in range(100):
        stats.record(now=float(i) / 10, latency_ms=float(i), error=i >= 90)
    stats.record(now=9.9, latency_ms=1.0, error=False, mirrored=True)
    assert stats.totals() == {"requests": 100, "errors": 10, "mirrored": 1}
    figures = stats.window(now=9.9, since=9.0)
    assert figures["count"] == 11 and figures["errors"] == 10
    assert stats.window(now=100.0)["count"] == 0  # all older than the window
    assert percentile(sorted(float(x) for x in range(1, 101)), 99) == 99.0
    assert percentile([], 50) is None
