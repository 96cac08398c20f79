"""NNI's trial API answered by the bridge: in-process channel, and NNI's file channel for command trials."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import nni
import pytest

from cuberay.tune.nni_bridge import (
    MetricsReader,
    TrialFailed,
    run_command_trial,
    run_function_trial,
    takes_config,
    to_tune_result,
    write_parameters,
)


def nni_style_trial():
    params = nni.get_next_parameter()
    for epoch in range(params["epochs"]):
        nni.report_intermediate_result(params["lr"] * (epoch + 1))
    nni.report_final_result({"default": params["lr"] * 10, "loss": 0.5, "done": 1})


def test_an_nni_style_function_gets_its_config_and_its_reports_reach_tune():
    got: list[dict] = []
    run_function_trial(nni_style_trial, {"lr": 0.1, "epochs": 3}, metric="acc", report=got.append,
                       ids=("exp", "t_00004", 4))
    assert [r["acc"] for r in got] == pytest.approx([0.1, 0.2, 0.3, 1.0])
    assert [r["nni_final"] for r in got] == [False, False, False, True]
    assert [r["nni_sequence"] for r in got[:3]] == [0, 1, 2]
    assert got[-1]["loss"] == 0.5 and got[-1]["nni_done"] == 1  # Tune's own key kept under a prefix
    assert nni.get_trial_id() == "t_00004" and nni.get_sequence_id() == 4 and nni.get_experiment_id() == "exp"


def test_each_trial_in_a_reused_process_starts_clean():
    first: list[dict] = []
    second: list[dict] = []
    run_function_trial(nni_style_trial, {"lr": 1.0, "epochs": 2}, metric="m", report=first.append,
                       ids=("e", "t_1", 1))
    run_function_trial(nni_style_trial, {"lr": 2.0, "epochs": 1}, metric="m", report=second.append,
                       ids=("e", "t_2", 2))
    assert second[0] == {"m": 2.0, "nni_final": False, "nni_sequence": 0}
    assert nni.get_current_parameter("lr") == 2.0 and nni.get_trial_id() == "t_2"


def test_a_ray_style_function_takes_the_config_and_may_use_nni_too():
    seen = {}

    def ray_style(config):
        seen.update(config)
        nni.report_final_result(config["x"])

    got: list[dict] = []
    run_function_trial(ray_style, {"x": 3}, metric="m", report=got.append, ids=("e", "t", 0))
    assert seen == {"x": 3} and got == [{"m": 3.0, "nni_final": True, "nni_sequence": 0}]
    assert takes_config(ray_style) and not takes_config(nni_style_trial)


def test_a_trial_that_reports_nothing_or_garbage_fails_with_the_reason():
    def silent():
        nni.get_next_parameter()

    with pytest.raises(TrialFailed, match=r"reported no 'acc': call nni.report_final_result"):
        run_function_trial(silent, {}, metric="acc", report=lambda r: None, ids=("e", "t", 0))

    def garbage():
        nni.get_next_parameter()
        nni.report_final_result("high")

    with pytest.raises(TrialFailed, match=r"reported 'high' for 'acc'; NNI metrics are a number"):
        run_function_trial(garbage, {}, metric="acc", report=lambda r: None, ids=("e", "t", 0))


def test_reserved_and_clashing_keys_are_renamed():
    r = to_tune_result("acc", {"default": 1, "acc": 5, "training_iteration": 9}, final=True, sequence=0)
    assert r["acc"] == 1.0 and r["nni_acc"] == 5 and r["nni_training_iteration"] == 9


def test_metrics_reader_waits_for_whole_frames(tmp_path):
    path = tmp_path / "metrics"
    frame = nni.dump({"type": "FINAL", "sequence": 0, "value": nni.dump(0.5)}).encode() + b"\n"
    data = b"ME%06d%b" % (len(frame), frame)
    reader = MetricsReader(path)
    assert reader.read() == []
    path.write_bytes(data[:10])
    assert reader.read() == []
    with open(path, "ab") as f:
        f.write(data[10:] + data)
    assert [m["value"] for m in reader.read()] == [0.5, 0.5]


TRIAL_SCRIPT = textwrap.dedent("""
    import os, nni
    params = nni.get_next_parameter()
    for i in range(params["epochs"]):
        nni.report_intermediate_result(params["lr"] * (i + 1))
    nni.report_final_result(params["lr"] * 10)
    print("trial", nni.get_trial_id(), os.environ["NNI_PLATFORM"], os.getcwd())
""")


def test_an_unmodified_command_trial_speaks_nnis_file_channel(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "trial.py").write_text(TRIAL_SCRIPT)
    got: list[dict] = []
    run_command_trial(f"{sys.executable} trial.py", {"lr": 0.5, "epochs": 2}, metric="acc", report=got.append,
                      sys_dir=tmp_path / "nni", code_dir=str(tmp_path / "code"), ids=("e", "t_00003", 3))
    assert [(r["acc"], r["nni_final"]) for r in got] == [(0.5, False), (1.0, False), (5.0, True)]
    log = (tmp_path / "nni" / "trial.log").read_text()
    assert f"trial t_00003 local {tmp_path / 'code'}" in log


def test_a_failing_or_silent_command_trial_fails_with_its_output(tmp_path):
    with pytest.raises(TrialFailed, match=r"(?s)exited with code 3.*boom"):
        run_command_trial("echo boom; exit 3", {}, metric="acc", report=lambda r: None, sys_dir=tmp_path / "a",
                          code_dir=str(tmp_path), ids=("e", "t", 0))
    with pytest.raises(TrialFailed, match=r"reported no 'acc'"):
        run_command_trial("true", {}, metric="acc", report=lambda r: None, sys_dir=tmp_path / "b",
                          code_dir=str(tmp_path), ids=("e", "t", 0))


def test_parameter_file_is_what_nnis_local_channel_reads(tmp_path, monkeypatch):
    from nni.runtime.trial_command_channel.local_legacy import LocalLegacyTrialCommandChannel

    write_parameters(tmp_path, {"lr": 0.1}, 7)
    monkeypatch.setattr("nni.runtime.trial_command_channel.local_legacy.trial_env_vars",
                        type("Env", (), {"NNI_SYS_DIR": str(tmp_path), "NNI_OUTPUT_DIR": str(tmp_path),
                                         "REUSE_MODE": None, "NNI_PLATFORM": "local", "MULTI_PHASE": None})())
    record = LocalLegacyTrialCommandChannel().receive_parameter()
    assert record["parameters"] == {"lr": 0.1} and record["parameter_id"] == 7
    assert Path(tmp_path / ".nni").is_dir()


def test_trial_number_comes_from_tunes_trial_directory_name():
    from cuberay.tune.nni_bridge import trial_index

    assert trial_index("/r/exp/nni_trial_85227775_12_x1=4.55,x2=4.04_2026-11-30_10-58-35", "85227775") == 12
    assert trial_index("/r/exp/something-else", "85227775") == 0
