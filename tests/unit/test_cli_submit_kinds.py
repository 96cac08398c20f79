"""Submit refuses a kind without an adapter (cuberay.kinds), before anything queues (and before Ray is reached).

Every kind the spec layer loads has an adapter today, so the refusal is exercised by taking one kind's adapter
out of the registry: the spec still loads it, as it would a model registered without an adapter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, NoReturn

import pytest

from cuberay.cli import main
from cuberay.errors import SpecError
from cuberay.kinds import registry
from cuberay.platform import client, runner
from cuberay.platform.control.convert import require_runnable
from cuberay.platform.spec import JOB_KINDS, load_spec

JOBS = Path(__file__).resolve().parents[2] / "configs" / "jobs"
REFUSED = "tune.yaml"  # its kind's adapter is taken out of the registry below


class Unreachable:
    def send(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise AssertionError("the refusal must come before the controller is asked")


@pytest.fixture(autouse=True)
def _no_controller(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(client, "connect", Unreachable().send)
    with client.using(Unreachable()):
        yield


@pytest.fixture
def without_tune(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_KINDS", {k: v for k, v in registry._KINDS.items() if k != "TuneJob"})


def test_every_kind_runs_and_every_example_passes_the_check() -> None:
    assert set(registry.names()) == set(JOB_KINDS)
    for path in sorted(JOBS.glob("*.yaml")):
        require_runnable(load_spec(path))  # no error


def test_refusal_names_the_kind_and_what_runs(without_tune: None) -> None:
    job = load_spec(JOBS / REFUSED)
    with pytest.raises(SpecError) as caught:
        require_runnable(job, str(JOBS / REFUSED))
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert "TuneJob jobs cannot be submitted" in message and "TrainJob, Task and ServeApp" in message
    assert message.startswith(f"{JOBS / REFUSED}: kind: ")


def test_cuberay_submit_and_run_refuse_with_exit_2(without_tune: None, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(JOBS / REFUSED)
    for argv in (["submit", path], ["submit", path, "--wait"], ["run", path]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "TuneJob jobs cannot be submitted" in err and "Traceback" not in err
    with pytest.raises(SpecError):
        client.submit(load_spec(JOBS / REFUSED))  # the Python API too


def test_ray_job_submit_driver_refuses_with_exit_2(without_tune: None, capsys: pytest.CaptureFixture[str]) -> None:
    """`ray job submit -- python -m cuberay.run --file X`: the driver exits 2 before joining Ray."""
    assert runner.main(["--file", str(JOBS / REFUSED)]) == 2
    assert "cannot be submitted" in capsys.readouterr().err
