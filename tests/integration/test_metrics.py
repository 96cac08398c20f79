"""PlatformMetrics recorded inside an actor reach the head node's Prometheus endpoint."""

from __future__ import annotations

import time
import urllib.request
import uuid

import ray
from prometheus_client.parser import text_string_to_metric_families
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cuberay.platform.control import metrics as m

EXPORT_TIMEOUT_S = 60  # Ray exports every few seconds; 3.7 s measured on an idle machine


@ray.remote(num_cpus=0)
class Recorder:
    """Stands in for the controller actor: builds PlatformMetrics in a Ray worker."""

    def __init__(self) -> None:
        self.metrics = m.PlatformMetrics()

    def snapshot(self, per_tenant: dict[str, m.TenantStats]) -> None:
        self.metrics.observe_snapshot(per_tenant)

    def events(self, tenant: str) -> None:
        self.metrics.admitted(tenant, wait_s=42.0)
        self.metrics.admitted(tenant, wait_s=7200.0)
        self.metrics.preempted(tenant)
        self.metrics.rejected(tenant, "quota")
        self.metrics.rejected(tenant, "quota")


def scrape(node_id: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(series name, our labels) -> value, from one node's metrics endpoint, Ray's own labels dropped."""
    node = next(n for n in ray.nodes() if n["NodeID"] == node_id)
    url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("ray_cuberay_"):
                labels = frozenset((k, v) for k, v in s.labels.items() if k in ("tenant", "resource", "reason", "le"))
                series[(s.name, labels)] = s.value
    return series


def wait_for_series(node_id: str, expected: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> None:
    deadline = time.monotonic() + EXPORT_TIMEOUT_S
    while True:
        seen = scrape(node_id)
        missing = {k: v for k, v in expected.items() if seen.get(k) != v}
        if not missing:
            return
        if time.monotonic() > deadline:
            got = {k: seen.get(k) for k in missing}
            raise AssertionError(f"after {EXPORT_TIMEOUT_S}s these series are missing or wrong: {missing}; got {got}")
        time.sleep(0.5)


def labels(**kw: str) -> frozenset[tuple[str, str]]:
    return frozenset(kw.items())


def test_ray_accepts_every_cuberay_metric_name() -> None:
    from ray.util.metrics import (
        _VALID_METRIC_NAME_RE,  # Ray drops a metric that fails this, with a warning only
    )

    for d in m.METRICS:
        assert _VALID_METRIC_NAME_RE.match(d.name), d.name


def test_metrics_from_an_actor_appear_on_the_head_endpoint(ray_cluster) -> None:
    tenant = f"t-{uuid.uuid4().hex[:6]}"  # this test's own series
    recorder = Recorder.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(ray_cluster.head_node_id, soft=False)
    ).remote()
    try:
        # First tenant `tenant` with GPUs, then a snapshot where it is gone and only `other` is
        # left: one export wait checks both setting and resetting (Ray exports every ~10 s).
        other = f"{tenant}-b"
        first = m.TenantStats(queued=3, running=2, allocated={"GPU": 4.0, "CPU": 8.0}, guaranteed={"GPU": 8.0})
        second = m.TenantStats(queued=1, running=2, allocated={"CPU": 1.5}, guaranteed={"GPU": 2.0})
        ray.get(recorder.snapshot.remote({tenant: first}), timeout=60)
        ray.get([recorder.events.remote(tenant), recorder.snapshot.remote({other: second})], timeout=60)
        t, o = labels(tenant=tenant), labels(tenant=other)
        wait_for_series(
            ray_cluster.head_node_id,
            {
                ("ray_cuberay_queue_length", o): 1.0,
                ("ray_cuberay_running_jobs", o): 2.0,
                ("ray_cuberay_allocated", labels(tenant=other, resource="CPU")): 1.5,
                ("ray_cuberay_guaranteed", labels(tenant=other, resource="GPU")): 2.0,
                # `tenant` left the snapshot: its gauges were reset, not left stale.
                ("ray_cuberay_queue_length", t): 0.0,
                ("ray_cuberay_running_jobs", t): 0.0,
                ("ray_cuberay_allocated", labels(tenant=tenant, resource="GPU")): 0.0,
                ("ray_cuberay_guaranteed", labels(tenant=tenant, resource="GPU")): 0.0,
                ("ray_cuberay_admissions_total", t): 2.0,
                ("ray_cuberay_preemptions_total", t): 1.0,
                ("ray_cuberay_rejections_total", labels(tenant=tenant, reason="quota")): 2.0,
                ("ray_cuberay_wait_seconds_count", t): 2.0,
                ("ray_cuberay_wait_seconds_bucket", labels(tenant=tenant, le="60.0")): 1.0,  # the 42 s wait
                ("ray_cuberay_wait_seconds_bucket", labels(tenant=tenant, le="7200.0")): 2.0,
            },
        )
        # Every exported name the Grafana dashboard uses is one Ray really exports.
        exported = {name for name, _ in scrape(ray_cluster.head_node_id)}
        for d in m.METRICS:
            assert set(d.exported_series) <= exported, (d.exported_series, sorted(exported))
    finally:
        ray.kill(recorder)
