"""``--wait`` wherever work starts, with one exit code per end: 0 SUCCEEDED (or CANCELLED), 1 FAILED.

The CLI is walked (as tests/integration/test_dead_controller.py walks it): a command that starts work must take
``--wait``, or, where it waits already, ``--no-wait``, or be listed below as always waiting, with the reason.
The pipeline commands' waits run against the in-process controller (tests/unit/local_cluster.py).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from cuberay.cli import _register, app, main, progress
from cuberay.platform import client
from cuberay.platform.transport.in_process import InProcess
from tests.unit.local_cluster import controller  # noqa: F401 (a fixture)
from tests.unit.test_pipeline_by_path import Drivers

# Commands that start work: each takes --wait (serve deploy: --no-wait, it waits by default).
STARTS_WORK = {"submit", "pipeline submit", "pipeline run", "tune import", "serve deploy"}
# Commands that start work and always wait, so a --wait would be a no-op; their help says they wait.
WAIT_ALWAYS = {
    "run": "it is the job's driver: it waits in the queue, then runs the job in this process until it ends",
    "serve rollout": "a rollout is its steps over time; it ends with the rollout (exit 1 if it rolled back)",
}


def _commands() -> dict[str, Any]:
    """Every command (``"pipeline submit"`` -> its typer command), walked from the CLI itself."""
    _register()
    found: dict[str, Any] = {}

    def walk(group: typer.Typer, prefix: str) -> None:
        for command in group.registered_commands:
            found[prefix + (command.name or command.callback.__name__)] = command
        for sub in group.registered_groups:
            walk(sub.typer_instance, prefix + sub.name + " ")

    walk(app, "")
    return found


def _flags(command: Any) -> set[str]:
    """A command's option flags; ``--wait/--no-wait`` counts as both."""
    return {flag for param in inspect.signature(command.callback).parameters.values()
            if isinstance(param.default, typer.models.OptionInfo)
            for decl in param.default.param_decls for flag in decl.split("/")}


def test_every_command_that_starts_work_can_wait() -> None:
    commands = _commands()
    assert STARTS_WORK | set(WAIT_ALWAYS) <= set(commands), "a command named here is gone: update the lists"
    lacking = sorted(name for name in STARTS_WORK if "--wait" not in _flags(commands[name]))
    assert not lacking, f"these start work but take no --wait: {lacking}"
    assert "--no-wait" in _flags(commands["serve deploy"])  # it waits unless told not to
    for name, why in WAIT_ALWAYS.items():
        assert "--wait" not in _flags(commands[name]), f"{name} always waits ({why}): a --wait would be a no-op"
        assert "waits" in (commands[name].callback.__doc__ or ""), f"{name}'s help must say that it waits"


# ------------------------------------------------------------------ the pipeline waits, against a controller

def _pipeline(tmp_path: Path, name: str, steps: int = 2) -> str:
    task = {"kind": "Task", "spec": {"resources": {"cpu": "1", "memory": "256Mi"}, "command": "echo hi"}}
    spec = {"apiVersion": "cuberay.io/v1alpha1", "kind": "Pipeline", "metadata": {"name": name, "tenant": "vision"},
            "spec": {"steps": [{"name": f"s{i}", "job": task, **({"depends_on": [f"s{i - 1}"]} if i else {})}
                               for i in range(steps)]}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.fixture
def alice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBERAY_USER", "alice")
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(progress, "POLL_S", 0.05)


@pytest.mark.parametrize(("fail", "code", "state"), [(set(), 0, "SUCCEEDED"), ({"flow-s1"}, 1, "FAILED")])
def test_pipeline_submit_wait_follows_the_run_and_exits_by_its_end(
        controller: InProcess, alice: None, tmp_path: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
        fail: set[str], code: int, state: str) -> None:
    drivers = Drivers(controller, fail)
    try:
        assert main(["pipeline", "submit", _pipeline(tmp_path, "flow"), "--wait"]) == code
    finally:
        drivers.stop.set()
    out, err = capsys.readouterr()
    assert "Run 'vision-flow-r1' submitted" in out and f"Run 'vision-flow-r1' {state.lower()}" in out
    assert "vision-flow-r1: RUNNING: 0/2 steps ended; running s0" in err  # a line per change, on stderr
    assert f"vision-flow-r1: {state}" in err
    if code:
        assert "pipeline run 'vision-flow-r1' FAILED" in err and "cuberay pipeline status vision-flow-r1" in err


def test_pipeline_run_wait_prints_the_record_only_as_json(controller: InProcess, alice: None,  # noqa: F811
                                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pipeline", "submit", _pipeline(tmp_path, "again", steps=1), "--no-run"]) == 0
    capsys.readouterr()
    drivers = Drivers(controller, set())
    try:
        assert main(["pipeline", "run", "again", "--wait", "-o", "json"]) == 0
    finally:
        drivers.stop.set()
    out = capsys.readouterr().out
    assert json.loads(out)["state"] == "SUCCEEDED" and json.loads(out)["id"] == "vision-again-r1"


def test_pipeline_submit_wait_without_a_run_says_how_to_follow_one(controller: InProcess, alice: None,  # noqa: F811
                                                                   tmp_path: Path, capsys) -> None:
    assert main(["pipeline", "submit", _pipeline(tmp_path, "later"), "--no-run", "--wait"]) == 2
    err = capsys.readouterr().err
    assert "--no-run starts none" in err and "cuberay pipeline run NAME --wait" in err
    assert main(["pipeline", "run", "later"]) == 4  # refused before anything was stored


def test_a_long_wait_without_news_still_prints_a_line(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from rich.console import Console

    monkeypatch.setattr(progress, "STILL_S", 0.0)
    answers = iter(["QUEUED", "QUEUED", "DONE"])
    console = Console(stderr=True, force_terminal=False)
    assert progress.follow("x-1", console, lambda _ref: next(answers), str, lambda a: a == "DONE",
                           poll_s=0.0) == "DONE"
    err = capsys.readouterr().err
    assert "x-1: QUEUED\n" in err and "x-1: QUEUED (still, after 0s)" in err and "x-1: DONE" in err


def test_a_wait_rides_out_a_controller_restart() -> None:
    """--wait polls through restart-riding reads: a restart mid-wait is waited out, not an exit."""
    import io

    from rich.console import Console

    from cuberay.errors import ControllerRestartingError
    from cuberay.platform.policy.states import JobState
    from tests.unit.test_store import job

    done = job().model_copy(update={"state": JobState.SUCCEEDED, "message": "ok"})

    class Restarting:
        calls = 0

        def send(self, method: str, caller: object, args: tuple, kwargs: dict, timeout: float) -> object:
            self.calls += 1
            if self.calls <= 2:
                raise ControllerRestartingError("the cuberay controller is restarting")
            return done

    transport = Restarting()
    with client.using(transport):
        record = progress.watch(done.id, Console(file=io.StringIO()), poll_s=0)
    assert record.state == JobState.SUCCEEDED and transport.calls == 3


def test_the_submitted_line_names_the_jobs_own_tenant_and_never_fails_after_the_submit() -> None:
    from cuberay.cli.jobs_cmd import placed
    from cuberay.errors import AdmissionError

    def refused() -> dict[str, str]:
        raise AdmissionError("the platform file changed since the submit")

    assert placed("vision", lambda: {"tenant": "vision", "text": "tenant vision (CUBERAY_TENANT)"}) == \
        "tenant vision (CUBERAY_TENANT)"
    # A repeated request id returned an earlier job of another tenant: the reason would be about this submit.
    assert placed("nlp", lambda: {"tenant": "vision", "text": "tenant vision (CUBERAY_TENANT)"}) == "tenant nlp"
    assert placed("vision", refused) == "tenant vision"
