"""The cuberay Grafana dashboard, generated from panel definitions.

Ray's Metrics page embeds only Ray's own panels, so cuberay's metrics get their
own dashboard, provisioned beside Ray's (same ``${datasource}`` and
``SessionName`` variables). The JSON is checked in at
configs/grafana/cuberay.json; regenerate it after changing a panel or a metric:

    python -m cuberay.platform.control.grafana            # write the file
    python -m cuberay.platform.control.grafana --check    # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuberay.platform.control.metrics import (
    ADMISSIONS,
    ALLOCATED,
    GUARANTEED,
    PREEMPTIONS,
    QUEUE_LENGTH,
    REJECTIONS,
    RUNNING_JOBS,
    WAIT_SECONDS,
)

DASHBOARD_PATH = Path(__file__).resolve().parents[3] / "configs" / "grafana" / "cuberay.json"
UID = "cuberayDashboard"
DATASOURCE = "${datasource}"
# Every query is scoped by the dashboard's variables. Cluster is the
# ray_io_cluster label KubeRay's PodMonitor adds (one RayCluster per tenant);
# on a bare Ray cluster the label is absent and ".*" still matches.
FILTERS = 'SessionName=~"$SessionName",ray_io_cluster=~"$Cluster",tenant=~"$tenant"'
RATE = "[$__rate_interval]"
WIDTH, HEIGHT, COLUMNS = 12, 8, 2


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]


def sel(metric: str, **labels: str) -> str:
    """`metric{<dashboard filters>,k="v",...}`."""
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{FILTERS}{extra}}}"


def gauge(metric: str, by: str = "tenant", **labels: str) -> str:
    # max, not sum: during a controller restart the old worker's series lingers
    # for two export intervals next to the new one (each carries its WorkerId).
    return f"max by ({by}) ({sel(metric, **labels)})"


def rate(metric: str, by: str = "tenant") -> str:
    return f"sum by ({by}) (rate({sel(metric)}{RATE}))"


def quantile(q: float) -> str:
    buckets = f"sum by (tenant, le) (rate({sel(WAIT_SECONDS.exported + '_bucket')}{RATE}))"
    return f"histogram_quantile({q}, {buckets})"


def _quota_panel(resource: str, label: str) -> Panel:
    return Panel(
        title=f"Allocated vs guaranteed {label} per tenant",
        description=f"{label} held by each tenant's admitted jobs, against its guaranteed quota. "
        "Above the line the tenant borrows idle capacity and may be preempted when the owner needs it.",
        unit="short",
        targets=(
            Target(gauge(ALLOCATED.exported, resource=resource), "{{tenant}} allocated"),
            Target(gauge(GUARANTEED.exported, resource=resource), "{{tenant}} guaranteed"),
        ),
    )


PANELS: tuple[Panel, ...] = (
    Panel(
        "Queue length per tenant",
        "Jobs waiting for admission (QUEUED or PREEMPTED). `cuberay queue` says why each one waits.",
        "short",
        (Target(gauge(QUEUE_LENGTH.exported), "{{tenant}}"),),
    ),
    Panel(
        "Running jobs per tenant",
        "Jobs holding an allocation (ADMITTED or RUNNING).",
        "short",
        (Target(gauge(RUNNING_JOBS.exported), "{{tenant}}"),),
    ),
    _quota_panel("GPU", "GPUs"),
    _quota_panel("CPU", "CPUs"),
    Panel(
        "Wait time to admission (p50, p95)",
        "Time from submission to admission, from the cuberay_wait_seconds histogram.",
        "s",
        (Target(quantile(0.5), "{{tenant}} p50"), Target(quantile(0.95), "{{tenant}} p95")),
    ),
    Panel(
        "Admissions and preemptions",
        "Jobs admitted, and jobs preempted to give a tenant back its guaranteed quota, per second.",
        "ops",
        (
            Target(rate(ADMISSIONS.exported), "{{tenant}} admitted"),
            Target(rate(PREEMPTIONS.exported), "{{tenant}} preempted"),
        ),
    ),
    Panel(
        "Rejections by reason",
        "Jobs refused at submission (quota, capacity, membership, ...), per second.",
        "ops",
        (Target(rate(REJECTIONS.exported, by="tenant, reason"), "{{tenant}} {{reason}}"),),
    ),
)


def _panel_json(panel: Panel, index: int) -> dict[str, Any]:
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": HEIGHT, "w": WIDTH, "x": (index % COLUMNS) * WIDTH, "y": (index // COLUMNS) * HEIGHT},
        "fieldConfig": {"defaults": {"unit": panel.unit, "min": 0}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {"datasource": DATASOURCE, "expr": t.expr, "legendFormat": t.legend, "refId": chr(ord("A") + i)}
            for i, t in enumerate(panel.targets)
        ],
    }


def _query_variable(name: str, query: str, description: str, all_value: str, multi: bool) -> dict[str, Any]:
    return {
        "name": name,
        "type": "query",
        "datasource": DATASOURCE,
        "description": description,
        "definition": query,
        "query": {"query": query, "refId": f"{name}Query"},
        "includeAll": True,
        "allValue": all_value,
        "multi": multi,
        "refresh": 2,
        "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "hide": 0,
    }


def _templating() -> dict[str, Any]:
    anchor = QUEUE_LENGTH.exported  # every tenant of every cuberay controller has this series
    return {
        "list": [
            {
                "name": "datasource",
                "type": "datasource",
                "query": "prometheus",
                "description": "The Prometheus that scrapes the Ray cluster.",
                "hide": 0,
                "current": {},
            },
            _query_variable(
                "SessionName", f"label_values({anchor}, SessionName)",
                "Ray session (one per cluster start).", ".+", False,
            ),
            _query_variable(
                "Cluster", f"label_values({anchor}, ray_io_cluster)",
                "KubeRay RayCluster (ray_io_cluster label); empty on a bare Ray cluster.", ".*", False,
            ),
            _query_variable(
                "tenant", f'label_values({anchor}{{SessionName=~"$SessionName"}}, tenant)',
                "cuberay tenant.", ".+", True,
            ),
        ]
    }


def build_dashboard() -> dict[str, Any]:
    return {
        "uid": UID,
        "title": "cuberay",
        "description": "cuberay queues, quotas and admissions per tenant (metrics from the cuberay controller).",
        "tags": ["cuberay", "ray"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "",
        "templating": _templating(),
        "annotations": {"list": []},
        "links": [],
        "panels": [_panel_json(p, i) for i, p in enumerate(PANELS)],
    }


def render() -> str:
    return json.dumps(build_dashboard(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the checked-in JSON is stale")
    parser.add_argument("--out", type=Path, default=DASHBOARD_PATH)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run python -m cuberay.platform.control.grafana", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
