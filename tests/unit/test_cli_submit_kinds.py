"""Submit refuses the kinds the platform does not run, before anything queues (and before Ray is reached)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import pytest

from cuberay.cli import main
from cuberay.errors import SpecError
from cuberay.platform import client, runner
from cuberay.platform.control.convert import RUNNABLE_KINDS, require_runnable
from cuberay.platform.spec import load_spec

JOBS = Path(__file__).resolve().parents[2] / "configs" / "jobs"
NOT_RUNNABLE = ["tune.yaml"]


@pytest.fixture(autouse=True)
def _no_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise AssertionError("the refusal must come before the controller is asked")

    monkeypatch.setattr(client, "_call", unreachable)
    monkeypatch.setattr(client, "connect", unreachable)


def test_runnable_kinds_are_what_the_runner_dispatches() -> None:
    assert RUNNABLE_KINDS == ("TrainJob", "Task", "ServeApp")
    for name in ("train-ddp.yaml", "train-command.yaml", "task.yaml", "demo-wait.yaml", "serve.yaml",
                 "serve-echo.yaml"):
        require_runnable(load_spec(JOBS / name))  # no error


@pytest.mark.parametrize("name", NOT_RUNNABLE)
def test_refusal_names_the_kind_and_what_runs(name: str) -> None:
    job = load_spec(JOBS / name)
    with pytest.raises(SpecError) as caught:
        require_runnable(job, str(JOBS / name))
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert f"{job.kind} jobs cannot be submitted" in message and "TrainJob, Task and ServeApp" in message
    assert message.startswith(f"{JOBS / name}: kind: ")


@pytest.mark.parametrize("name", NOT_RUNNABLE)
def test_cuberay_submit_and_run_refuse_with_exit_2(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    kind = load_spec(JOBS / name).kind
    for argv in (["submit", str(JOBS / name)], ["submit", str(JOBS / name), "--wait"], ["run", str(JOBS / name)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"{kind} jobs cannot be submitted" in err and "Traceback" not in err
    with pytest.raises(SpecError):
        client.submit(load_spec(JOBS / name))  # the Python API too


@pytest.mark.parametrize("name", NOT_RUNNABLE)
def test_ray_job_submit_driver_refuses_with_exit_2(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`ray job submit -- python -m cuberay.run --file X`: the driver exits 2 before joining Ray."""
    assert runner.main(["--file", str(JOBS / name)]) == 2
    assert "cannot be submitted" in capsys.readouterr().err
