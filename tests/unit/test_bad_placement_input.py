"""Bad input around GPU sharing and placement: clear errors (what was seen, the rule, the fix), exit 2 or 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuberay.cli import main

PLATFORM = """\
apiVersion: cuberay.io/v1alpha1
kind: Platform
metadata: {name: shared}
spec:
  node_pools:
    - {name: gpu, nodes: 2, resources: {cpu: "8", memory: 32Gi, gpu: "2"}}
    - {name: cpu, nodes: 1, resources: {cpu: "32", memory: 64Gi}}
  tenants:
    - {name: team, members: ["*"], quota: {guaranteed: {cpu: "48", gpu: "4"}}}
"""

JOB = """\
apiVersion: cuberay.io/v1alpha1
kind: Task
metadata: {{name: shares, tenant: team}}
spec:
  workers: {workers}
  placement: {placement}
  resources: {{cpu: "{cpu}", gpu: "{gpu}"}}
  command: "true"
"""


def _validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], *, workers: int = 1, placement: str = "auto",
              cpu: str = "1", gpu: str = "0.5") -> tuple[int, str]:
    platform = tmp_path / "platform.yaml"
    platform.write_text(PLATFORM)
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(workers=workers, placement=placement, cpu=cpu, gpu=gpu))
    code = main(["spec", "validate", str(job), "--platform", str(platform)])
    return code, " ".join(capsys.readouterr().err.split())


def test_the_fixture_job_is_valid(tmp_path, capsys):
    assert _validate(tmp_path, capsys)[0] == 0


def test_a_fraction_above_one_card_is_a_spec_error(tmp_path, capsys):
    code, err = _validate(tmp_path, capsys, gpu="1.5")
    assert code == 2
    assert "'1.5'" in err and "must be whole" in err and "ask for 2" in err and "fraction below 1" in err


def test_an_unknown_placement_is_a_spec_error_that_lists_the_choices(tmp_path, capsys):
    code, err = _validate(tmp_path, capsys, placement="fragg")
    assert code == 2
    assert "'fragg'" in err and "'frag'" in err and "'best_fit'" in err and "did you mean 'frag'" in err


def test_shares_that_no_node_can_hold_together_are_refused_with_the_card_rule(tmp_path, capsys):
    # Two cards of 0.4 free each hold one share of 0.6 apiece: five shares never fit one node.
    code, err = _validate(tmp_path, capsys, workers=3, placement="strict_pack", cpu="0", gpu="0.6")
    assert code == 3
    assert "strict_pack needs all 3 workers on one node but a node holds at most 2" in err
    assert "a card holds 1 share(s) of 0.6" in err and "use placement pack" in err


def test_a_share_without_the_cpus_beside_it_is_refused(tmp_path, capsys):
    # The GPU nodes have 8 CPUs; the 32-CPU node has no card.
    code, err = _validate(tmp_path, capsys, cpu="12", gpu="0.5")
    assert code == 3
    assert "one worker needs" in err and "GPU=2" in err  # the largest node with cards, not the CPU node
    assert "a share of a card runs on a node that also has the worker's other resources free" in err


def test_sim_refuses_an_unknown_placement_and_a_bad_demand_stop(capsys):
    trace = str(Path(__file__).resolve().parents[2] / "configs" / "sim" / "trace-example.csv")
    assert main(["sim", trace, "--nodes", "2", "--placement", "fragg"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--placement 'fragg' is not a placement policy" in err and "frag" in err
    assert main(["sim", trace, "--nodes", "2", "--until", "-5%"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "percentage above 0" in err and "100%" in err


def test_sim_stops_at_arrived_demand_and_compares_placements(capsys):
    import json

    trace = str(Path(__file__).resolve().parents[2] / "configs" / "sim" / "trace-example.csv")
    assert main(["sim", trace, "--nodes", "4", "--gpus-per-node", "4", "--until", "50%", "--placement", "frag",
                 "--placement", "best_fit", "-o", "json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert [r["placement"] for r in reports] == ["frag", "best_fit"]
    for r in reports:
        assert 0.5 <= r["arrived_gpu_demand"] < 1.0 and r["finished"] < r["jobs"]
