"""Pipelines whose steps are spec files by path (``{name: a, file: a.yaml}``), submitted to a real controller.

The client reads each step's file (relative to the pipeline file, or absolute) and sends the step inline; the
controller loads what it is sent again. Before the loader dropped ``file`` once it had read it, that second
load refused every such pipeline ("set job (inline) or file, not both"), from the CLI and from Python alike.
The steps' drivers are ended here as Ray would report them (tests/unit/local_cluster.py), a first attempt
failing where a test asks, so a run also retries.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

import cuberay.pipelines as pipelines
from cuberay.cli import main
from cuberay.errors import SpecError
from cuberay.platform import client
from cuberay.platform.policy.run_states import RunState
from cuberay.platform.spec.pipeline import load_pipeline
from cuberay.platform.transport.in_process import InProcess
from tests.unit.local_cluster import platform_spec, two_node_cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "configs" / "pipelines" / "by-path.yaml"
TASK = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Task", "metadata": {"name": "t"},
        "spec": {"workers": 1, "resources": {"cpu": "1", "memory": "256Mi"}, "command": "echo hi"}}


class Drivers:
    """Ends every step's driver as it starts: SUCCEEDED, or FAILED for the first attempt of ``fail_once``."""

    def __init__(self, local: InProcess, fail_once: set[str]) -> None:
        self.launcher = local.cluster.launched  # type: ignore[attr-defined]
        self.fail_once = set(fail_once)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(0.02):
            for sid, job in list(self.launcher.jobs.items()):
                if job["status"] != "RUNNING":
                    continue
                failing = next((s for s in self.fail_once if s in sid), None)
                if failing is not None:
                    self.fail_once.discard(failing)
                self.launcher.finish(sid, "FAILED" if failing else "SUCCEEDED")


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcess]:
    """The unit tier's controller, with the bundled examples' research tenant too; alice is in all three."""
    spec = platform_spec(tmp_path / "storage")
    research = {**spec["spec"]["tenants"][0], "name": "research", "members": ["alice"], "admins": []}
    spec["spec"]["tenants"].append(research)
    cluster = two_node_cluster()
    controller = InProcess(spec, cluster, installer="ops")
    controller.cluster = cluster  # type: ignore[attr-defined]
    monkeypatch.setenv("CUBERAY_USER", "alice")
    monkeypatch.setenv("COLUMNS", "250")
    try:
        with client.using(controller):
            yield controller
    finally:
        controller.close()


def _pipeline(folder: Path, name: str, files: list[str]) -> Path:
    steps: list[dict[str, Any]] = []
    for i, file in enumerate(files):
        steps.append({"name": f"s{i}", "file": file, "retries": 1, **({"depends_on": [f"s{i - 1}"]} if i else {})})
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline",
                                    "metadata": {"name": name, "tenant": "vision"}, "spec": {"steps": steps}}))
    return path


def _job_files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "jobs").mkdir()
    relative = tmp_path / "jobs" / "t.yaml"
    relative.write_text(yaml.safe_dump(TASK))
    absolute = tmp_path / "elsewhere.yaml"
    absolute.write_text(yaml.safe_dump({**TASK, "spec": {**TASK["spec"], "command": "echo there"}}))
    return relative, absolute


def test_a_loaded_pipeline_is_inline_and_its_dump_loads_again(tmp_path: Path) -> None:
    _relative, absolute = _job_files(tmp_path)
    pipe = load_pipeline(_pipeline(tmp_path, "p", ["jobs/t.yaml", str(absolute)]))
    assert [s.file for s in pipe.spec.steps] == [None, None]
    assert [s.job["spec"]["command"] for s in pipe.spec.steps] == ["echo hi", "echo there"]  # type: ignore[index]
    dumped = pipe.model_dump(mode="json")
    assert load_pipeline(dumped) == pipe  # what the controller does with what the client sends


def test_cli_submits_steps_by_relative_and_absolute_path_and_the_run_retries_and_succeeds(
        local: InProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _relative, absolute = _job_files(tmp_path)
    path = _pipeline(tmp_path, "cli-flow", ["jobs/t.yaml", str(absolute)])
    drivers = Drivers(local, {"cli-flow-s1"})
    try:
        assert main(["pipeline", "submit", str(path)]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        assert "Pipeline 'vision/cli-flow' stored" in out and "Run 'vision-cli-flow-r1' submitted" in out
        run = pipelines.wait("vision-cli-flow-r1", timeout=60, poll_s=0.05)
    finally:
        drivers.stop.set()
    assert run.state == RunState.SUCCEEDED, run.message
    _, steps = pipelines.status(run.id)
    assert {s.name: (s.state.value, s.attempt) for s in steps} == {"s0": ("SUCCEEDED", 1), "s1": ("SUCCEEDED", 2)}


def test_python_submits_steps_by_path_and_the_stored_pipeline_runs_again(local: InProcess, tmp_path: Path) -> None:
    _relative, absolute = _job_files(tmp_path)
    path = _pipeline(tmp_path, "py-flow", [str(absolute), "jobs/t.yaml"])
    drivers = Drivers(local, set())
    try:
        info = pipelines.submit(path)  # a Path
        assert info["tenant"] == "vision" and info["run"] is not None
        first = pipelines.wait(info["run"].id, timeout=60, poll_s=0.05)
        again = pipelines.submit(str(path), run=False)  # the path as text: a new version, no run
        assert again["run"] is None
        second = pipelines.wait(pipelines.run("py-flow").id, timeout=60, poll_s=0.05)  # the stored one, by name
    finally:
        drivers.stop.set()
    assert first.state == second.state == RunState.SUCCEEDED


def test_the_by_path_example_validates_and_submits(local: InProcess, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "validate", str(EXAMPLE)]) == 0
    pipe = load_pipeline(EXAMPLE)
    assert all(s.file is None and s.job is not None for s in pipe.spec.steps)
    assert {s.job["metadata"]["name"] for s in pipe.spec.steps} == {"hello-gang"}  # type: ignore[index]
    drivers = Drivers(local, set())
    try:
        assert main(["pipeline", "submit", str(EXAMPLE)]) == 0, capsys.readouterr().err
        run = pipelines.wait("research-by-path-r1", timeout=60, poll_s=0.05)
    finally:
        drivers.stop.set()
    assert run.state == RunState.SUCCEEDED, run.message


def test_the_controller_never_reads_a_step_file_a_caller_sent(local: InProcess, tmp_path: Path) -> None:
    """A raw call naming a path is refused before any file is touched: paths are read where the pipeline file is."""
    secret = tmp_path / "job.yaml"
    secret.write_text(yaml.safe_dump({"apiVersion": "cuberay.io/v1alpha1", "kind": "Task",
                                      "metadata": {"name": "leak", "tenant": "vision"},
                                      "spec": {"command": "echo secret"}}))
    raw = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": "raw", "tenant": "vision"},
           "spec": {"steps": [{"name": "a", "file": str(secret)}]}}
    with pytest.raises(SpecError, match=r"carries each step's job inline") as refused:
        client.api().pipeline_submit(raw, "vision", False)
    assert refused.value.exit_code == 2 and "echo secret" not in str(refused.value)
    assert load_pipeline(raw).spec.steps[0].job is not None  # where the file is (the client), the same step loads


def test_pipeline_list_shows_each_readable_pipeline_with_its_next_ticks(
        local: InProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _relative, absolute = _job_files(tmp_path)
    on_request = _pipeline(tmp_path, "by-hand", [str(absolute)])
    nightly = yaml.safe_load(on_request.read_text())
    nightly["metadata"]["name"] = "nightly"
    nightly["spec"]["schedule"] = {"cron": "30 1 * * *", "start": "2099-01-01T00:00:00Z"}  # none due yet
    (tmp_path / "nightly.yaml").write_text(yaml.safe_dump(nightly))
    assert main(["pipeline", "submit", str(on_request), "--no-run"]) == 0
    assert main(["pipeline", "submit", str(tmp_path / "nightly.yaml")]) == 0
    capsys.readouterr()
    assert main(["pipeline", "list", "-o", "json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert set(listed) == {"by-hand", "nightly"}
    assert listed["by-hand"]["cron"] is None and listed["by-hand"]["next_ticks"] == []
    ticks = listed["nightly"]["next_ticks"]
    start = dt.datetime(2099, 1, 1, 1, 30, tzinfo=dt.timezone.utc).timestamp()
    assert ticks == [start, start + 86400, start + 2 * 86400]  # from the schedule's start, daily at 01:30 UTC
    assert listed["nightly"]["steps"] == ["s0"] and listed["nightly"]["tenant"] == "vision"
    assert main(["pipeline", "list"]) == 0
    table = capsys.readouterr().out
    assert "on request" in table and "2099-01-01 01:30 UTC" in table
    with client.acting_as("nina"):  # nlp only: vision's pipelines are not hers to read
        assert client.api().pipeline_list() == []
