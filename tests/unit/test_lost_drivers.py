"""A Ray Job that failed because its supervisor went away (its node died) is LOST, not FAILED: the controller runs
it again as a new attempt instead of spending the spec's max_failures (tests/integration/test_head_restart.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cuberay.platform.control.launcher import FAILED, LOST, RUNNING, SUCCEEDED, TERMINAL, _status


@dataclass
class Status:
    value: str


@dataclass
class Details:
    status: Status
    error_type: str | None = None
    driver_exit_code: int | None = None


@pytest.mark.parametrize("error_type", ["JOB_SUPERVISOR_ACTOR_DIED", "JOB_SUPERVISOR_ACTOR_START_FAILURE",
                                        "JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE"])
def test_a_failed_supervisor_without_an_exit_code_is_lost(error_type: str) -> None:
    assert _status(Details(Status(FAILED), error_type)) == LOST
    assert LOST in TERMINAL


@pytest.mark.parametrize("details", [
    Details(Status(FAILED), "JOB_ENTRYPOINT_COMMAND_ERROR", 1),     # the command failed: the job's own failure
    Details(Status(FAILED), "JOB_SUPERVISOR_ACTOR_DIED", 137),      # the command ran and exited: its code counts
    Details(Status(FAILED), "RUNTIME_ENV_SETUP_FAILURE"),           # the spec's runtime_env: fails every time
    Details(Status(FAILED)),
    Details(Status(SUCCEEDED)), Details(Status(RUNNING)),
])
def test_everything_else_keeps_rays_status(details: Details) -> None:
    assert _status(details) == details.status.value
