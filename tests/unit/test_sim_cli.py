"""``cuberay sim`` through the real CLI entry point (``cuberay.cli.main``), on the tiny example trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cuberay.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]
TRACE = str(REPO_ROOT / "configs" / "sim" / "trace-example.csv")
CLUSTER = str(REPO_ROOT / "configs" / "sim" / "cluster-example.yaml")
PLATFORM = str(REPO_ROOT / "configs" / "platform.yaml")
SMALL = ["--nodes", "2", "--gpus-per-node", "4"]


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]):
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    return json.loads(out)  # the whole of stdout is the JSON document: no progress mixed in


def test_json_prints_one_object_per_run(capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(capsys, ["sim", TRACE, *SMALL, "-o", "json"])
    assert isinstance(report, dict)
    assert report["policy"] == "cuberay" and report["jobs"] == 20 and report["finished"] == 20
    for key in ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_wait_s", "max_wait_s_large", "makespan_s",
                "gpu_utilization", "gpu_utilization_while_queued", "goodput", "gpu_allocated_fraction", "preemptions", "rejected", "wall_s",
                "decisions_per_s", "tenants"):
        assert key in report
    assert set(report["tenants"]) == {"vision", "nlp", "research"}
    assert "timeline" not in report


def test_several_policies_give_a_list_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    reports = _json(capsys, ["sim", TRACE, *SMALL, "--policy", "fifo", "--policy", "cuberay,fifo-backfill",
                             "-o", "json"])
    assert [r["policy"] for r in reports] == ["fifo", "cuberay", "fifo-backfill"]
    assert all(r["finished"] == 20 for r in reports)


def test_until_reports_the_state_then(capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(capsys, ["sim", TRACE, *SMALL, "--until", "1h", "-o", "json"])
    assert report["finished"] < 20
    assert report["running_at_end"] > 0
    assert report["finished"] + report["running_at_end"] + report["queued_at_end"] <= 20


def test_platform_file_supplies_quotas_and_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(capsys, ["sim", TRACE, "--platform", PLATFORM, "-o", "json"])
    assert report["nodes"] == 3 and report["gpus"] == 4 and report["rejected"] == 0


def test_cluster_file_and_yaml_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", TRACE, "--cluster", CLUSTER, "-o", "yaml"]) == 0
    report = yaml.safe_load(capsys.readouterr().out)
    assert report["nodes"] == 36 and report["finished"] == 20


def test_table_has_one_column_per_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", TRACE, *SMALL, "--policy", "cuberay", "--policy", "fifo"]) == 0
    captured = capsys.readouterr()
    assert "avg JCT (h)" in captured.out and "goodput" in captured.out
    assert "FIFO" in captured.out and "CUBERAY" in captured.out
    assert "20 jobs from" in captured.err  # progress goes to stderr


@pytest.mark.parametrize("argv", [
    ["sim", "no-such-trace.csv", *SMALL],
    ["sim", TRACE, *SMALL, "--until", "3x"],
    ["sim", TRACE, *SMALL, "--policy", "lottery"],
    ["sim", TRACE],  # no cluster given
    ["sim", TRACE, *SMALL, "--cluster", CLUSTER],
    ["sim", TRACE, "--cluster", "missing-nodes.yaml"],
    ["sim", TRACE, *SMALL, "--start", "2017-10-01"],  # a generic trace has no dates
])
def test_bad_input_exits_2_with_a_message(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "error" in captured.err.lower() and captured.out == ""


def test_missing_trace_names_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "no-such-trace.csv", *SMALL, "-o", "json"]) == 2
    assert "no-such-trace.csv" in capsys.readouterr().err


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason='--plot needs matplotlib: pip install "cuberay[plot]"')
    target = tmp_path / "sim.png"
    assert main(["sim", TRACE, *SMALL, "--policy", "cuberay", "--policy", "fifo", "--plot", str(target),
                 "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["policy"] == "cuberay"
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_table_shows_plain_utilisation_and_utilisation_while_jobs_wait(capsys: pytest.CaptureFixture[str]) -> None:
    from cuberay.cli.sim_cmd import table_rows
    from cuberay.platform.sim.cluster import uniform_cluster
    from cuberay.platform.sim.engine import simulate
    from cuberay.platform.sim.trace import TraceJob

    idle = simulate([TraceJob("a", 0, 100, gpus=2)], uniform_cluster(1, gpus_per_node=8))
    rows = {r["metric"]: r["cuberay"] for r in table_rows([idle])}
    assert rows["GPU utilisation"] == "25.0%" and rows["GPU utilisation while jobs wait"] == "0.0%"


def test_replays_side_by_side_report_exactly_what_one_after_the_other_does() -> None:
    import random

    from cuberay.cli import sim_replays
    from cuberay.platform.sim.cluster import uniform_cluster
    from cuberay.platform.sim.trace import TraceJob

    rng = random.Random(3)
    jobs = [TraceJob(f"j{i:05d}", i * 20.0, float(rng.randint(60, 4000)), workers=rng.choice([1, 1, 2, 4]),
                     tenant=rng.choice(["a", "b"])) for i in range(sim_replays.PARALLEL_FROM_JOBS)]
    replays = [sim_replays.Replay(jobs, uniform_cluster(4, 8), None, policy, None, 1800.0, 60.0, None, None, None,
                                  None) for policy in ("cuberay", "fifo")]
    side_by_side = sim_replays.run_all(replays)  # 2 processes when the machine has 2 cores
    alone = [sim_replays.run(r) for r in replays]
    clock = ("wall_s", "decisions_per_s", "cycle_p50_s", "cycle_p99_s")  # timings: the rest is the decisions
    assert [r.policy for r in side_by_side] == ["cuberay", "fifo"]
    for a, b in zip(side_by_side, alone):
        assert {k: v for k, v in a.to_dict().items() if k not in clock} == \
               {k: v for k, v in b.to_dict().items() if k not in clock}
