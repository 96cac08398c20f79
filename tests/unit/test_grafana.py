"""The Grafana dashboard queries only metrics cuberay exports, and the checked-in JSON is current.

Also checks the metric definitions themselves: Ray silently discards a metric
whose name is invalid, so a bad name would only show up as an empty dashboard.
"""

from __future__ import annotations

import json
import re

import pytest

from cuberay.platform.control import grafana
from cuberay.platform.control import metrics as m

SERIES = re.compile(r"\bray_cuberay_\w+")
EXPECTED_FILTERS = ('SessionName=~"$SessionName"', 'tenant=~"$tenant"')


def exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def exported_series() -> set[str]:
    return {s for d in m.METRICS for s in d.exported_series}


def test_metric_names_are_valid_for_ray_and_unique() -> None:
    names = [d.name for d in m.METRICS]
    assert len(names) == len(set(names))
    for d in m.METRICS:
        assert m.METRIC_NAME_RE.match(d.name), f"{d.name!r}: Ray would discard it"
        assert d.name.startswith("cuberay_")
        assert not set(d.tag_keys) & m.RAY_RESERVED_LABELS, d.tag_keys
        assert "job" not in " ".join(d.tag_keys), "a job id tag would explode the number of series"


def test_name_check_rejects_what_ray_discards() -> None:
    for bad in ("9lives", "cuberay-queue", "cuberay queue", "cuberay:queue", ""):
        assert not m.METRIC_NAME_RE.match(bad), bad


def test_exported_names_follow_ray() -> None:
    assert m.QUEUE_LENGTH.exported == "ray_cuberay_queue_length"
    assert m.ADMISSIONS.exported == "ray_cuberay_admissions_total"
    assert m.WAIT_SECONDS.exported_series == (
        "ray_cuberay_wait_seconds_bucket", "ray_cuberay_wait_seconds_sum", "ray_cuberay_wait_seconds_count",
    )
    assert m.WAIT_SECONDS.boundaries[0] == 1 and m.WAIT_SECONDS.boundaries[-1] == 86400
    assert list(m.WAIT_SECONDS.boundaries) == sorted(set(m.WAIT_SECONDS.boundaries))


def test_every_query_uses_exported_metrics_and_the_dashboard_filters() -> None:
    dashboard = grafana.build_dashboard()
    used: set[str] = set()
    for expr in exprs(dashboard):
        found = set(SERIES.findall(expr))
        assert found, f"query uses no cuberay metric: {expr}"
        assert found <= exported_series(), f"{expr} uses {found - exported_series()}, which cuberay never exports"
        for f in EXPECTED_FILTERS:
            assert f in expr, f"{expr} ignores the dashboard variable ({f})"
        assert expr.count("(") == expr.count(")"), expr
        used |= found
    # Each metric is on the dashboard (histograms through their buckets).
    for d in m.METRICS:
        assert set(d.exported_series) & used, f"{d.name} is exported but on no panel"


def test_dashboard_has_the_panels_operators_look_for() -> None:
    dashboard = grafana.build_dashboard()
    all_exprs = "\n".join(exprs(dashboard))
    assert "histogram_quantile(0.5," in all_exprs and "histogram_quantile(0.95," in all_exprs
    for resource in ("GPU", "CPU"):
        assert f'ray_cuberay_allocated{{{grafana.FILTERS},resource="{resource}"}}' in all_exprs
        assert f'ray_cuberay_guaranteed{{{grafana.FILTERS},resource="{resource}"}}' in all_exprs
    assert "by (tenant, reason)" in all_exprs
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"datasource", "SessionName", "tenant"} <= set(variables)
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        assert panel["datasource"] == "${datasource}"
        assert all(t["datasource"] == "${datasource}" for t in panel["targets"])


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = grafana.build_dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not area & cells, f"panel {p['title']!r} overlaps another"
        cells |= area


def test_checked_in_json_is_the_generated_one() -> None:
    path = grafana.DASHBOARD_PATH
    assert path.exists(), f"{path} is missing: run python -m cuberay.platform.control.grafana"
    assert path.read_text() == grafana.render(), f"{path} is stale: run python -m cuberay.platform.control.grafana"
    assert json.loads(path.read_text())["uid"] == grafana.UID


def test_check_mode_reports_a_stale_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cuberay.json"
    assert grafana.main(["--check", "--out", str(out)]) == 1
    assert grafana.main(["--out", str(out)]) == 0
    assert grafana.main(["--check", "--out", str(out)]) == 0
    out.write_text(out.read_text().replace("Queue length", "Queue size"))
    assert grafana.main(["--check", "--out", str(out)]) == 1
    assert "stale" in capsys.readouterr().err


def test_generator_and_metric_names_need_no_ray() -> None:
    """The dashboard can be rebuilt (and these tests run) where Ray is not installed."""
    import subprocess
    import sys

    probe = "import sys, cuberay.platform.control.grafana; print('ray' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=grafana.DASHBOARD_PATH.parents[2], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
